package durable_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/backends/memory"
	"github.com/durable-go/durable/contract"
)

// spy is a backend that records calls and returns canned results. It does
// not implement KeyWaiter, so the Store must poll it.
type spy struct {
	calls   atomic.Int64
	err     error
	lastTTL time.Duration
	claim   contract.ClaimRequest
	comp    contract.Completion
	created contract.Workflow
	keys    []contract.KeyRecord // successive GetKey results, last repeats
	keyErrs []error
	getN    atomic.Int64
}

func (s *spy) hit() error { s.calls.Add(1); return s.err }

func (s *spy) CreateWorkflow(_ context.Context, w contract.Workflow) (contract.Workflow, error) {
	s.created = w
	return w, s.hit()
}
func (s *spy) GetWorkflow(context.Context, contract.Scope, string) (contract.Workflow, error) {
	return contract.Workflow{}, s.hit()
}
func (s *spy) UpdateWorkflow(context.Context, contract.Update) (contract.Workflow, error) {
	return contract.Workflow{}, s.hit()
}
func (s *spy) ListWorkflows(context.Context, contract.ListQuery) ([]contract.Workflow, error) {
	return nil, s.hit()
}
func (s *spy) ClaimKey(_ context.Context, r contract.ClaimRequest) (contract.Claim, error) {
	s.claim = r
	return contract.Claim{}, s.hit()
}
func (s *spy) CompleteKey(_ context.Context, c contract.Completion) (contract.KeyRecord, error) {
	s.comp = c
	return contract.KeyRecord{}, s.hit()
}
func (s *spy) RenewKey(_ context.Context, _ contract.KeyRef, _ string, ttl time.Duration) (contract.KeyRecord, error) {
	s.lastTTL = ttl
	return contract.KeyRecord{}, s.hit()
}
func (s *spy) ReleaseKey(context.Context, contract.KeyRef, string) (bool, error) {
	return false, s.hit()
}
func (s *spy) GetKey(context.Context, contract.KeyRef) (contract.KeyRecord, error) {
	s.hit()
	n := int(s.getN.Add(1)) - 1
	if len(s.keys) == 0 {
		return contract.KeyRecord{}, s.err
	}
	i := min(n, len(s.keys)-1)
	return s.keys[i], s.keyErrs[i]
}
func (s *spy) AcquireLease(_ context.Context, r contract.LeaseRequest) (contract.Lease, error) {
	s.lastTTL = r.TTL
	return contract.Lease{}, s.hit()
}
func (s *spy) RenewLease(context.Context, contract.Lease, time.Duration) (contract.Lease, error) {
	return contract.Lease{}, s.hit()
}
func (s *spy) ReleaseLease(context.Context, contract.Lease) (bool, error) { return false, s.hit() }
func (s *spy) GetLease(context.Context, contract.Scope, string) (contract.Lease, error) {
	return contract.Lease{}, s.hit()
}
func (s *spy) Cleanup(context.Context, contract.CleanupRequest) (contract.CleanupResult, error) {
	return contract.CleanupResult{}, s.hit()
}
func (s *spy) Close() error { return nil }

func newSpyStore(t *testing.T, opts ...durable.Option) (*durable.Store, *spy) {
	t.Helper()
	sp := &spy{}
	s, err := durable.New(sp, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s, sp
}

func TestInvalidInputNeverReachesBackend(t *testing.T) {
	ctx := context.Background()
	long := strings.Repeat("a", 129)
	lease := durable.Lease{Resource: "r", Owner: "o", Token: 1}
	cases := []struct {
		name string
		call func(s *durable.Store) error
	}{
		{"EmptyWorkflowID", func(s *durable.Store) error { _, err := s.CreateWorkflow(ctx, durable.Workflow{}); return err }},
		{"LongWorkflowID", func(s *durable.Store) error { _, err := s.GetWorkflow(ctx, "", long); return err }},
		{"SpaceInID", func(s *durable.Store) error { _, err := s.GetWorkflow(ctx, "", "a b"); return err }},
		{"LeadingDash", func(s *durable.Store) error { _, err := s.GetWorkflow(ctx, "", "-a"); return err }},
		{"NonASCII", func(s *durable.Store) error { _, err := s.GetWorkflow(ctx, "", "é"); return err }},
		{"Injection", func(s *durable.Store) error { _, err := s.GetWorkflow(ctx, "", "x'; DROP TABLE t; --"); return err }},
		{"BadScope", func(s *durable.Store) error { _, err := s.GetWorkflow(ctx, "a/b", "x"); return err }},
		{"UpperStatus", func(s *durable.Store) error {
			_, err := s.CreateWorkflow(ctx, durable.Workflow{ID: "x", Status: "Running"})
			return err
		}},
		{"LongStatus", func(s *durable.Store) error {
			_, err := s.CreateWorkflow(ctx, durable.Workflow{ID: "x", Status: durable.Status(strings.Repeat("a", 65))})
			return err
		}},
		{"MissingExpectStatus", func(s *durable.Store) error {
			_, err := s.UpdateWorkflow(ctx, durable.Update{ID: "x", Status: "running"})
			return err
		}},
		{"NegativeRevision", func(s *durable.Store) error {
			_, err := s.UpdateWorkflow(ctx, durable.Update{ID: "x", ExpectStatus: "pending", Status: "running", ExpectRevision: -1})
			return err
		}},
		{"BadFence", func(s *durable.Store) error {
			_, err := s.UpdateWorkflow(ctx, durable.Update{ID: "x", ExpectStatus: "pending", Status: "running", Fence: &durable.Fence{Resource: "r", Owner: "o"}})
			return err
		}},
		{"OversizeSnapshot", func(s *durable.Store) error {
			_, err := s.CreateWorkflow(ctx, durable.Workflow{ID: "x", Snapshot: make([]byte, durable.DefaultMaxSnapshot+1)})
			return err
		}},
		{"ListLimit", func(s *durable.Store) error {
			_, err := s.ListWorkflows(ctx, durable.ListQuery{Limit: 1001})
			return err
		}},
		{"ListCursor", func(s *durable.Store) error {
			_, err := s.ListWorkflows(ctx, durable.ListQuery{After: "a b"})
			return err
		}},
		{"ShortTTL", func(s *durable.Store) error {
			_, err := s.ClaimKey(ctx, durable.ClaimRequest{KeyRef: durable.KeyRef{Key: "k"}, Fingerprint: "f", TTL: 500 * time.Millisecond})
			return err
		}},
		{"LongTTL", func(s *durable.Store) error {
			_, err := s.AcquireLease(ctx, durable.LeaseRequest{Resource: "r", Owner: "o", TTL: 25 * time.Hour})
			return err
		}},
		{"NegativeTTL", func(s *durable.Store) error { _, err := s.RenewLease(ctx, lease, -time.Second); return err }},
		{"EmptyFingerprint", func(s *durable.Store) error {
			_, err := s.ClaimKey(ctx, durable.ClaimRequest{KeyRef: durable.KeyRef{Key: "k"}})
			return err
		}},
		{"EmptyToken", func(s *durable.Store) error { _, err := s.ReleaseKey(ctx, durable.KeyRef{Key: "k"}, ""); return err }},
		{"OversizeBody", func(s *durable.Store) error {
			_, err := s.CompleteKey(ctx, durable.Completion{KeyRef: durable.KeyRef{Key: "k"}, Token: "t",
				Outcome: durable.Outcome{Body: make([]byte, durable.DefaultMaxBody+1)}})
			return err
		}},
		{"BadOutcomeCode", func(s *durable.Store) error {
			_, err := s.CompleteKey(ctx, durable.Completion{KeyRef: durable.KeyRef{Key: "k"}, Token: "t", Outcome: durable.Outcome{Code: 1000}})
			return err
		}},
		{"ZeroLeaseToken", func(s *durable.Store) error {
			_, err := s.ReleaseLease(ctx, durable.Lease{Resource: "r", Owner: "o"})
			return err
		}},
		{"NegativeCleanupLimit", func(s *durable.Store) error { _, err := s.Cleanup(ctx, durable.CleanupRequest{Limit: -1}); return err }},
		{"BadWaitKey", func(s *durable.Store) error { _, err := s.WaitKey(ctx, durable.KeyRef{Key: ""}); return err }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, sp := newSpyStore(t)
			err := c.call(s)
			if !errors.Is(err, durable.ErrInvalidArgument) {
				t.Fatalf("err = %v, want invalid argument", err)
			}
			if n := sp.calls.Load(); n != 0 {
				t.Fatalf("backend called %d times", n)
			}
			if strings.Contains(err.Error(), "DROP") {
				t.Fatalf("error text %q echoes the input", err.Error())
			}
		})
	}
}

func TestDefaultsAreFilled(t *testing.T) {
	ctx := context.Background()
	s, sp := newSpyStore(t, durable.WithKeyRetention(time.Hour), durable.WithDefaultTTLs(2*time.Minute, 20*time.Second))
	if _, err := s.CreateWorkflow(ctx, durable.Workflow{ID: "w", Revision: 9}); err != nil {
		t.Fatal(err)
	}
	if sp.created.Status != durable.StatusPending || sp.created.Revision != 0 {
		t.Fatalf("created %+v, want status pending and revision cleared", sp.created)
	}
	if _, err := s.ClaimKey(ctx, durable.ClaimRequest{KeyRef: durable.KeyRef{Key: "k"}, Fingerprint: "f"}); err != nil {
		t.Fatal(err)
	}
	if sp.claim.TTL != 2*time.Minute {
		t.Fatalf("claim TTL = %v", sp.claim.TTL)
	}
	if _, err := s.CompleteKey(ctx, durable.Completion{KeyRef: durable.KeyRef{Key: "k"}, Token: "t"}); err != nil {
		t.Fatal(err)
	}
	if sp.comp.Retain != time.Hour {
		t.Fatalf("retain = %v", sp.comp.Retain)
	}
	if _, err := s.AcquireLease(ctx, durable.LeaseRequest{Resource: "r", Owner: "o"}); err != nil {
		t.Fatal(err)
	}
	if sp.lastTTL != 20*time.Second {
		t.Fatalf("lease TTL = %v", sp.lastTTL)
	}
}

func TestInvalidOptions(t *testing.T) {
	for name, opt := range map[string]durable.Option{
		"Retention": durable.WithKeyRetention(0),
		"TTLs":      durable.WithDefaultTTLs(time.Millisecond, time.Second),
		"Snapshot":  durable.WithMaxSnapshotBytes(0),
		"Body":      durable.WithMaxBodyBytes(-1),
		"Logger":    durable.WithLogger(nil),
		"Polling":   durable.WithWaitPolling(time.Second, time.Millisecond),
	} {
		if _, err := durable.New(&spy{}, opt); !errors.Is(err, durable.ErrInvalidArgument) {
			t.Errorf("%s: err = %v, want invalid argument", name, err)
		}
	}
	if _, err := durable.New(nil); !errors.Is(err, durable.ErrInvalidArgument) {
		t.Errorf("nil backend: err = %v", err)
	}
}

func TestSizeLimitsAreConfigurable(t *testing.T) {
	ctx := context.Background()
	s, _ := newSpyStore(t, durable.WithMaxSnapshotBytes(10), durable.WithMaxBodyBytes(4))
	if _, err := s.CreateWorkflow(ctx, durable.Workflow{ID: "w", Snapshot: make([]byte, 10)}); err != nil {
		t.Fatalf("10-byte snapshot: %v", err)
	}
	if _, err := s.CreateWorkflow(ctx, durable.Workflow{ID: "w", Snapshot: make([]byte, 11)}); !errors.Is(err, durable.ErrInvalidArgument) {
		t.Fatalf("11-byte snapshot: %v", err)
	}
	c := durable.Completion{KeyRef: durable.KeyRef{Key: "k"}, Token: "t", Outcome: durable.Outcome{Body: make([]byte, 5)}}
	if _, err := s.CompleteKey(ctx, c); !errors.Is(err, durable.ErrInvalidArgument) {
		t.Fatalf("5-byte body: %v", err)
	}
}

func TestBackendErrorsAreWrappedOnce(t *testing.T) {
	ctx := context.Background()
	s, sp := newSpyStore(t)

	sp.err = &contract.Error{Code: contract.Unavailable, Msg: "database unreachable", Err: errors.New("dial tcp: secret-host")}
	_, err := s.GetWorkflow(ctx, "", "w")
	var ce *contract.Error
	if !errors.As(err, &ce) || ce.Op != "GetWorkflow" || ce.Code != contract.Unavailable {
		t.Fatalf("err = %#v", err)
	}
	if errors.As(ce.Err, new(*contract.Error)) {
		t.Fatal("error wrapped twice")
	}
	if strings.Contains(err.Error(), "secret-host") {
		t.Fatalf("error text %q leaks the cause", err.Error())
	}

	sp.err = errors.New("raw driver text: password=hunter2")
	_, err = s.GetWorkflow(ctx, "", "w")
	if durable.CodeOf(err) != contract.Unknown || strings.Contains(err.Error(), "hunter2") || !errors.Is(err, sp.err) {
		t.Fatalf("foreign error: %v", err)
	}

	sp.err = fmt.Errorf("while reading: %w", context.DeadlineExceeded)
	_, err = s.GetWorkflow(ctx, "", "w")
	if !errors.Is(err, context.DeadlineExceeded) || durable.CodeOf(err) != contract.Canceled {
		t.Fatalf("context error: %v", err)
	}
}

func TestClosedStoreAndCanceledContext(t *testing.T) {
	s, sp := newSpyStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.GetWorkflow(ctx, "", "w"); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := s.GetWorkflow(context.Background(), "", "w"); !errors.Is(err, durable.ErrClosed) {
		t.Fatalf("closed: %v", err)
	}
	if n := sp.calls.Load(); n != 0 {
		t.Fatalf("backend called %d times", n)
	}
}

func TestWaitKeyPollsWithoutKeyWaiter(t *testing.T) {
	ctx := context.Background()
	s, sp := newSpyStore(t, durable.WithWaitPolling(time.Millisecond, 2*time.Millisecond))
	claimed := contract.KeyRecord{State: contract.KeyClaimed}
	done := contract.KeyRecord{State: contract.KeyCompleted, Outcome: &contract.Outcome{Code: 201}}
	sp.keys = []contract.KeyRecord{claimed, claimed, claimed, done}
	sp.keyErrs = []error{nil, nil, nil, nil}
	rec, err := s.WaitKey(ctx, durable.KeyRef{Key: "k"})
	if err != nil || rec.Outcome.Code != 201 || sp.getN.Load() != 4 {
		t.Fatalf("rec=%+v err=%v polls=%d", rec, err, sp.getN.Load())
	}

	// A released claim ends the wait with NotFound.
	s2, sp2 := newSpyStore(t, durable.WithWaitPolling(time.Millisecond, 2*time.Millisecond))
	sp2.keys = []contract.KeyRecord{claimed, {}}
	sp2.keyErrs = []error{nil, contract.ErrNotFound}
	if _, err := s2.WaitKey(ctx, durable.KeyRef{Key: "k"}); !errors.Is(err, durable.ErrNotFound) {
		t.Fatalf("released: %v", err)
	}

	// An unavailable backend is retried; a cancelled context ends the wait.
	s3, sp3 := newSpyStore(t, durable.WithWaitPolling(time.Millisecond, 2*time.Millisecond))
	sp3.keys = []contract.KeyRecord{{}}
	sp3.keyErrs = []error{contract.ErrUnavailable}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	defer cancel()
	if _, err := s3.WaitKey(cctx, durable.KeyRef{Key: "k"}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("timeout: %v", err)
	}
	if sp3.getN.Load() < 2 {
		t.Fatalf("polled %d times, want retries", sp3.getN.Load())
	}
}

func TestTenantScope(t *testing.T) {
	a, b := durable.TenantScope("acme"), durable.TenantScope("globex")
	if a == b || a != durable.TenantScope("acme") {
		t.Fatal("TenantScope is not a function of the id")
	}
	if !strings.HasPrefix(string(a), "sha256:") || len(a) != len("sha256:")+64 || strings.Contains(string(a), "acme") {
		t.Fatalf("TenantScope = %q", a)
	}
	// Any input, even one that is not an identifier, yields a valid scope.
	s, _ := newSpyStore(t)
	if _, err := s.GetWorkflow(context.Background(), durable.TenantScope("évil tenant/../"), "w"); err != nil {
		t.Fatalf("derived scope rejected: %v", err)
	}
}

type nopDriver struct{}

func (nopDriver) Open(context.Context, string) (contract.Backend, error) { return &spy{}, nil }

type failDriver struct{}

func (failDriver) Open(context.Context, string) (contract.Backend, error) {
	return nil, &contract.Error{Code: contract.Unavailable, Msg: "cannot connect", Err: errors.New("dial user:pw@host")}
}

// registerTestDrivers registers the test drivers once per process, so that
// the tests can run with -count > 1.
var registerTestDrivers = sync.OnceFunc(func() {
	durable.Register("Test-Nop", nopDriver{})
	durable.Register("test-fail", failDriver{})
})

// TestSyntaxEdges runs the edges of every string syntax the Store checks
// (identifiers, scopes, statuses, tokens, fingerprints, refs, header names):
// the valid side must reach the backend, the invalid side must not.
func TestSyntaxEdges(t *testing.T) {
	ctx := context.Background()
	id128 := strings.Repeat("a", 128)
	cases := []struct {
		name  string
		valid bool
		call  func(s *durable.Store) error
	}{
		{"IDAllowedChars", true, func(s *durable.Store) error { _, err := s.GetWorkflow(ctx, "", "Az09_.:-"); return err }},
		{"ID128Bytes", true, func(s *durable.Store) error { _, err := s.GetWorkflow(ctx, "", id128); return err }},
		{"IDLeadingDigit", true, func(s *durable.Store) error { _, err := s.GetWorkflow(ctx, "", "9x"); return err }},
		{"IDLeadingUnderscore", false, func(s *durable.Store) error { _, err := s.GetWorkflow(ctx, "", "_x"); return err }},
		{"IDSlash", false, func(s *durable.Store) error { _, err := s.GetWorkflow(ctx, "", "a/b"); return err }},
		{"IDHighByte", false, func(s *durable.Store) error { _, err := s.GetWorkflow(ctx, "", "a\xff"); return err }},
		{"TenantScope", true, func(s *durable.Store) error { _, err := s.GetWorkflow(ctx, durable.TenantScope("t"), "x"); return err }},
		{"ScopeLeadingColon", false, func(s *durable.Store) error { _, err := s.GetWorkflow(ctx, ":a", "x"); return err }},
		{"StatusAllowedChars", true, func(s *durable.Store) error {
			_, err := s.CreateWorkflow(ctx, durable.Workflow{ID: "x", Status: "a_9z"})
			return err
		}},
		{"Status64Bytes", true, func(s *durable.Store) error {
			_, err := s.CreateWorkflow(ctx, durable.Workflow{ID: "x", Status: durable.Status(strings.Repeat("a", 64))})
			return err
		}},
		{"StatusLeadingDigit", false, func(s *durable.Store) error {
			_, err := s.CreateWorkflow(ctx, durable.Workflow{ID: "x", Status: "9a"})
			return err
		}},
		{"StatusDash", false, func(s *durable.Store) error {
			_, err := s.CreateWorkflow(ctx, durable.Workflow{ID: "x", Status: "a-b"})
			return err
		}},
		{"TokenPrintable", true, func(s *durable.Store) error { _, err := s.ReleaseKey(ctx, durable.KeyRef{Key: "k"}, "!~/"); return err }},
		{"TokenSpace", false, func(s *durable.Store) error { _, err := s.ReleaseKey(ctx, durable.KeyRef{Key: "k"}, "a b"); return err }},
		{"Token129Bytes", false, func(s *durable.Store) error {
			_, err := s.ReleaseKey(ctx, durable.KeyRef{Key: "k"}, strings.Repeat("t", 129))
			return err
		}},
		{"Fingerprint256Bytes", true, func(s *durable.Store) error {
			_, err := s.ClaimKey(ctx, durable.ClaimRequest{KeyRef: durable.KeyRef{Key: "k"}, Fingerprint: strings.Repeat("f", 256)})
			return err
		}},
		{"Fingerprint257Bytes", false, func(s *durable.Store) error {
			_, err := s.ClaimKey(ctx, durable.ClaimRequest{KeyRef: durable.KeyRef{Key: "k"}, Fingerprint: strings.Repeat("f", 257)})
			return err
		}},
		{"RefAndHeaderPrintable", true, func(s *durable.Store) error {
			_, err := s.CompleteKey(ctx, durable.Completion{KeyRef: durable.KeyRef{Key: "k"}, Token: "t",
				Outcome: durable.Outcome{Ref: "/orders/1?x=y", Header: map[string][]string{"X-Id": {"1"}}}})
			return err
		}},
		{"RefControlChar", false, func(s *durable.Store) error {
			_, err := s.CompleteKey(ctx, durable.Completion{KeyRef: durable.KeyRef{Key: "k"}, Token: "t", Outcome: durable.Outcome{Ref: "a\tb"}})
			return err
		}},
		{"HeaderNameSpace", false, func(s *durable.Store) error {
			_, err := s.CompleteKey(ctx, durable.Completion{KeyRef: durable.KeyRef{Key: "k"}, Token: "t",
				Outcome: durable.Outcome{Header: map[string][]string{"X Id": {"1"}}}})
			return err
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, sp := newSpyStore(t)
			err := c.call(s)
			if invalid := errors.Is(err, durable.ErrInvalidArgument); invalid == c.valid {
				t.Fatalf("err = %v, want valid=%v", err, c.valid)
			}
			if n := sp.calls.Load(); (n == 1) != c.valid {
				t.Fatalf("backend called %d times, want valid=%v", n, c.valid)
			}
		})
	}
}

// TestStoreAs reaches the backend behind a Store by its concrete type and
// by its capabilities, and refuses what the backend is not.
func TestStoreAs(t *testing.T) {
	s, err := memory.Open(memory.Options{Tolerance: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var b *memory.Backend
	if !s.As(&b) || b == nil || b.ClockTolerance() != time.Second {
		t.Fatalf("As(*memory.Backend) = %v, %v", b != nil, b)
	}
	var cc contract.CleanupCounter
	if !s.As(&cc) || cc == nil {
		t.Fatal("As(contract.CleanupCounter) failed on the memory backend")
	}
	var raw contract.Backend
	if !s.As(&raw) || raw != contract.Backend(b) {
		t.Fatal("As(contract.Backend) did not give the same backend")
	}
	sp, _ := newSpyStore(t)
	var notSpy *memory.Backend
	if sp.As(&notSpy) || notSpy != nil {
		t.Fatal("As set a *memory.Backend from a spy backend")
	}
	var noCount contract.CleanupCounter
	if sp.As(&noCount) {
		t.Fatal("As found CleanupCounter on a backend without it")
	}
	if s.As(nil) || s.As(b) || s.As((*contract.Backend)(nil)) {
		t.Fatal("As accepted a nil or non-pointer-to-variable target")
	}
}

// TestMemoryOpenValidates: memory.Open, the easy path, returns a Store, so
// bad input is rejected before the backend sees it.
func TestMemoryOpenValidates(t *testing.T) {
	s, err := memory.Open(memory.Options{}, durable.WithMaxSnapshotBytes(8))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	if _, err := s.CreateWorkflow(ctx, durable.Workflow{ID: "bad id"}); !errors.Is(err, durable.ErrInvalidArgument) {
		t.Fatalf("bad id: %v", err)
	}
	if _, err := s.CreateWorkflow(ctx, durable.Workflow{ID: "w", Snapshot: make([]byte, 9)}); !errors.Is(err, durable.ErrInvalidArgument) {
		t.Fatalf("store option not applied: %v", err)
	}
	if _, err := memory.Open(memory.Options{}, durable.WithOperationTimeout(-1)); !errors.Is(err, durable.ErrInvalidArgument) {
		t.Fatalf("invalid store option: %v", err)
	}
}

func TestRegistry(t *testing.T) {
	registerTestDrivers()
	drivers := durable.Drivers()
	for i := 1; i < len(drivers); i++ {
		if drivers[i-1] >= drivers[i] {
			t.Fatalf("Drivers() not sorted: %v", drivers)
		}
	}
	if !strings.Contains(strings.Join(drivers, ","), "test-nop") {
		t.Fatalf("Drivers() = %v", drivers)
	}
	ctx := context.Background()
	if _, err := durable.Open(ctx, "TEST-NOP://x"); err != nil {
		t.Fatalf("case-insensitive scheme: %v", err)
	}
	_, err := durable.Open(ctx, "test-fail://user:pw@host")
	if !errors.Is(err, durable.ErrUnavailable) || strings.Contains(err.Error(), "pw@host") {
		t.Fatalf("failing driver: %v", err)
	}
	_, err = durable.Open(ctx, "nosuch://user:secret@h")
	if !errors.Is(err, durable.ErrInvalidArgument) || !strings.Contains(err.Error(), "forgotten import?") ||
		!strings.Contains(err.Error(), "memory") || strings.Contains(err.Error(), "secret") {
		t.Fatalf("unknown scheme: %v", err)
	}
	for _, dsn := range []string{"", "memory", "://x", "1abc://x", "user:secret@host/db"} {
		if _, err := durable.Open(ctx, dsn); !errors.Is(err, durable.ErrInvalidArgument) || strings.Contains(err.Error(), "secret") {
			t.Errorf("Open(%q): %v", dsn, err)
		}
	}

	mustPanic := func(name string, f func()) {
		t.Helper()
		defer func() {
			if recover() == nil {
				t.Errorf("%s: no panic", name)
			}
		}()
		f()
	}
	mustPanic("nil", func() { durable.Register("x-nil", nil) })
	mustPanic("empty", func() { durable.Register("", nopDriver{}) })
	mustPanic("duplicate", func() { durable.Register("test-NOP", nopDriver{}) })
	mustPanic("invalid", func() { durable.Register("a b", nopDriver{}) })
}

func TestMemoryDSN(t *testing.T) {
	ctx := context.Background()
	// Named stores live as long as the process: a fresh name per run keeps
	// the test repeatable under -count.
	name := fmt.Sprintf("shared-dsn-test-%d", time.Now().UnixNano())
	a, err := durable.Open(ctx, "memory://"+name+"?tolerance=1s")
	if err != nil {
		t.Fatal(err)
	}
	b, err := durable.Open(ctx, "MEMORY://"+name+"?tolerance=1s")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.CreateWorkflow(ctx, durable.Workflow{ID: "w"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.GetWorkflow(ctx, "", "w"); err != nil {
		t.Fatalf("named store not shared: %v", err)
	}
	p, err := durable.Open(ctx, "memory://")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.GetWorkflow(ctx, "", "w"); !errors.Is(err, durable.ErrNotFound) {
		t.Fatalf("private store sees shared records: %v", err)
	}
	for _, dsn := range []string{"memory://x?bogus=1", "memory://x?tolerance=soon", "memory://" + name + "?tolerance=2s"} {
		if _, err := durable.Open(ctx, dsn); !errors.Is(err, durable.ErrInvalidArgument) {
			t.Errorf("Open(%q): %v", dsn, err)
		}
	}
}

func TestMemoryClockInjection(t *testing.T) {
	ctx := context.Background()
	clock := memory.NewManualClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	s, err := memory.Open(memory.Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	w, err := s.CreateWorkflow(ctx, durable.Workflow{ID: "w"})
	if err != nil || !w.CreatedAt.Equal(clock.Now()) {
		t.Fatalf("CreatedAt = %v, want %v (err %v)", w.CreatedAt, clock.Now(), err)
	}
}

func TestCountCleanupDeletesNothing(t *testing.T) {
	ctx := context.Background()
	clock := memory.NewManualClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	s, _ := memStore(t, memory.Options{Clock: clock})
	for _, id := range []string{"a", "b", "c"} {
		if _, err := s.CreateWorkflow(ctx, durable.Workflow{ID: id, Status: durable.StatusSucceeded}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.CreateWorkflow(ctx, durable.Workflow{ID: "live", Status: durable.StatusRunning}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Hour)
	req := durable.CleanupRequest{TerminalAge: time.Hour, Limit: 2}
	got, err := s.CountCleanup(ctx, req)
	if err != nil || got.Workflows != 2 || !got.More {
		t.Fatalf("count = %+v, %v; want 2 workflows and More", got, err)
	}
	if list, _ := s.ListWorkflows(ctx, durable.ListQuery{}); len(list) != 4 {
		t.Fatalf("count deleted records: %d left", len(list))
	}
	if got, err := s.CountCleanup(ctx, durable.CleanupRequest{TerminalAge: time.Hour}); err != nil || got.Workflows != 3 || got.More {
		t.Fatalf("count = %+v, %v", got, err)
	}
	// A backend without the capability says so.
	sp, _ := newSpyStore(t)
	if _, err := sp.CountCleanup(ctx, req); !errors.Is(err, durable.ErrUnimplemented) {
		t.Fatalf("spy: %v", err)
	}
}

func TestListKeysAndLeasesValidateAndNeedTheCapability(t *testing.T) {
	ctx := context.Background()
	s, _ := memStore(t, memory.Options{})
	for _, q := range []durable.KeyListQuery{
		{State: "done"}, {Limit: -1}, {Limit: durable.MaxListLimit + 1}, {After: "bad key"}, {Scope: "Bad Scope"},
	} {
		if _, err := s.ListKeys(ctx, q); !errors.Is(err, durable.ErrInvalidArgument) {
			t.Errorf("ListKeys(%+v) = %v, want InvalidArgument", q, err)
		}
	}
	for _, q := range []durable.LeaseListQuery{{Limit: -1}, {Limit: durable.MaxListLimit + 1}, {After: "bad resource"}} {
		if _, err := s.ListLeases(ctx, q); !errors.Is(err, durable.ErrInvalidArgument) {
			t.Errorf("ListLeases(%+v) = %v, want InvalidArgument", q, err)
		}
	}
	// Limit 0 is the default page of 100.
	for i := range durable.DefaultListLimit + 5 {
		if _, err := s.AcquireLease(ctx, durable.LeaseRequest{Resource: fmt.Sprintf("r-%03d", i), Owner: "o"}); err != nil {
			t.Fatal(err)
		}
	}
	if page, err := s.ListLeases(ctx, durable.LeaseListQuery{}); err != nil || len(page) != durable.DefaultListLimit {
		t.Errorf("ListLeases with Limit 0 = %d leases, %v; want %d", len(page), err, durable.DefaultListLimit)
	}
	sp, _ := newSpyStore(t)
	if _, err := sp.ListKeys(ctx, durable.KeyListQuery{}); !errors.Is(err, durable.ErrUnimplemented) {
		t.Errorf("ListKeys on a backend without RecordLister: %v", err)
	}
	if _, err := sp.ListLeases(ctx, durable.LeaseListQuery{}); !errors.Is(err, durable.ErrUnimplemented) {
		t.Errorf("ListLeases on a backend without RecordLister: %v", err)
	}
}
