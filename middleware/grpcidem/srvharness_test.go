package grpcidem_test

import (
	"context"
	"net"
	"testing"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/backends/memory"
	"github.com/durable-go/durable/internal/faultproxy"
	"github.com/durable-go/durable/middleware/grpcidem"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// srvMethod is the one method of the hand-written test service: a
// structpb.Struct in, any message out (the handler chooses).
const srvMethod = "/grpcidem.servertest.Svc/Call"

// srvImpl is the test service's implementation: fn handles every call.
type srvImpl struct {
	fn func(ctx context.Context, in *structpb.Struct) (proto.Message, error)
}

var srvDesc = grpc.ServiceDesc{
	ServiceName: "grpcidem.servertest.Svc",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Call",
		Handler: func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
			in := new(structpb.Struct)
			if err := dec(in); err != nil {
				return nil, err
			}
			fn := srv.(*srvImpl).fn
			h := func(ctx context.Context, req any) (any, error) { return fn(ctx, req.(*structpb.Struct)) }
			if icpt == nil {
				return h(ctx, in)
			}
			return icpt(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: srvMethod}, h)
		},
	}},
	Streams: []grpc.StreamDesc{{
		StreamName:    "Stream",
		ServerStreams: true,
		Handler: func(srv any, ss grpc.ServerStream) error {
			return ss.SendMsg(&structpb.Struct{})
		},
	}},
}

// srvMemStore returns a Store over the memory backend.
func srvMemStore(t testing.TB, opts ...durable.Option) *durable.Store {
	t.Helper()
	s, err := durable.New(memory.NewStorage(memory.Options{}).Backend(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// srvStart serves fn behind the interceptors (none when icpt is nil) on a
// loopback listener, reached through a fault proxy, and returns a client
// connection.
func srvStart(t testing.TB, icpt grpc.UnaryServerInterceptor, stream grpc.StreamServerInterceptor, fn func(ctx context.Context, in *structpb.Struct) (proto.Message, error)) *grpc.ClientConn {
	t.Helper()
	var opts []grpc.ServerOption
	if icpt != nil {
		opts = append(opts, grpc.UnaryInterceptor(icpt))
	}
	if stream != nil {
		opts = append(opts, grpc.StreamInterceptor(stream))
	}
	s := grpc.NewServer(opts...)
	s.RegisterService(&srvDesc, &srvImpl{fn: fn})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(l)
	t.Cleanup(s.Stop)
	p, err := faultproxy.New(l.Addr().String(), faultproxy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	cc, err := grpc.NewClient(p.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// srvInterceptor builds the unary interceptor or fails the test.
func srvInterceptor(t testing.TB, store *durable.Store, o grpcidem.ServerOptions) grpc.UnaryServerInterceptor {
	t.Helper()
	icpt, err := grpcidem.UnaryServerInterceptor(store, o)
	if err != nil {
		t.Fatal(err)
	}
	return icpt
}
