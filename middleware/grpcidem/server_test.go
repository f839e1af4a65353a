package grpcidem_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/backends/sqlite"
	"github.com/durable-go/durable/middleware/grpcidem"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// srvCall calls the test method with key ("" for none) and returns the
// reply, its error and its header and trailer metadata.
func srvCall(t *testing.T, cc *grpc.ClientConn, key string, in proto.Message, out proto.Message) (metadata.MD, metadata.MD, error) {
	t.Helper()
	ctx := t.Context()
	if key != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, grpcidem.DefaultMetadataKey, key)
	}
	var h, tr metadata.MD
	err := cc.Invoke(ctx, srvMethod, in, out, grpc.Header(&h), grpc.Trailer(&tr))
	return h, tr, err
}

func replayed(h metadata.MD) bool {
	v := h.Get(grpcidem.ReplayedKey)
	return len(v) == 1 && v[0] == "true"
}

func srvReq(t *testing.T, m map[string]any) *structpb.Struct {
	t.Helper()
	s, err := structpb.NewStruct(m)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestReplayEqualMessageAndMetadata(t *testing.T) {
	var runs atomic.Int64
	icpt := srvInterceptor(t, srvMemStore(t), grpcidem.ServerOptions{StoreHeader: []string{"x-created"}, StoreTrailer: []string{"x-total"}})
	cc := srvStart(t, icpt, nil, func(ctx context.Context, in *structpb.Struct) (proto.Message, error) {
		n := runs.Add(1)
		grpc.SetHeader(ctx, metadata.Pairs("x-created", "order-1", "x-request", "r"+strings.Repeat("1", int(n))))
		grpc.SendHeader(ctx, metadata.Pairs("x-created", "again"))
		grpc.SetTrailer(ctx, metadata.Pairs("x-total", "42"))
		// A map field: its deterministic encoding is what is stored.
		return structpb.NewStruct(map[string]any{"id": "order-1", "amounts": map[string]any{"a": 1.0, "b": 2.0, "c": 3.0}, "n": float64(n)})
	})
	in := srvReq(t, map[string]any{"amount": 10.0, "items": []any{"x", "y"}})
	first := new(structpb.Struct)
	h1, t1, err := srvCall(t, cc, "key-1", in, first)
	if err != nil || replayed(h1) {
		t.Fatalf("first call: %v, replayed=%v", err, replayed(h1))
	}
	for range 3 {
		again := new(structpb.Struct)
		h2, t2, err := srvCall(t, cc, "key-1", in, again)
		if err != nil || !replayed(h2) {
			t.Fatalf("retry: %v, replayed=%v", err, replayed(h2))
		}
		if !proto.Equal(first, again) {
			t.Fatalf("replayed message differs: %v, want %v", again, first)
		}
		if got, want := h2.Get("x-created"), h1.Get("x-created"); strings.Join(got, ",") != strings.Join(want, ",") || len(got) != 2 {
			t.Fatalf("replayed x-created %q, want %q", got, want)
		}
		if h2.Get("x-request") != nil {
			t.Fatalf("a header not listed in StoreHeader was replayed: %q", h2.Get("x-request"))
		}
		if got := t2.Get("x-total"); len(got) != 1 || got[0] != t1.Get("x-total")[0] {
			t.Fatalf("replayed trailer %q, want %q", got, t1.Get("x-total"))
		}
	}
	if runs.Load() != 1 {
		t.Fatalf("handler ran %d times, want 1", runs.Load())
	}
}

func TestStoredErrorStatusReplaysWithDetails(t *testing.T) {
	var runs atomic.Int64
	icpt := srvInterceptor(t, srvMemStore(t), grpcidem.ServerOptions{})
	cc := srvStart(t, icpt, nil, func(ctx context.Context, in *structpb.Struct) (proto.Message, error) {
		runs.Add(1)
		st, err := status.New(codes.FailedPrecondition, "insufficient funds").WithDetails(
			&errdetails.PreconditionFailure{Violations: []*errdetails.PreconditionFailure_Violation{{Type: "BALANCE", Subject: "acct", Description: "too low"}}},
			&errdetails.LocalizedMessage{Locale: "en", Message: "Not enough money"})
		if err != nil {
			t.Error(err)
		}
		return nil, st.Err()
	})
	in := srvReq(t, map[string]any{"amount": 1e9})
	_, _, err1 := srvCall(t, cc, "k", in, new(structpb.Struct))
	h2, _, err2 := srvCall(t, cc, "k", in, new(structpb.Struct))
	if !replayed(h2) {
		t.Fatal("the second call was not marked replayed")
	}
	s1, s2 := status.Convert(err1), status.Convert(err2)
	if s1.Code() != codes.FailedPrecondition || !proto.Equal(s1.Proto(), s2.Proto()) || len(s2.Details()) != 2 {
		t.Fatalf("replayed status %v, want %v", s2.Proto(), s1.Proto())
	}
	if runs.Load() != 1 {
		t.Fatalf("handler ran %d times, want 1", runs.Load())
	}
}

func TestTransientStatusesReleaseTheClaim(t *testing.T) {
	for _, c := range []codes.Code{codes.Unavailable, codes.Internal, codes.Unknown, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Aborted, codes.DataLoss} {
		t.Run(c.String(), func(t *testing.T) {
			var runs atomic.Int64
			icpt := srvInterceptor(t, srvMemStore(t), grpcidem.ServerOptions{})
			cc := srvStart(t, icpt, nil, func(ctx context.Context, in *structpb.Struct) (proto.Message, error) {
				if runs.Add(1) == 1 {
					return nil, status.Error(c, "transient")
				}
				return wrapperspb.String("done"), nil
			})
			in := srvReq(t, nil)
			if _, _, err := srvCall(t, cc, "k", in, new(wrapperspb.StringValue)); status.Code(err) != c {
				t.Fatalf("first call: %v, want %v", err, c)
			}
			out := new(wrapperspb.StringValue)
			if h, _, err := srvCall(t, cc, "k", in, out); err != nil || replayed(h) || out.Value != "done" {
				t.Fatalf("retry: %v replayed=%v %q; want a second run", err, replayed(h), out.Value)
			}
		})
	}
}

func TestUnknownResponseType(t *testing.T) {
	store := srvMemStore(t)
	var runs atomic.Int64
	handler := func(ctx context.Context, in *structpb.Struct) (proto.Message, error) {
		runs.Add(1)
		return wrapperspb.String("v"), nil
	}
	in := srvReq(t, nil)
	t.Run("not registered when stored: not stored, runs again", func(t *testing.T) {
		runs.Store(0)
		cc := srvStart(t, srvInterceptor(t, store, grpcidem.ServerOptions{Types: new(protoregistry.Types)}), nil, handler)
		for range 2 {
			h, _, err := srvCall(t, cc, "a", in, new(wrapperspb.StringValue))
			if err != nil || replayed(h) {
				t.Fatalf("%v replayed=%v", err, replayed(h))
			}
		}
		if runs.Load() != 2 {
			t.Fatalf("handler ran %d times, want 2", runs.Load())
		}
	})
	t.Run("unknown when replayed: Internal, no second run", func(t *testing.T) {
		runs.Store(0)
		cc := srvStart(t, srvInterceptor(t, store, grpcidem.ServerOptions{}), nil, handler)
		if _, _, err := srvCall(t, cc, "b", in, new(wrapperspb.StringValue)); err != nil {
			t.Fatal(err)
		}
		cc2 := srvStart(t, srvInterceptor(t, store, grpcidem.ServerOptions{Types: new(protoregistry.Types)}), nil, handler)
		if _, _, err := srvCall(t, cc2, "b", in, new(wrapperspb.StringValue)); status.Code(err) != codes.Internal {
			t.Fatalf("replay of an unknown type: %v, want Internal", err)
		}
		if runs.Load() != 1 {
			t.Fatalf("handler ran %d times, want 1", runs.Load())
		}
	})
}

// syncBuf is a log destination safe for concurrent writes.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestHugeResponseNotStored(t *testing.T) {
	var logs syncBuf
	var runs atomic.Int64
	icpt := srvInterceptor(t, srvMemStore(t), grpcidem.ServerOptions{MaxBody: 1 << 10, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	cc := srvStart(t, icpt, nil, func(ctx context.Context, in *structpb.Struct) (proto.Message, error) {
		runs.Add(1)
		return wrapperspb.String(strings.Repeat("x", 64<<10)), nil
	})
	in := srvReq(t, nil)
	for range 2 {
		out := new(wrapperspb.StringValue)
		h, _, err := srvCall(t, cc, "k", in, out)
		if err != nil || replayed(h) || len(out.Value) != 64<<10 {
			t.Fatalf("%v replayed=%v len=%d", err, replayed(h), len(out.Value))
		}
	}
	if runs.Load() != 2 {
		t.Fatalf("handler ran %d times, want 2 (not stored, claim released)", runs.Load())
	}
	if !strings.Contains(logs.String(), "MaxBody") && !strings.Contains(logs.String(), "max_body") {
		t.Fatalf("not logged: %q", logs.String())
	}
	if strings.Contains(logs.String(), `"k"`) {
		t.Fatal("the log contains the key")
	}
}

func TestMetadataKeyValidation(t *testing.T) {
	icpt := srvInterceptor(t, srvMemStore(t), grpcidem.ServerOptions{MetadataKey: "X-Op-Key"})
	cc := srvStart(t, icpt, nil, func(ctx context.Context, in *structpb.Struct) (proto.Message, error) {
		return wrapperspb.String("v"), nil
	})
	in := srvReq(t, nil)
	call := func(kv ...string) (metadata.MD, error) {
		ctx := metadata.AppendToOutgoingContext(t.Context(), kv...)
		var h metadata.MD
		err := cc.Invoke(ctx, srvMethod, in, new(wrapperspb.StringValue), grpc.Header(&h))
		return h, err
	}
	for name, kv := range map[string][]string{
		"two values":     {"x-op-key", "a", "x-op-key", "b"},
		"too long":       {"x-op-key", strings.Repeat("a", 256)},
		"a space inside": {"x-op-key", "a b"},
		"a comma":        {"x-op-key", "a,b"},
		"empty quotes":   {"x-op-key", `""`},
		"open quote":     {"x-op-key", `"abc`},
	} {
		if _, err := call(kv...); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want InvalidArgument", name, err)
		}
	}
	if h, err := call("x-op-key", "abc"); err != nil || replayed(h) {
		t.Fatalf("%v %v", err, replayed(h))
	}
	if h, err := call("x-op-key", `"abc"`); err != nil || !replayed(h) {
		t.Fatalf("the quoted form of the same key: %v replayed=%v", err, replayed(h))
	}
	if h, err := call("idempotency-key", "abc"); err != nil || replayed(h) {
		t.Fatalf("the default key name is not read when another is configured: %v %v", err, replayed(h))
	}
	for _, bad := range []string{"grpc-key", "key-bin", "a key", "ключ"} {
		if _, err := grpcidem.UnaryServerInterceptor(srvMemStore(t), grpcidem.ServerOptions{MetadataKey: bad}); durable.CodeOf(err) != durable.CodeOf(durable.ErrInvalidArgument) {
			t.Errorf("MetadataKey %q: %v, want InvalidArgument", bad, err)
		}
	}
}

func TestStreamingWithKeyRefused(t *testing.T) {
	cc := srvStart(t, nil, grpcidem.StreamServerInterceptor(grpcidem.ServerOptions{}), nil)
	desc := &grpc.StreamDesc{StreamName: "Stream", ServerStreams: true}
	open := func(ctx context.Context) error {
		s, err := cc.NewStream(ctx, desc, "/grpcidem.servertest.Svc/Stream")
		if err != nil {
			return err
		}
		if err := s.SendMsg(&structpb.Struct{}); err != nil {
			return err
		}
		s.CloseSend()
		return s.RecvMsg(new(structpb.Struct))
	}
	err := open(metadata.AppendToOutgoingContext(t.Context(), grpcidem.DefaultMetadataKey, "k"))
	if status.Code(err) != codes.Unimplemented || !strings.Contains(status.Convert(err).Message(), "streaming") {
		t.Fatalf("a streaming call with a key: %v, want Unimplemented", err)
	}
	if err := open(t.Context()); err != nil && !errors.Is(err, io.EOF) {
		t.Fatalf("a streaming call without a key: %v", err)
	}
}

func TestTransactionalNeedsSharedTransactions(t *testing.T) {
	_, err := grpcidem.UnaryServerInterceptor(srvMemStore(t), grpcidem.ServerOptions{Transactional: true})
	if durable.CodeOf(err) != durable.CodeOf(durable.ErrUnimplemented) {
		t.Fatalf("Transactional on the memory backend: %v, want Unimplemented", err)
	}
}

func TestTransactionalSQLite(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "grpcidem.db")
	store, err := sqlite.Open(ctx, sqlite.Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(20000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := db.ExecContext(ctx, "CREATE TABLE ledger (n INTEGER)"); err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	icpt := srvInterceptor(t, store, grpcidem.ServerOptions{Transactional: true})
	cc := srvStart(t, icpt, nil, func(ctx context.Context, in *structpb.Struct) (proto.Message, error) {
		n := runs.Add(1)
		tx, ok := grpcidem.Tx[*sql.Tx](ctx)
		if !ok {
			return nil, status.Error(codes.Internal, "no transaction")
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO ledger (n) VALUES (?)", n); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		if in.Fields["fail"].GetBoolValue() {
			return nil, status.Error(codes.Unavailable, "rolled back")
		}
		return wrapperspb.Int64(n), nil
	})
	rows := func() int {
		var c int
		if err := db.QueryRowContext(ctx, "SELECT count(*) FROM ledger").Scan(&c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	ok := srvReq(t, map[string]any{"fail": false})
	for i := range 3 {
		out := new(wrapperspb.Int64Value)
		h, _, err := srvCall(t, cc, "pay-1", ok, out)
		if err != nil || out.Value != 1 || replayed(h) != (i > 0) {
			t.Fatalf("call %d: %v value=%d replayed=%v", i, err, out.Value, replayed(h))
		}
	}
	if got := rows(); got != 1 {
		t.Fatalf("ledger rows %d, want 1", got)
	}
	// A transient failure rolls the effect back and releases the claim.
	fail := srvReq(t, map[string]any{"fail": true})
	if _, _, err := srvCall(t, cc, "pay-2", fail, new(wrapperspb.Int64Value)); status.Code(err) != codes.Unavailable {
		t.Fatalf("failing call: %v", err)
	}
	if got := rows(); got != 1 {
		t.Fatalf("ledger rows %d after a rolled-back call, want 1", got)
	}
	// A call without a key gets no transaction.
	if _, _, err := srvCall(t, cc, "", ok, new(wrapperspb.Int64Value)); status.Code(err) != codes.Internal {
		t.Fatalf("a call without a key: %v, want the handler's Internal (no transaction)", err)
	}
	if runs.Load() != 3 {
		t.Fatalf("handler ran %d times, want 3", runs.Load())
	}
}
