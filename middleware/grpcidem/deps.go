package grpcidem

// The module's dependencies, pinned before the interceptors import them;
// this file goes when server.go does.
import (
	_ "google.golang.org/genproto/googleapis/rpc/errdetails"
	_ "google.golang.org/grpc"
	_ "google.golang.org/protobuf/proto"

	_ "github.com/durable-go/durable"
)
