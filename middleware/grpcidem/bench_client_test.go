package grpcidem_test

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/durable-go/durable/middleware/grpcidem"
)

// The client interceptor's cost against a bare unary call over loopback.
// The server has no interceptor and answers at once, so the difference is
// the client side's own: a key, the metadata, the header and trailer
// capture, the retry loop's bookkeeping. Recorded in BENCHMARKS.md.
//
//	go test -run '^$' -bench BenchmarkClient -benchmem -count 6 ./middleware/grpcidem/
func BenchmarkClient(b *testing.B) {
	srv := grpc.NewServer()
	srv.RegisterService(clServiceDesc(clService, map[string]clHandler{
		"Create": func(_ context.Context, req *structpb.Struct) (*structpb.Struct, error) { return req, nil },
		"Get":    func(_ context.Context, req *structpb.Struct) (*structpb.Struct, error) { return req, nil },
	}), nil)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go srv.Serve(l)
	b.Cleanup(srv.Stop)
	addr := l.Addr().String()
	bare := clDial(b, addr)
	with := clDial(b, addr, grpc.WithUnaryInterceptor(grpcidem.UnaryClientInterceptor(grpcidem.ClientOptions{Methods: []string{clCreate}})))
	req, err := structpb.NewStruct(map[string]any{"amount": 1000, "currency": "EUR", "note": "a payment"})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	run := func(b *testing.B, cc *grpc.ClientConn, method string, opts func() []grpc.CallOption) {
		b.ReportAllocs()
		for b.Loop() {
			var o []grpc.CallOption
			if opts != nil {
				o = opts()
			}
			if err := cc.Invoke(ctx, method, req, new(structpb.Struct), o...); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("Bare", func(b *testing.B) { run(b, bare, clCreate, nil) })
	b.Run("Unkeyed", func(b *testing.B) { run(b, with, clGet, nil) })
	b.Run("Keyed", func(b *testing.B) { run(b, with, clCreate, nil) })
	b.Run("KeyedReport", func(b *testing.B) {
		var out grpcidem.Outcome
		run(b, with, clCreate, func() []grpc.CallOption { return []grpc.CallOption{grpcidem.Report(&out)} })
	})
	b.Run("WithKeyReport", func(b *testing.B) {
		var out grpcidem.Outcome
		run(b, with, clGet, func() []grpc.CallOption {
			return []grpc.CallOption{grpcidem.WithKey("order-12345"), grpcidem.Report(&out)}
		})
	})
}

// BenchmarkClientInterceptorOnly calls the interceptor with an invoker that
// answers at once: its own cost, without the network's noise.
func BenchmarkClientInterceptorOnly(b *testing.B) {
	ic := grpcidem.UnaryClientInterceptor(grpcidem.ClientOptions{Methods: []string{clCreate}})
	invoker := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil }
	ctx := context.Background()
	req, reply := &structpb.Struct{}, &structpb.Struct{}
	b.Run("Direct", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := invoker(ctx, clCreate, req, reply, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Unkeyed", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := ic(ctx, clGet, req, reply, nil, invoker); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("KeyedReport", func(b *testing.B) {
		b.ReportAllocs()
		var out grpcidem.Outcome
		for b.Loop() {
			if err := ic(ctx, clCreate, req, reply, nil, invoker, grpcidem.Report(&out)); err != nil {
				b.Fatal(err)
			}
		}
	})
}
