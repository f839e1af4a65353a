package conformance

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/contract"
)

// Sizes of the races. Small enough for a database backend to run the whole
// suite in seconds, large enough to interleave.
const (
	raceClients   = 8 // clients racing for one claim, lease or revision
	counterWriter = 8 // clients incrementing one counter
	counterSteps  = 6 // increments per client: 48 in all
)

// waitGuard bounds how long the suite waits for a WaitKey that should
// return. A correct backend returns in milliseconds.
const waitGuard = 5 * time.Second

// need is a capability a scenario requires.
type need uint8

const (
	needClock     need = 1 << iota // Capabilities.Clock
	needTolerance                  // a clock tolerance > 0
	needRestart                    // Capabilities.Restart
)

// scenario is one leaf test of the suite.
type scenario struct {
	name  string
	needs need
	run   func(t *testing.T, e *env)
}

// env is the state of one scenario: its harness and the clients it opened.
type env struct {
	t    *testing.T
	name string // group/scenario, for the summary
	sum  *summary
	h    Harness
	ctx  context.Context
	caps Capabilities
	tol  time.Duration // the backend's clock tolerance
	g    time.Duration // the precision of time checks (see Capabilities.Granularity)
	ttl  time.Duration // the TTL the scenarios use for claims and leases

	spare  *durable.Store // the first client, opened by setup and handed out by the first open
	stores []*durable.Store
}

// setup creates a harness over fresh storage for the scenario and opens its
// first client, which must report the clock tolerance the preflight saw.
func (e *env) setup(newHarness NewHarness, info backendInfo) {
	t := e.t
	t.Helper()
	e.ctx = t.Context()
	h, err := newHarness(e.ctx, t)
	if err != nil {
		t.Fatalf("creating the harness: %v", err)
	}
	if h == nil {
		t.Fatal("the harness factory returned a nil Harness and no error")
	}
	t.Cleanup(func() {
		if err := h.Close(); err != nil {
			t.Errorf("Harness.Close: %v", err)
		}
	})
	e.h, e.caps, e.g = h, h.Capabilities(), info.granularity()
	e.tol = info.tol
	e.spare = e.newStore()
	// A TTL comfortably larger than the tolerance, so that "half a TTL" and
	// "TTL minus half the tolerance" are both still inside the lease.
	e.ttl = 10 * time.Second
	if floor := 4*e.tol + 2*time.Second; e.ttl < floor {
		e.ttl = floor.Truncate(time.Second) + time.Second
	}
	if e.ttl > time.Hour {
		t.Fatalf("the backend's clock tolerance %v is too large for the suite (it needs TTLs of 4×tolerance, at most 1h)", e.tol)
	}
}

// skipf skips the scenario with a message that the summary repeats.
func (e *env) skipf(format string, args ...any) {
	e.t.Helper()
	msg := fmt.Sprintf(format, args...)
	e.sum.skip(e.name, msg)
	e.t.Skip("SKIPPED, rule not checked on this backend: " + msg)
}

// require skips the scenario, with a message, when the harness or backend
// lacks what it needs.
func (e *env) require(n need, info backendInfo) {
	e.t.Helper()
	if why := info.missing(n); why != "" {
		e.skipf("%s", why)
	}
}

// rawOpen returns a new client of the backend itself, not wrapped in a
// Store, for the scenarios about what the Store cannot check or hides. The
// client is closed when the test ends unless close was called.
func (e *env) rawOpen() (b contract.Backend, close func() error) {
	e.t.Helper()
	b, err := e.h.Open(e.ctx)
	if err != nil {
		e.t.Fatalf("Harness.Open: %v", err)
	}
	if b == nil {
		e.t.Fatal("Harness.Open returned a nil Backend and no error")
	}
	var once sync.Once
	close = func() error {
		err := error(nil)
		once.Do(func() { err = b.Close() })
		return err
	}
	e.t.Cleanup(func() {
		if err := close(); err != nil {
			e.t.Errorf("Backend.Close: %v", err)
		}
	})
	return b, close
}

// newStore opens a client, wraps it in a Store and checks that it reports
// the same clock tolerance as every other client.
func (e *env) newStore() *durable.Store {
	e.t.Helper()
	b, err := e.h.Open(e.ctx)
	if err != nil {
		e.t.Fatalf("Harness.Open: %v", err)
	}
	if b == nil {
		e.t.Fatal("Harness.Open returned a nil Backend and no error")
	}
	s, err := durable.New(b, storeOptions()...)
	if err != nil {
		_ = b.Close()
		e.t.Fatalf("durable.New: %v", err)
	}
	e.stores = append(e.stores, s)
	e.t.Cleanup(func() {
		if err := s.Close(); err != nil {
			e.t.Errorf("Store.Close: %v", err)
		}
	})
	if got := s.ClockTolerance(); got != e.tol {
		e.t.Fatalf("a client reports a clock tolerance of %v, another %v: every client of one storage must judge expiry with the same tolerance", got, e.tol)
	}
	return s
}

// open returns a new client on the harness's storage, closed when the test
// ends.
func (e *env) open() *durable.Store {
	e.t.Helper()
	if s := e.spare; s != nil {
		e.spare = nil
		return s
	}
	return e.newStore()
}

// openN returns n clients on the harness's storage.
func (e *env) openN(n int) []*durable.Store {
	e.t.Helper()
	out := make([]*durable.Store, n)
	for i := range out {
		out[i] = e.open()
	}
	return out
}

// closeAll closes every client opened so far.
func (e *env) closeAll() {
	e.t.Helper()
	for _, s := range e.stores {
		if err := s.Close(); err != nil {
			e.t.Errorf("Store.Close: %v", err)
		}
	}
	e.stores, e.spare = nil, nil
}

// advance moves the store clock. Only scenarios that declared needClock
// call it.
func (e *env) advance(d time.Duration) {
	e.t.Helper()
	if !e.caps.Clock {
		e.t.Fatal("internal error: scenario advances the clock without declaring needClock")
	}
	e.h.Advance(d)
}

// checkTime asserts that a stored time is want, to the backend's
// granularity.
func (e *env) checkTime(t *testing.T, what string, got, want time.Time) bool {
	t.Helper()
	if d := got.Sub(want); d <= -e.g || d >= e.g {
		t.Errorf("%s = %v, want %v (off by %v; the backend's time granularity is %v)", what, got, want, d, e.g)
		return false
	}
	return true
}

// checkDur asserts that a duration between stored times is want, to the
// backend's granularity.
func (e *env) checkDur(t *testing.T, what string, got, want time.Duration) bool {
	t.Helper()
	if d := got - want; d <= -e.g || d >= e.g {
		t.Errorf("%s = %v, want %v (off by %v; the backend's time granularity is %v)", what, got, want, d, e.g)
		return false
	}
	return true
}

// pastTakeover is how far to move the clock so that a claim or lease of
// e.ttl taken now can be taken over: its TTL, the tolerance and a second.
func (e *env) pastTakeover() time.Duration { return e.ttl + e.tol + time.Second }

// race runs fn(0) … fn(n-1) in goroutines released at the same moment and
// waits for all of them. fn must not call t.Fatal.
func race(n int, fn func(i int)) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			fn(i)
		})
	}
	close(start)
	wg.Wait()
}

// --- errors ---

// checkCode reports an error unless err carries code. It returns whether it
// did.
func checkCode(t *testing.T, err error, code contract.Code) bool {
	t.Helper()
	if err == nil {
		t.Errorf("got no error, want code %q", code)
		return false
	}
	var ce *contract.Error
	if !errors.As(err, &ce) {
		t.Errorf("got error %v of type %T, want a *contract.Error with code %q", err, err, code)
		return false
	}
	if got := contract.CodeOf(err); got != code {
		t.Errorf("got code %q (error: %v), want code %q", got, err, code)
		return false
	}
	if !errors.Is(err, &contract.Error{Code: code}) {
		t.Errorf("errors.Is(%v, the %q sentinel) is false", err, code)
		return false
	}
	return true
}

// checkCtxErr reports an error unless errors.Is(err, target) for a context
// error target.
func checkCtxErr(t *testing.T, err, target error) bool {
	t.Helper()
	if !errors.Is(err, target) {
		t.Errorf("got error %v (code %q), want errors.Is(err, %v)", err, contract.CodeOf(err), target)
		return false
	}
	return true
}

// noErr fails the test now if err is not nil.
func noErr(t *testing.T, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: unexpected error (code %q): %v", what, contract.CodeOf(err), err)
	}
}

// --- test data ---

// binaryData returns bytes that break naive storage: NUL, 0xff, invalid
// UTF-8, a backslash escape and SQL quoting, a label, and 1 KiB of random
// bytes (the same for the same label).
func binaryData(label string) []byte {
	b := []byte{0x00, 0xff, 0xfe, 0xc3, 0x28, 0xed, 0xa0, 0x80, 0xf8, 0x88, 0x80, 0x80, 0x80, 0x00}
	b = append(b, `\x00 \\ '; DROP TABLE workflows; -- "`...)
	b = append(b, label...)
	var seed [32]byte
	copy(seed[:], label)
	r := rand.NewChaCha8(seed)
	blob := make([]byte, 1024)
	_, _ = r.Read(blob)
	b = append(b, blob...)
	return append(b, 0x00)
}

// testOutcome returns an outcome with a binary body, several values per
// header, an empty value and odd (but HTTP-legal) bytes.
func testOutcome(label string) contract.Outcome {
	return contract.Outcome{
		Code: 201,
		Header: map[string][]string{
			"Content-Type":                 {"application/octet-stream"},
			"Set-Cookie":                   {"a=1; Path=/", "b=2", "", "a=1; Path=/"},
			"X-Odd":                        {"tab\there", `"quoted", comma; semi`, "é ü 漢字", "\xff\xfe obs-text \x80", "  spaces  ", label},
			"X-Weird-Name!#$%&'*+.^_`|~":   {"v"},
			"x-lower-case-and-\\backslash": {`\x00 \\`},
		},
		Body: binaryData("body " + label),
		Ref:  "order-42/" + strings.ReplaceAll(label, " ", "_") + "?x=1&y='2'",
	}
}

// counterSnapshot encodes n with some binary padding.
func counterSnapshot(n uint64) []byte {
	b := binary.BigEndian.AppendUint64(nil, n)
	return append(b, 0x00, 0xff, 0xc3)
}

func counterOf(t *testing.T, snap []byte) uint64 {
	t.Helper()
	if len(snap) != 11 {
		t.Errorf("counter snapshot has %d bytes, want 11: %x", len(snap), snap)
		return 0
	}
	return binary.BigEndian.Uint64(snap)
}

// --- comparisons ---

// fmtWorkflow prints a workflow briefly, without its snapshot bytes.
func fmtWorkflow(w contract.Workflow) string {
	return fmt.Sprintf("{Scope %q ID %q Status %q Revision %d, %d snapshot bytes}", w.Scope, w.ID, w.Status, w.Revision, len(w.Snapshot))
}

// fmtKey prints a key record briefly, without its outcome's bytes.
func fmtKey(r contract.KeyRecord) string {
	code := "none"
	if r.Outcome != nil {
		code = fmt.Sprint(r.Outcome.Code)
	}
	return fmt.Sprintf("{Scope %q Key %q State %q Fingerprint %q WorkflowID %q LeaseUntil %v, outcome code %s}",
		r.Scope, r.Key, r.State, r.Fingerprint, r.WorkflowID, r.LeaseUntil, code)
}

func diffWorkflow(got, want contract.Workflow) string {
	var d []string
	if got.Scope != want.Scope {
		d = append(d, fmt.Sprintf("Scope %q, want %q", got.Scope, want.Scope))
	}
	if got.ID != want.ID {
		d = append(d, fmt.Sprintf("ID %q, want %q", got.ID, want.ID))
	}
	if got.RequestID != want.RequestID {
		d = append(d, fmt.Sprintf("RequestID %q, want %q", got.RequestID, want.RequestID))
	}
	if got.Status != want.Status {
		d = append(d, fmt.Sprintf("Status %q, want %q", got.Status, want.Status))
	}
	if got.Revision != want.Revision {
		d = append(d, fmt.Sprintf("Revision %d, want %d", got.Revision, want.Revision))
	}
	if !bytes.Equal(got.Snapshot, want.Snapshot) {
		d = append(d, fmt.Sprintf("Snapshot differs (%d bytes, want %d bytes)", len(got.Snapshot), len(want.Snapshot)))
	}
	if !got.CreatedAt.Equal(want.CreatedAt) {
		d = append(d, fmt.Sprintf("CreatedAt %v, want %v", got.CreatedAt, want.CreatedAt))
	}
	if !got.UpdatedAt.Equal(want.UpdatedAt) {
		d = append(d, fmt.Sprintf("UpdatedAt %v, want %v", got.UpdatedAt, want.UpdatedAt))
	}
	return strings.Join(d, "; ")
}

func checkWorkflow(t *testing.T, what string, got, want contract.Workflow) {
	t.Helper()
	if d := diffWorkflow(got, want); d != "" {
		t.Errorf("%s: %s", what, d)
	}
}

// checkStored reads the workflow back and compares it with want.
func checkStored(t *testing.T, ctx context.Context, s *durable.Store, want contract.Workflow) {
	t.Helper()
	got, err := s.GetWorkflow(ctx, want.Scope, want.ID)
	if err != nil {
		t.Errorf("GetWorkflow(%q, %q): %v", want.Scope, want.ID, err)
		return
	}
	checkWorkflow(t, "stored workflow "+want.ID, got, want)
}

// checkNoWorkflow asserts that (scope, id) does not exist.
func checkNoWorkflow(t *testing.T, ctx context.Context, s *durable.Store, scope contract.Scope, id string) {
	t.Helper()
	w, err := s.GetWorkflow(ctx, scope, id)
	if err == nil {
		t.Errorf("GetWorkflow(%q, %q) found %s, want NotFound", scope, id, fmtWorkflow(w))
		return
	}
	checkCode(t, err, contract.NotFound)
}

func diffOutcome(got, want *contract.Outcome) string {
	switch {
	case got == nil && want == nil:
		return ""
	case got == nil:
		return "Outcome is nil"
	case want == nil:
		return fmt.Sprintf("Outcome is {Code %d, Ref %q, %d header names, %d body bytes}, want nil", got.Code, got.Ref, len(got.Header), len(got.Body))
	}
	var d []string
	if got.Code != want.Code {
		d = append(d, fmt.Sprintf("Outcome.Code %d, want %d", got.Code, want.Code))
	}
	if got.Ref != want.Ref {
		d = append(d, fmt.Sprintf("Outcome.Ref %q, want %q", got.Ref, want.Ref))
	}
	if !bytes.Equal(got.Body, want.Body) {
		d = append(d, fmt.Sprintf("Outcome.Body differs (%d bytes, want %d bytes)", len(got.Body), len(want.Body)))
	}
	if len(got.Header) != len(want.Header) {
		d = append(d, fmt.Sprintf("Outcome.Header has %d names %q, want %d %q", len(got.Header), sortedKeys(got.Header), len(want.Header), sortedKeys(want.Header)))
	}
	for _, k := range sortedKeys(want.Header) {
		if !slices.Equal(got.Header[k], want.Header[k]) {
			d = append(d, fmt.Sprintf("Outcome.Header[%q] = %q, want %q", k, got.Header[k], want.Header[k]))
		}
	}
	return strings.Join(d, "; ")
}

func sortedKeys(m map[string][]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func diffKey(got, want contract.KeyRecord) string {
	var d []string
	if got.KeyRef != want.KeyRef {
		d = append(d, fmt.Sprintf("KeyRef %+v, want %+v", got.KeyRef, want.KeyRef))
	}
	if got.Fingerprint != want.Fingerprint {
		d = append(d, fmt.Sprintf("Fingerprint %q, want %q", got.Fingerprint, want.Fingerprint))
	}
	if got.WorkflowID != want.WorkflowID {
		d = append(d, fmt.Sprintf("WorkflowID %q, want %q", got.WorkflowID, want.WorkflowID))
	}
	if got.State != want.State {
		d = append(d, fmt.Sprintf("State %q, want %q", got.State, want.State))
	}
	for _, tm := range []struct {
		name      string
		got, want time.Time
	}{
		{"LeaseUntil", got.LeaseUntil, want.LeaseUntil},
		{"CreatedAt", got.CreatedAt, want.CreatedAt},
		{"CompletedAt", got.CompletedAt, want.CompletedAt},
		{"ExpiresAt", got.ExpiresAt, want.ExpiresAt},
	} {
		if !tm.got.Equal(tm.want) {
			d = append(d, fmt.Sprintf("%s %v, want %v", tm.name, tm.got, tm.want))
		}
	}
	if o := diffOutcome(got.Outcome, want.Outcome); o != "" {
		d = append(d, o)
	}
	return strings.Join(d, "; ")
}

func checkKey(t *testing.T, what string, got, want contract.KeyRecord) {
	t.Helper()
	if d := diffKey(got, want); d != "" {
		t.Errorf("%s: %s", what, d)
	}
}

// checkStoredKey reads the key back and compares it with want.
func checkStoredKey(t *testing.T, ctx context.Context, s *durable.Store, want contract.KeyRecord) {
	t.Helper()
	got, err := s.GetKey(ctx, want.KeyRef)
	if err != nil {
		t.Errorf("GetKey(%+v): %v", want.KeyRef, err)
		return
	}
	checkKey(t, "stored key "+want.Key, got, want)
}

// checkNoKey asserts that the key has no record.
func checkNoKey(t *testing.T, ctx context.Context, s *durable.Store, ref contract.KeyRef) {
	t.Helper()
	rec, err := s.GetKey(ctx, ref)
	if err == nil {
		t.Errorf("GetKey(%+v) found %s, want NotFound", ref, fmtKey(rec))
		return
	}
	checkCode(t, err, contract.NotFound)
}

func diffLease(got, want contract.Lease) string {
	var d []string
	if got.Scope != want.Scope || got.Resource != want.Resource {
		d = append(d, fmt.Sprintf("lease on (%q, %q), want (%q, %q)", got.Scope, got.Resource, want.Scope, want.Resource))
	}
	if got.Owner != want.Owner {
		d = append(d, fmt.Sprintf("Owner %q, want %q", got.Owner, want.Owner))
	}
	if got.Token != want.Token {
		d = append(d, fmt.Sprintf("Token %d, want %d", got.Token, want.Token))
	}
	if !got.AcquiredAt.Equal(want.AcquiredAt) {
		d = append(d, fmt.Sprintf("AcquiredAt %v, want %v", got.AcquiredAt, want.AcquiredAt))
	}
	if !got.ExpiresAt.Equal(want.ExpiresAt) {
		d = append(d, fmt.Sprintf("ExpiresAt %v, want %v", got.ExpiresAt, want.ExpiresAt))
	}
	if got.Value != want.Value {
		d = append(d, fmt.Sprintf("Value of %d bytes %s, want %d bytes %s", len(got.Value), shortValue(got.Value), len(want.Value), shortValue(want.Value)))
	}
	return strings.Join(d, "; ")
}

// shortValue quotes a lease value, cut to its first 40 bytes.
func shortValue(v string) string {
	if len(v) > 40 {
		return fmt.Sprintf("%q…", v[:40])
	}
	return fmt.Sprintf("%q", v)
}

// checkStoredLease reads the lease back and compares it with want.
func checkStoredLease(t *testing.T, ctx context.Context, s *durable.Store, want contract.Lease) {
	t.Helper()
	got, err := s.GetLease(ctx, want.Scope, want.Resource)
	if err != nil {
		t.Errorf("GetLease(%q, %q): %v", want.Scope, want.Resource, err)
		return
	}
	if d := diffLease(got, want); d != "" {
		t.Errorf("stored lease %s: %s", want.Resource, d)
	}
}

// checkNoLease asserts that the resource has no lease.
func checkNoLease(t *testing.T, ctx context.Context, s *durable.Store, scope contract.Scope, resource string) {
	t.Helper()
	l, err := s.GetLease(ctx, scope, resource)
	if err == nil {
		t.Errorf("GetLease(%q, %q) found %+v, want NotFound", scope, resource, l)
		return
	}
	checkCode(t, err, contract.NotFound)
}

// checkAtLeast asserts that got >= want.
func checkAtLeast(t *testing.T, what string, got, want time.Duration) {
	t.Helper()
	if got < want {
		t.Errorf("%s = %v, want at least %v", what, got, want)
	}
}

// --- shorthands ---

func mustCreate(t *testing.T, ctx context.Context, s *durable.Store, w contract.Workflow) contract.Workflow {
	t.Helper()
	out, err := s.CreateWorkflow(ctx, w)
	noErr(t, err, fmt.Sprintf("CreateWorkflow(%q, %q)", w.Scope, w.ID))
	return out
}

// mustUpdate applies one update that must succeed.
func mustUpdate(t *testing.T, ctx context.Context, s *durable.Store, u contract.Update) contract.Workflow {
	t.Helper()
	out, err := s.UpdateWorkflow(ctx, u)
	noErr(t, err, fmt.Sprintf("UpdateWorkflow(%q, %q)", u.Scope, u.ID))
	return out
}

// mustFinish moves a workflow from its current status to a terminal one.
func mustFinish(t *testing.T, ctx context.Context, s *durable.Store, w contract.Workflow, to contract.Status) contract.Workflow {
	t.Helper()
	return mustUpdate(t, ctx, s, contract.Update{
		Scope: w.Scope, ID: w.ID, ExpectStatus: w.Status, ExpectRevision: w.Revision,
		Status: to, Snapshot: w.Snapshot, RequestID: w.RequestID,
	})
}

func mustClaim(t *testing.T, ctx context.Context, s *durable.Store, req contract.ClaimRequest, kind contract.ClaimKind) contract.Claim {
	t.Helper()
	c, err := s.ClaimKey(ctx, req)
	noErr(t, err, fmt.Sprintf("ClaimKey(%q, %q)", req.Scope, req.Key))
	if c.Kind != kind {
		t.Fatalf("ClaimKey(%q, %q) = %v, want %v", req.Scope, req.Key, c.Kind, kind)
	}
	if kind.Owned() && c.Token == "" {
		t.Fatalf("ClaimKey(%q, %q) = %v with an empty token", req.Scope, req.Key, c.Kind)
	}
	return c
}

func mustComplete(t *testing.T, ctx context.Context, s *durable.Store, c contract.Completion) contract.KeyRecord {
	t.Helper()
	rec, err := s.CompleteKey(ctx, c)
	noErr(t, err, fmt.Sprintf("CompleteKey(%q, %q)", c.Scope, c.Key))
	return rec
}

func mustAcquire(t *testing.T, ctx context.Context, s *durable.Store, req contract.LeaseRequest) contract.Lease {
	t.Helper()
	l, err := s.AcquireLease(ctx, req)
	noErr(t, err, fmt.Sprintf("AcquireLease(%q, %q, owner %q)", req.Scope, req.Resource, req.Owner))
	return l
}

// waitResult is what a WaitKey goroutine returned.
type waitResult struct {
	rec contract.KeyRecord
	err error
}

// startWait runs WaitKey in a goroutine, bounded by waitGuard.
func startWait(ctx context.Context, s *durable.Store, ref contract.KeyRef) <-chan waitResult {
	return startWaitThen(ctx, s, ref, func() {})
}

// startWaitThen is startWait that calls started from the goroutine just
// before it calls WaitKey.
func startWaitThen(ctx context.Context, s *durable.Store, ref contract.KeyRef, started func()) <-chan waitResult {
	ch := make(chan waitResult, 1)
	go func() {
		ctx, cancel := context.WithTimeout(ctx, waitGuard)
		defer cancel()
		started()
		rec, err := s.WaitKey(ctx, ref)
		ch <- waitResult{rec, err}
	}()
	return ch
}

// awaitWait returns what the WaitKey goroutine returned. A WaitKey that
// ignores its context fails the test.
func awaitWait(t *testing.T, ch <-chan waitResult) waitResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(waitGuard + 5*time.Second):
		t.Fatalf("WaitKey did not return %v after its context ended", 5*time.Second)
		return waitResult{}
	}
}

// checkStillWaiting gives a waiter a few milliseconds and asserts that it
// has not returned; if it has, the scenario ends (its result is consumed).
func checkStillWaiting(t *testing.T, ch <-chan waitResult, why string) bool {
	t.Helper()
	time.Sleep(5 * time.Millisecond)
	select {
	case r := <-ch:
		t.Fatalf("WaitKey returned %s, %v (code %q) while %s; want it to keep waiting", fmtKey(r.rec), r.err, contract.CodeOf(r.err), why)
		return false
	default:
		return true
	}
}
