package grpcidem_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/durable-go/durable/backends/memory"
	"github.com/durable-go/durable/middleware/grpcidem"
)

// A payments service described by hand over structpb.Struct, so that the
// example needs no generated code; a generated service registers and is
// called the same way.
var (
	paymentsMade atomic.Int64

	paymentsDesc = grpc.ServiceDesc{
		ServiceName: "example.Payments",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "Create",
			Handler: func(_ any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
				req := new(structpb.Struct)
				if err := dec(req); err != nil {
					return nil, err
				}
				info := &grpc.UnaryServerInfo{FullMethod: "/example.Payments/Create"}
				return ic(ctx, req, info, func(ctx context.Context, req any) (any, error) {
					n := paymentsMade.Add(1) // the effect: runs once per key
					return structpb.NewStruct(map[string]any{"id": fmt.Sprintf("pay_%d", n)})
				})
			},
		}},
	}
)

// The server interceptor stores each keyed call's outcome; the client
// interceptor gives the calls of Create a key and retries them with it.
func ExampleUnaryClientInterceptor() {
	store, err := memory.Open(memory.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	// The server.
	idem, err := grpcidem.UnaryServerInterceptor(store, grpcidem.ServerOptions{})
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(idem), grpc.StreamInterceptor(grpcidem.StreamServerInterceptor(grpcidem.ServerOptions{})))
	srv.RegisterService(&paymentsDesc, nil)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go srv.Serve(l)
	defer srv.Stop()

	// The client.
	cc, err := grpc.NewClient(l.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(grpcidem.UnaryClientInterceptor(grpcidem.ClientOptions{
			Methods: []string{"/example.Payments/Create"},
		})))
	if err != nil {
		log.Fatal(err)
	}
	defer cc.Close()

	ctx := context.Background()
	req, _ := structpb.NewStruct(map[string]any{"amount": 1000, "currency": "EUR"})
	var first grpcidem.Outcome
	resp := new(structpb.Struct)
	if err := cc.Invoke(ctx, "/example.Payments/Create", req, resp, grpcidem.Report(&first)); err != nil {
		log.Fatal(err)
	}
	fmt.Println(resp.Fields["id"].GetStringValue(), "attempts:", first.Attempts, "replayed:", first.Replayed)

	// The same logical operation again, say after the process lost the
	// answer: the same key gets the stored outcome, and no second payment.
	var again grpcidem.Outcome
	resp = new(structpb.Struct)
	if err := cc.Invoke(ctx, "/example.Payments/Create", req, resp, grpcidem.WithKey(first.Key), grpcidem.Report(&again)); err != nil {
		log.Fatal(err)
	}
	fmt.Println(resp.Fields["id"].GetStringValue(), "attempts:", again.Attempts, "replayed:", again.Replayed)
	fmt.Println("payments made:", paymentsMade.Load())

	// Output:
	// pay_1 attempts: 1 replayed: false
	// pay_1 attempts: 1 replayed: true
	// payments made: 1
}
