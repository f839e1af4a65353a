package grpcidem_test

import (
	"context"
	"errors"
	"net"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/durable-go/durable/middleware/grpcidem"
)

// The client tests' service, described by hand (no code generation): two
// unary methods over structpb.Struct.
const (
	clService = "durable.test.Scripted"
	clCreate  = "/" + clService + "/Create"
	clGet     = "/" + clService + "/Get"
)

// clHandler answers one call of a hand-described method.
type clHandler func(ctx context.Context, req *structpb.Struct) (*structpb.Struct, error)

// clServiceDesc describes a service whose methods (short names) all take
// and return a structpb.Struct.
func clServiceDesc(service string, methods map[string]clHandler) *grpc.ServiceDesc {
	d := &grpc.ServiceDesc{ServiceName: service, HandlerType: (*any)(nil), Metadata: "hand-written"}
	for name, h := range methods {
		full := "/" + service + "/" + name
		d.Methods = append(d.Methods, grpc.MethodDesc{
			MethodName: name,
			Handler: func(_ any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
				req := new(structpb.Struct)
				if err := dec(req); err != nil {
					return nil, err
				}
				if ic == nil {
					return h(ctx, req)
				}
				return ic(ctx, req, &grpc.UnaryServerInfo{FullMethod: full}, func(ctx context.Context, req any) (any, error) {
					return h(ctx, req.(*structpb.Struct))
				})
			},
		})
	}
	return d
}

// clDial connects to addr with the given client interceptors.
func clDial(t testing.TB, addr string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// scripted is a real gRPC server on loopback whose answer to each attempt
// is scripted: the n-th attempt (from 1) of any call gets step(n, ...).
type scripted struct {
	mu   sync.Mutex
	keys []string // the key metadata of each attempt, "" if none
	step func(ctx context.Context, n int) (*structpb.Struct, error)
	cc   *grpc.ClientConn
}

func newScripted(t *testing.T, opts grpcidem.ClientOptions, step func(ctx context.Context, n int) (*structpb.Struct, error)) *scripted {
	t.Helper()
	s := &scripted{step: step}
	h := func(ctx context.Context, req *structpb.Struct) (*structpb.Struct, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		key := ""
		if vs := md.Get(grpcidem.DefaultMetadataKey); len(vs) > 0 {
			key = vs[0]
		}
		s.mu.Lock()
		s.keys = append(s.keys, key)
		n := len(s.keys)
		s.mu.Unlock()
		return s.step(ctx, n)
	}
	srv := grpc.NewServer()
	srv.RegisterService(clServiceDesc(clService, map[string]clHandler{"Create": h, "Get": h}), nil)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	t.Cleanup(srv.Stop)
	s.cc = clDial(t, l.Addr().String(), grpc.WithUnaryInterceptor(grpcidem.UnaryClientInterceptor(opts)))
	return s
}

func (s *scripted) call(ctx context.Context, method string, opts ...grpc.CallOption) (grpcidem.Outcome, error) {
	var o grpcidem.Outcome
	err := s.cc.Invoke(ctx, method, &structpb.Struct{}, new(structpb.Struct), append(opts, grpcidem.Report(&o))...)
	return o, err
}

func (s *scripted) seen() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.keys...)
}

func ok(context.Context, int) (*structpb.Struct, error) { return &structpb.Struct{}, nil }

// failing fails the first n attempts with err, then answers.
func failing(n int, err error) func(context.Context, int) (*structpb.Struct, error) {
	return func(_ context.Context, i int) (*structpb.Struct, error) {
		if i <= n {
			return nil, err
		}
		return &structpb.Struct{}, nil
	}
}

func withDetails(t testing.TB, c codes.Code, details ...protoadapt.MessageV1) error {
	t.Helper()
	st := status.New(c, "scripted "+c.String())
	if len(details) > 0 {
		var err error
		st, err = st.WithDetails(details...)
		if err != nil {
			t.Fatal(err)
		}
	}
	return st.Err()
}

func inFlight(delay time.Duration) []protoadapt.MessageV1 {
	ds := []protoadapt.MessageV1{&errdetails.ErrorInfo{Reason: grpcidem.ReasonKeyInFlight, Domain: grpcidem.ErrorDomain}}
	if delay >= 0 {
		ds = append(ds, &errdetails.RetryInfo{RetryDelay: durationpb.New(delay)})
	}
	return ds
}

// fast keeps the retry waits short.
var fast = grpcidem.ClientOptions{Methods: []string{clCreate}, MinBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond}

var randomKey = regexp.MustCompile(`^[0-9a-f]{32}$`)

func TestClientKeysListedMethodsOnly(t *testing.T) {
	s := newScripted(t, fast, ok)
	o, err := s.call(context.Background(), clCreate)
	if err != nil {
		t.Fatal(err)
	}
	if !randomKey.MatchString(o.Key) || o.Attempts != 1 || o.Replayed {
		t.Fatalf("outcome %+v, want a random 128-bit key in hex, 1 attempt, not replayed", o)
	}
	o2, err := s.call(context.Background(), clCreate)
	if err != nil {
		t.Fatal(err)
	}
	if o2.Key == o.Key {
		t.Fatal("two logical calls got the same random key")
	}
	og, err := s.call(context.Background(), clGet)
	if err != nil {
		t.Fatal(err)
	}
	if og.Key != "" || og.Attempts != 1 {
		t.Fatalf("unlisted method: outcome %+v, want no key", og)
	}
	if got, want := s.seen(), []string{o.Key, o2.Key, ""}; !equal(got, want) {
		t.Fatalf("server saw keys %q, want %q", got, want)
	}
}

func TestClientCallOptionsAndCallerKeys(t *testing.T) {
	opts := fast
	opts.Key = func(_ context.Context, method string, req any) string {
		if _, isStruct := req.(*structpb.Struct); !isStruct {
			return ""
		}
		return "derived:" + method
	}
	s := newScripted(t, opts, ok)
	ctx := context.Background()
	for _, c := range []struct {
		name    string
		ctx     context.Context
		method  string
		opts    []grpc.CallOption
		wantKey string
	}{
		{"WithKeyOnAnUnlistedMethod", ctx, clGet, []grpc.CallOption{grpcidem.WithKey("k-1")}, "k-1"},
		{"WithKeyOverridesTheKeyFunction", ctx, clCreate, []grpc.CallOption{grpcidem.WithKey("k-2")}, "k-2"},
		{"KeyFunctionOnAListedMethod", ctx, clCreate, nil, "derived:" + clCreate},
		{"IdempotentOnAnUnlistedMethod", ctx, clGet, []grpc.CallOption{grpcidem.Idempotent()}, "derived:" + clGet},
		{"KeyAlreadyInTheMetadataIsKept", metadata.AppendToOutgoingContext(ctx, grpcidem.DefaultMetadataKey, "mine"), clGet, nil, "mine"},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := len(s.seen())
			o, err := s.call(c.ctx, c.method, c.opts...)
			if err != nil {
				t.Fatal(err)
			}
			if o.Key != c.wantKey {
				t.Fatalf("outcome key %q, want %q", o.Key, c.wantKey)
			}
			seen := s.seen()[before:]
			if !equal(seen, []string{c.wantKey}) {
				t.Fatalf("server saw %q, want one attempt with %q", seen, c.wantKey)
			}
		})
	}
}

func TestClientRetriesTransientFailuresWithTheSameKey(t *testing.T) {
	for _, c := range []struct {
		name string
		err  func(t *testing.T) error
	}{
		{"Unavailable", func(t *testing.T) error { return withDetails(t, codes.Unavailable) }},
		{"UnavailableStoreWithRetryInfo", func(t *testing.T) error {
			return withDetails(t, codes.Unavailable, &errdetails.ErrorInfo{Reason: grpcidem.ReasonStoreUnavailable}, &errdetails.RetryInfo{RetryDelay: durationpb.New(time.Millisecond)})
		}},
		{"AbortedKeyInFlight", func(t *testing.T) error { return withDetails(t, codes.Aborted, inFlight(time.Millisecond)...) }},
		{"AbortedKeyInFlightWithoutRetryInfo", func(t *testing.T) error { return withDetails(t, codes.Aborted, inFlight(-1)...) }},
		{"ResourceExhausted", func(t *testing.T) error { return withDetails(t, codes.ResourceExhausted) }},
		{"Internal", func(t *testing.T) error { return withDetails(t, codes.Internal) }},
		{"Unknown", func(t *testing.T) error { return errors.New("a plain error from the handler") }},
		{"DeadlineExceededOfTheServer", func(t *testing.T) error { return withDetails(t, codes.DeadlineExceeded) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newScripted(t, fast, failing(2, c.err(t)))
			o, err := s.call(context.Background(), clCreate)
			if err != nil {
				t.Fatalf("call failed after retries: %v", err)
			}
			seen := s.seen()
			if o.Attempts != 3 || len(seen) != 3 {
				t.Fatalf("attempts %d, server saw %d, want 3", o.Attempts, len(seen))
			}
			for _, k := range seen {
				if k != o.Key || k == "" {
					t.Fatalf("server saw keys %q, want %q on every attempt", seen, o.Key)
				}
			}
		})
	}
}

func TestClientNeverRetriesFinalCodes(t *testing.T) {
	for _, c := range []struct {
		name string
		err  func(t *testing.T) error
		code codes.Code
	}{
		{"InvalidArgument", func(t *testing.T) error { return withDetails(t, codes.InvalidArgument) }, codes.InvalidArgument},
		{"KeyReused", func(t *testing.T) error {
			return withDetails(t, codes.FailedPrecondition, &errdetails.ErrorInfo{Reason: grpcidem.ReasonKeyReused})
		}, codes.FailedPrecondition},
		{"NotFound", func(t *testing.T) error { return withDetails(t, codes.NotFound) }, codes.NotFound},
		{"AlreadyExists", func(t *testing.T) error { return withDetails(t, codes.AlreadyExists) }, codes.AlreadyExists},
		{"PermissionDenied", func(t *testing.T) error { return withDetails(t, codes.PermissionDenied) }, codes.PermissionDenied},
		{"Unauthenticated", func(t *testing.T) error { return withDetails(t, codes.Unauthenticated) }, codes.Unauthenticated},
		{"OutOfRange", func(t *testing.T) error { return withDetails(t, codes.OutOfRange) }, codes.OutOfRange},
		{"Unimplemented", func(t *testing.T) error { return withDetails(t, codes.Unimplemented) }, codes.Unimplemented},
		{"CanceledByTheServer", func(t *testing.T) error { return withDetails(t, codes.Canceled) }, codes.Canceled},
		{"AbortedOfTheApplication", func(t *testing.T) error { return withDetails(t, codes.Aborted) }, codes.Aborted},
		{"AbortedWithAnotherReason", func(t *testing.T) error {
			return withDetails(t, codes.Aborted, &errdetails.ErrorInfo{Reason: "TRANSACTION_CONFLICT"}, &errdetails.RetryInfo{RetryDelay: durationpb.New(0)})
		}, codes.Aborted},
		{"DataLoss", func(t *testing.T) error { return withDetails(t, codes.DataLoss) }, codes.DataLoss},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newScripted(t, fast, failing(1, c.err(t)))
			o, err := s.call(context.Background(), clCreate)
			if status.Code(err) != c.code {
				t.Fatalf("err %v, want code %v", err, c.code)
			}
			if o.Attempts != 1 || len(s.seen()) != 1 || o.Key == "" {
				t.Fatalf("outcome %+v, server saw %d attempts; want 1 keyed attempt", o, len(s.seen()))
			}
		})
	}
}

func TestClientDoesNotRetryACallWithoutAKey(t *testing.T) {
	s := newScripted(t, fast, failing(1, status.Error(codes.Unavailable, "down")))
	o, err := s.call(context.Background(), clGet)
	if status.Code(err) != codes.Unavailable || o.Attempts != 1 || o.Key != "" || len(s.seen()) != 1 {
		t.Fatalf("err %v, outcome %+v, %d attempts seen; want Unavailable after 1 unkeyed attempt", err, o, len(s.seen()))
	}
}

func TestClientStopsAtMaxAttempts(t *testing.T) {
	opts := fast
	opts.MaxAttempts = 4
	s := newScripted(t, opts, failing(1000, status.Error(codes.Unavailable, "down")))
	o, err := s.call(context.Background(), clCreate)
	if status.Code(err) != codes.Unavailable || o.Attempts != 4 || len(s.seen()) != 4 {
		t.Fatalf("err %v, outcome %+v, %d attempts seen; want Unavailable after 4", err, o, len(s.seen()))
	}
}

func TestClientHonoursRetryInfo(t *testing.T) {
	const delay = 20 * time.Millisecond
	s := newScripted(t, fast, failing(2, withDetails(t, codes.Aborted, inFlight(delay)...)))
	o, err := s.call(context.Background(), clCreate)
	if err != nil {
		t.Fatal(err)
	}
	// The backoff alone (MaxBackoff 2ms) would plan at most 4ms in all.
	if o.Attempts != 3 || o.Waited < 2*delay {
		t.Fatalf("outcome %+v, want 3 attempts and waits of at least %v", o, 2*delay)
	}
}

func TestClientGivesUpWhenTheRetryDelayOutlastsTheContext(t *testing.T) {
	s := newScripted(t, fast, failing(1000, withDetails(t, codes.Unavailable, &errdetails.RetryInfo{RetryDelay: durationpb.New(time.Hour)})))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	o, err := s.call(ctx, clCreate)
	if status.Code(err) != codes.Unavailable || o.Attempts != 1 {
		t.Fatalf("err %v, outcome %+v; want the attempt's Unavailable at once", err, o)
	}
	// The same with the client's own budget.
	opts := fast
	opts.Budget = time.Minute
	s = newScripted(t, opts, failing(1000, withDetails(t, codes.Aborted, inFlight(time.Hour)...)))
	o, err = s.call(context.Background(), clCreate)
	if status.Code(err) != codes.Aborted || o.Attempts != 1 {
		t.Fatalf("budget: err %v, outcome %+v; want the attempt's Aborted at once", err, o)
	}
}

func TestClientBudgetEndsTheRetries(t *testing.T) {
	opts := fast
	opts.MaxAttempts = 1 << 20
	opts.Budget = time.Second
	s := newScripted(t, opts, failing(1<<30, withDetails(t, codes.Aborted, inFlight(50*time.Millisecond)...)))
	o, err := s.call(context.Background(), clCreate)
	if c := status.Code(err); c != codes.Aborted && c != codes.DeadlineExceeded {
		t.Fatalf("err %v, want the last attempt's Aborted or the budget's DeadlineExceeded", err)
	}
	if o.Attempts < 2 || o.Attempts > 1000 {
		t.Fatalf("outcome %+v: want a few attempts within the budget", o)
	}
}

func TestClientRetriesAnAttemptThatRanOutOfItsTimeout(t *testing.T) {
	opts := fast
	opts.AttemptTimeout = 100 * time.Millisecond
	s := newScripted(t, opts, func(ctx context.Context, n int) (*structpb.Struct, error) {
		if n == 1 {
			<-ctx.Done() // the first attempt hangs until its timeout
			return nil, ctx.Err()
		}
		return &structpb.Struct{}, nil
	})
	o, err := s.call(context.Background(), clCreate)
	if err != nil || o.Attempts != 2 {
		t.Fatalf("err %v, outcome %+v; want success on the 2nd attempt", err, o)
	}
	if seen := s.seen(); len(seen) != 2 || seen[0] != seen[1] {
		t.Fatalf("server saw %q, want the same key twice", seen)
	}
}

func TestClientContextDeadlineIsFinal(t *testing.T) {
	s := newScripted(t, fast, func(ctx context.Context, n int) (*structpb.Struct, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	o, err := s.call(ctx, clCreate)
	if status.Code(err) != codes.DeadlineExceeded || o.Attempts != 1 {
		t.Fatalf("err %v, outcome %+v; want DeadlineExceeded after 1 attempt", err, o)
	}
}

func TestClientCancelDuringTheWait(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := newScripted(t, fast, func(context.Context, int) (*structpb.Struct, error) {
		cancel() // the caller gives up while the client waits to retry
		return nil, withDetails(t, codes.Aborted, inFlight(time.Hour)...)
	})
	o, err := s.call(ctx, clCreate)
	if c := status.Code(err); c != codes.Canceled && c != codes.Aborted {
		t.Fatalf("err %v, want Canceled (or the attempt's Aborted if the cancel came first)", err)
	}
	if o.Attempts != 1 {
		t.Fatalf("outcome %+v, want 1 attempt", o)
	}
}

func TestClientReportsReplay(t *testing.T) {
	replay := func(ctx context.Context) {
		if err := grpc.SetHeader(ctx, metadata.Pairs(grpcidem.ReplayedKey, "true")); err != nil {
			panic(err)
		}
	}
	for _, c := range []struct {
		name     string
		step     func(ctx context.Context, n int) (*structpb.Struct, error)
		code     codes.Code
		attempts int
		replayed bool
	}{
		{"FreshResponse", ok, codes.OK, 1, false},
		{"ReplayedResponse", func(ctx context.Context, _ int) (*structpb.Struct, error) {
			replay(ctx)
			return &structpb.Struct{}, nil
		}, codes.OK, 1, true},
		{"ReplayedErrorStatus", func(ctx context.Context, _ int) (*structpb.Struct, error) {
			replay(ctx)
			return nil, status.Error(codes.NotFound, "stored")
		}, codes.NotFound, 1, true},
		{"ReplayAfterARetry", func(ctx context.Context, n int) (*structpb.Struct, error) {
			if n == 1 {
				return nil, status.Error(codes.Unavailable, "lost")
			}
			replay(ctx)
			return &structpb.Struct{}, nil
		}, codes.OK, 2, true},
		{"FreshAfterAReplayedFailure", func(ctx context.Context, n int) (*structpb.Struct, error) {
			if n == 1 {
				replay(ctx)
				return nil, status.Error(codes.Unavailable, "transient")
			}
			return &structpb.Struct{}, nil
		}, codes.OK, 2, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newScripted(t, fast, c.step)
			o, err := s.call(context.Background(), clCreate)
			if status.Code(err) != c.code || o.Attempts != c.attempts || o.Replayed != c.replayed {
				t.Fatalf("err %v, outcome %+v; want %v, %d attempts, replayed %v", err, o, c.code, c.attempts, c.replayed)
			}
		})
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestClientPassesOtherCallOptionsThrough(t *testing.T) {
	step := func(ctx context.Context, n int) (*structpb.Struct, error) {
		if n == 1 {
			return nil, status.Error(codes.Unavailable, "lost")
		}
		grpc.SetHeader(ctx, metadata.Pairs(grpcidem.ReplayedKey, "true", "x-run", strconv.Itoa(n)))
		return &structpb.Struct{}, nil
	}
	for _, c := range []struct {
		name   string
		method string
		ours   []grpc.CallOption
	}{
		{"Keyed", clCreate, []grpc.CallOption{grpcidem.WithKey("k-pass")}},
		{"Unkeyed", clGet, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newScripted(t, fast, step)
			var header metadata.MD
			var o grpcidem.Outcome
			opts := append([]grpc.CallOption{grpc.Header(&header)}, c.ours...)
			opts = append(opts, grpc.WaitForReady(true), grpcidem.Report(&o))
			err := s.cc.Invoke(context.Background(), c.method, &structpb.Struct{}, new(structpb.Struct), opts...)
			if c.ours == nil {
				if status.Code(err) != codes.Unavailable || o.Attempts != 1 {
					t.Fatalf("err %v, outcome %+v; want the unkeyed call's one Unavailable", err, o)
				}
				return
			}
			if err != nil || o.Attempts != 2 || !o.Replayed {
				t.Fatalf("err %v, outcome %+v; want a replayed answer on the 2nd attempt", err, o)
			}
			if got := header.Get("x-run"); len(got) != 1 || got[0] != "2" {
				t.Fatalf("the caller's grpc.Header got %v, want the last attempt's header", header)
			}
		})
	}
}
