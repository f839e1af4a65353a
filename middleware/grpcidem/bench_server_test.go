package grpcidem_test

import (
	"context"
	"net"
	"strconv"
	"testing"

	"github.com/durable-go/durable/middleware/grpcidem"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// benchServe serves the test service directly on loopback (no fault proxy).
func benchServe(b *testing.B, icpt grpc.UnaryServerInterceptor) *grpc.ClientConn {
	var opts []grpc.ServerOption
	if icpt != nil {
		opts = append(opts, grpc.UnaryInterceptor(icpt))
	}
	s := grpc.NewServer(opts...)
	s.RegisterService(&srvDesc, &srvImpl{fn: func(ctx context.Context, in *structpb.Struct) (proto.Message, error) {
		return wrapperspb.String("order-1"), nil
	}})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go s.Serve(l)
	b.Cleanup(s.Stop)
	cc, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cc.Close() })
	return cc
}

// BenchmarkServerInterceptor compares a bare unary call over loopback with
// the same call behind the interceptor on the memory backend: a new key
// each call (claim, run, store), one key replayed, and no key (pass
// through).
func BenchmarkServerInterceptor(b *testing.B) {
	in, _ := structpb.NewStruct(map[string]any{"amount": 10.0, "currency": "EUR"})
	call := func(b *testing.B, cc *grpc.ClientConn, key func(i int) string) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			ctx := context.Background()
			if key != nil {
				ctx = metadata.AppendToOutgoingContext(ctx, grpcidem.DefaultMetadataKey, key(i))
			}
			if err := cc.Invoke(ctx, srvMethod, in, new(wrapperspb.StringValue)); err != nil {
				b.Fatal(err)
			}
			i++
		}
	}
	b.Run("bare", func(b *testing.B) { call(b, benchServe(b, nil), nil) })
	b.Run("no-key", func(b *testing.B) {
		call(b, benchServe(b, srvInterceptor(b, srvMemStore(b), grpcidem.ServerOptions{})), nil)
	})
	b.Run("new-key", func(b *testing.B) {
		call(b, benchServe(b, srvInterceptor(b, srvMemStore(b), grpcidem.ServerOptions{})), func(i int) string { return "k" + strconv.Itoa(i) })
	})
	b.Run("replay", func(b *testing.B) {
		call(b, benchServe(b, srvInterceptor(b, srvMemStore(b), grpcidem.ServerOptions{})), func(int) string { return "same" })
	})
}
