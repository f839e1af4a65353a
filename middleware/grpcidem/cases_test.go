package grpcidem_test

import (
	"context"
	"testing"
	"time"

	"github.com/durable-go/durable/internal/idemcases"
	"github.com/durable-go/durable/middleware/grpcidem"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// grpcAdapter runs the shared behaviour table (internal/idemcases) against
// the server interceptor over loopback gRPC and the memory backend, the
// table the HTTP middleware passes too.
type grpcAdapter struct{}

func (grpcAdapter) Start(t *testing.T, cfg idemcases.Config, h *idemcases.Handler) idemcases.Client {
	opts := grpcidem.ServerOptions{Required: cfg.Required}
	if cfg.WaitInFlight {
		opts.WaitInFlight = time.Minute
	}
	icpt := srvInterceptor(t, srvMemStore(t), opts)
	cc := srvStart(t, icpt, nil, func(ctx context.Context, in *structpb.Struct) (proto.Message, error) {
		a, v := h.Run(ctx)
		switch a {
		case idemcases.Succeed:
			return wrapperspb.String(v), nil
		case idemcases.FailCaller:
			return nil, status.Error(codes.NotFound, v)
		default:
			return nil, status.Error(codes.Unavailable, "try again")
		}
	})
	return &grpcTableClient{cc: cc}
}

type grpcTableClient struct{ cc *grpc.ClientConn }

func (c *grpcTableClient) Send(ctx context.Context, key, variant string) idemcases.Reply {
	if key != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, grpcidem.DefaultMetadataKey, key)
	}
	in, _ := structpb.NewStruct(map[string]any{"variant": variant})
	out := new(wrapperspb.StringValue)
	var header metadata.MD
	err := c.cc.Invoke(ctx, srvMethod, in, out, grpc.Header(&header))
	r := idemcases.Reply{Replayed: len(header.Get(grpcidem.ReplayedKey)) == 1 && header.Get(grpcidem.ReplayedKey)[0] == "true"}
	st := status.Convert(err)
	switch st.Code() {
	case codes.OK:
		r.Kind, r.Value = idemcases.Success, out.GetValue()
	case codes.NotFound:
		r.Kind, r.Value = idemcases.CallerFault, st.Message()
	case codes.Unavailable:
		r.Kind = idemcases.Transient
	case codes.FailedPrecondition:
		r.Kind = reasonKind(st, grpcidem.ReasonKeyReused, idemcases.Reused)
	case codes.Aborted:
		r.Kind = reasonKind(st, grpcidem.ReasonKeyInFlight, idemcases.InFlight)
	case codes.InvalidArgument:
		r.Kind = reasonKind(st, grpcidem.ReasonKeyMissing, idemcases.KeyRejected)
		if r.Kind == idemcases.Other {
			r.Kind = reasonKind(st, grpcidem.ReasonKeyMalformed, idemcases.KeyRejected)
		}
	default:
		r.Kind, r.Value = idemcases.Other, st.String()
	}
	return r
}

// reasonKind returns k if st carries an ErrorInfo with reason in durable's
// domain, Other if not.
func reasonKind(st *status.Status, reason string, k idemcases.Kind) idemcases.Kind {
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.Reason == reason && info.Domain == grpcidem.ErrorDomain {
			return k
		}
	}
	return idemcases.Other
}

// TestBehaviourTable runs the behaviour table the HTTP middleware passes
// too (middleware/idempotency's TestBehaviourTable).
func TestBehaviourTable(t *testing.T) {
	idemcases.Run(t, grpcAdapter{})
}
