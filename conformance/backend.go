package conformance

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/contract"
)

// The Backend scenarios check duties that the Store would hide: they call
// the backend directly, as gocloud's drivertest does. The Store wakes its
// own WaitKey callers on Close, wraps stray errors, and copies a tolerance
// it read once; a backend must still get each of these right, because
// decorators, tools and other Stores call it.
func backendScenarios() []scenario {
	return []scenario{
		{"CloseWakesWaitKeyWithClosed", 0, testCloseWakesWaitKeyWithClosed},
		{"ErrorsAreContractErrors", 0, testErrorsAreContractErrors},
		{"ErrorsDoNotEchoInput", 0, testErrorsDoNotEchoInput},
		{"EveryClientReportsTheSameTolerance", 0, testEveryClientReportsTheSameTolerance},
	}
}

// rawCtx is a context for a direct backend call: the Store gives every
// call a deadline, so the suite does too.
func (e *env) rawCtx() context.Context {
	ctx, cancel := context.WithTimeout(e.ctx, durable.DefaultOperationTimeout)
	e.t.Cleanup(cancel)
	return ctx
}

func testCloseWakesWaitKeyWithClosed(t *testing.T, e *env) {
	owner := e.open()
	b, closeB := e.rawOpen()
	kw, ok := b.(contract.KeyWaiter)
	if !ok {
		e.skipf("the backend does not implement contract.KeyWaiter (optional): the Store's polling fallback ends with Store.Close")
	}
	other, _ := e.rawOpen()
	kwOther := other.(contract.KeyWaiter)
	mustClaim(t, e.ctx, owner, e.claimReq("key-1"), contract.ClaimNew)
	c2 := mustClaim(t, e.ctx, owner, e.claimReq("key-2"), contract.ClaimNew)

	wait := func(kw contract.KeyWaiter, key string) <-chan waitResult {
		ch := make(chan waitResult, 1)
		go func() {
			ctx, cancel := context.WithTimeout(e.ctx, waitGuard)
			defer cancel()
			rec, err := kw.WaitKey(ctx, keyRef(key))
			ch <- waitResult{rec, err}
		}()
		return ch
	}
	closing := wait(kw, "key-1")
	survivor := wait(kwOther, "key-2")
	time.Sleep(5 * time.Millisecond)
	select {
	case r := <-closing:
		if contract.CodeOf(r.err) == contract.Unimplemented {
			e.skipf("the backend declines contract.KeyWaiter at run time (Unimplemented): the Store's polling fallback ends with Store.Close")
		}
		t.Fatalf("WaitKey on a claimed key returned %s, %v before anything happened", fmtKey(r.rec), r.err)
	default:
	}
	start := time.Now()
	if err := closeB(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case r := <-closing:
		if d := time.Since(start); d > time.Second {
			t.Errorf("WaitKey returned %v after Close, want at once", d)
		}
		var ce *contract.Error
		if !errors.As(r.err, &ce) || ce.Code != contract.Closed {
			t.Errorf("WaitKey woken by Close returned %v (code %q), want a *contract.Error with code %q", r.err, contract.CodeOf(r.err), contract.Closed)
		}
	case <-time.After(waitGuard + 5*time.Second):
		t.Fatalf("WaitKey did not return after Close (nor when its context ended)")
	}
	// Another client's waiter is not disturbed, and still wakes.
	checkStillWaiting(t, survivor, "only another client was closed")
	done := mustComplete(t, e.ctx, owner, contract.Completion{KeyRef: keyRef("key-2"), Token: c2.Token, Outcome: testOutcome("survivor")})
	r := awaitWait(t, survivor)
	if r.err != nil {
		t.Fatalf("WaitKey on another client after one closed: %v, want the completed record", r.err)
	}
	checkKey(t, "record returned to the other client's waiter", r.rec, done)
}

// failure is one call, made on the backend directly, that must fail.
type failure struct {
	name string
	code contract.Code
	call func(ctx context.Context) error
}

// failures provokes every error a backend returns for a correct request,
// on records it stores first. All the names and payloads contain marker, so
// that ErrorsDoNotEchoInput can look for them.
func failures(t *testing.T, e *env, b contract.Backend, marker string) ([]failure, []string) {
	t.Helper()
	ctx := e.rawCtx()
	sc := contract.Scope("scope-" + marker)
	id, key, res, owner := "wf-"+marker, "key-"+marker, "res-"+marker, "owner-"+marker
	fp, wfID, reqID := "fp-"+marker, "wfid-"+marker, "req-"+marker
	snap := []byte("snapshot-" + marker)
	out := contract.Outcome{Code: 200, Header: map[string][]string{"X-" + marker: {"value-" + marker}}, Body: []byte("body-" + marker), Ref: "ref-" + marker}
	ttl := e.ttl

	w, err := b.CreateWorkflow(ctx, contract.Workflow{Scope: sc, ID: id, RequestID: reqID, Status: contract.StatusRunning, Snapshot: snap})
	noErr(t, err, "CreateWorkflow")
	fin, err := b.CreateWorkflow(ctx, contract.Workflow{Scope: sc, ID: id + "-done", RequestID: reqID, Status: contract.StatusRunning, Snapshot: snap})
	noErr(t, err, "CreateWorkflow")
	_, err = b.UpdateWorkflow(ctx, contract.Update{Scope: sc, ID: fin.ID, ExpectStatus: contract.StatusRunning, ExpectRevision: 1, Status: contract.StatusSucceeded, RequestID: reqID, Snapshot: snap})
	noErr(t, err, "UpdateWorkflow")
	c, err := b.ClaimKey(ctx, contract.ClaimRequest{KeyRef: contract.KeyRef{Scope: sc, Key: key}, Fingerprint: fp, WorkflowID: wfID, TTL: ttl})
	noErr(t, err, "ClaimKey")
	l, err := b.AcquireLease(ctx, contract.LeaseRequest{Scope: sc, Resource: res, Owner: owner, TTL: ttl})
	noErr(t, err, "AcquireLease")
	ref := contract.KeyRef{Scope: sc, Key: key}
	stale := l
	stale.Token += 1000
	badFence := &contract.Fence{Resource: res, Owner: owner + "-other", Token: l.Token}
	inputs := []string{marker, string(sc), id, key, res, owner, fp, wfID, reqID, c.Token}

	fs := []failure{
		{"GetWorkflow of a missing id", contract.NotFound, func(ctx context.Context) error {
			_, err := b.GetWorkflow(ctx, sc, id+"-missing")
			return err
		}},
		{"CreateWorkflow of an existing id", contract.AlreadyExists, func(ctx context.Context) error {
			_, err := b.CreateWorkflow(ctx, contract.Workflow{Scope: sc, ID: id, RequestID: reqID, Status: contract.StatusPending, Snapshot: snap})
			return err
		}},
		{"UpdateWorkflow of a missing id", contract.NotFound, func(ctx context.Context) error {
			_, err := b.UpdateWorkflow(ctx, contract.Update{Scope: sc, ID: id + "-missing", ExpectStatus: contract.StatusRunning, Status: contract.StatusRunning, RequestID: reqID, Snapshot: snap})
			return err
		}},
		{"UpdateWorkflow with a stale revision", contract.Conflict, func(ctx context.Context) error {
			_, err := b.UpdateWorkflow(ctx, contract.Update{Scope: sc, ID: id, ExpectStatus: contract.StatusRunning, ExpectRevision: w.Revision + 5, Status: contract.StatusRunning, RequestID: reqID, Snapshot: snap})
			return err
		}},
		{"UpdateWorkflow of a terminal workflow", contract.Terminal, func(ctx context.Context) error {
			_, err := b.UpdateWorkflow(ctx, contract.Update{Scope: sc, ID: fin.ID, ExpectStatus: contract.StatusSucceeded, Status: contract.StatusRunning, RequestID: reqID, Snapshot: snap})
			return err
		}},
		{"UpdateWorkflow with an invalid fence", contract.Fenced, func(ctx context.Context) error {
			_, err := b.UpdateWorkflow(ctx, contract.Update{Scope: sc, ID: id, ExpectStatus: contract.StatusRunning, Status: contract.StatusRunning, RequestID: reqID, Snapshot: snap, Fence: badFence})
			return err
		}},
		{"ClaimKey with another fingerprint", contract.KeyConflict, func(ctx context.Context) error {
			_, err := b.ClaimKey(ctx, contract.ClaimRequest{KeyRef: ref, Fingerprint: fp + "-other", WorkflowID: wfID, TTL: ttl})
			return err
		}},
		{"ClaimKey with another workflow id", contract.KeyConflict, func(ctx context.Context) error {
			_, err := b.ClaimKey(ctx, contract.ClaimRequest{KeyRef: ref, Fingerprint: fp, WorkflowID: wfID + "-other", TTL: ttl})
			return err
		}},
		{"CompleteKey with a wrong token", contract.Fenced, func(ctx context.Context) error {
			_, err := b.CompleteKey(ctx, contract.Completion{KeyRef: ref, Token: c.Token + "x", Outcome: out, Retain: time.Hour})
			return err
		}},
		{"CompleteKey with an invalid fence", contract.Fenced, func(ctx context.Context) error {
			_, err := b.CompleteKey(ctx, contract.Completion{KeyRef: ref, Token: c.Token, Outcome: out, Retain: time.Hour, Fence: badFence})
			return err
		}},
		{"RenewKey with a wrong token", contract.Fenced, func(ctx context.Context) error {
			_, err := b.RenewKey(ctx, ref, c.Token+"x", ttl)
			return err
		}},
		{"GetKey of a missing key", contract.NotFound, func(ctx context.Context) error {
			_, err := b.GetKey(ctx, contract.KeyRef{Scope: sc, Key: key + "-missing"})
			return err
		}},
		{"AcquireLease of a held lease", contract.LeaseBusy, func(ctx context.Context) error {
			_, err := b.AcquireLease(ctx, contract.LeaseRequest{Scope: sc, Resource: res, Owner: owner + "-other", TTL: ttl})
			return err
		}},
		{"RenewLease with a wrong token", contract.Fenced, func(ctx context.Context) error {
			_, err := b.RenewLease(ctx, stale, ttl)
			return err
		}},
		{"GetLease of a missing resource", contract.NotFound, func(ctx context.Context) error {
			_, err := b.GetLease(ctx, sc, res+"-missing")
			return err
		}},
	}
	if kw, ok := b.(contract.KeyWaiter); ok {
		fs = append(fs, failure{"WaitKey of a missing key", contract.NotFound, func(ctx context.Context) error {
			_, err := kw.WaitKey(ctx, contract.KeyRef{Scope: sc, Key: key + "-missing"})
			if contract.CodeOf(err) == contract.Unimplemented {
				return &contract.Error{Code: contract.NotFound} // declined: nothing to check
			}
			return err
		}})
	}
	return fs, inputs
}

func testErrorsAreContractErrors(t *testing.T, e *env) {
	b, _ := e.rawOpen()
	fs, _ := failures(t, e, b, "codes")
	for _, f := range fs {
		err := f.call(e.rawCtx())
		var ce *contract.Error
		switch {
		case err == nil:
			t.Errorf("%s: no error, want code %q", f.name, f.code)
		case !errors.As(err, &ce):
			t.Errorf("%s: error %v of type %T, want a *contract.Error with code %q (map errors once, at the backend's edge)", f.name, err, err, f.code)
		case ce.Code != f.code:
			t.Errorf("%s: code %q (%v), want %q", f.name, ce.Code, err, f.code)
		case f.code == contract.Conflict && ce.Details == nil:
			t.Errorf("%s: a Conflict without Details, want expected and actual status and revision", f.name)
		}
	}
	for _, f := range []struct {
		name string
		call func(ctx context.Context) (bool, error)
	}{
		{"ReleaseKey with a wrong token", func(ctx context.Context) (bool, error) {
			return b.ReleaseKey(ctx, contract.KeyRef{Scope: "scope-codes", Key: "key-codes"}, "wrong-token")
		}},
		{"ReleaseLease with a wrong token", func(ctx context.Context) (bool, error) {
			l, err := b.GetLease(ctx, "scope-codes", "res-codes")
			noErr(t, err, "GetLease")
			l.Token += 1000
			return b.ReleaseLease(ctx, l)
		}},
	} {
		if ok, err := f.call(e.rawCtx()); ok || err != nil {
			t.Errorf("%s = %v, %v; want false, nil", f.name, ok, err)
		}
	}

	// A waiting WaitKey ends with its context, and says so.
	kw, ok := b.(contract.KeyWaiter)
	if !ok {
		return
	}
	for _, end := range []struct {
		name   string
		target error
		ctx    func() (context.Context, context.CancelFunc)
	}{
		{"cancelled", context.Canceled, func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(e.ctx)
			time.AfterFunc(10*time.Millisecond, cancel)
			return ctx, cancel
		}},
		{"past its deadline", context.DeadlineExceeded, func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(e.ctx, 10*time.Millisecond)
		}},
	} {
		ctx, cancel := end.ctx()
		_, err := kw.WaitKey(ctx, contract.KeyRef{Scope: "scope-codes", Key: "key-codes"})
		cancel()
		if contract.CodeOf(err) == contract.Unimplemented {
			return // declined at run time
		}
		if !errors.Is(err, end.target) {
			t.Errorf("WaitKey with a context %s returned %v (code %q), want an error for which errors.Is(err, %v) holds", end.name, err, contract.CodeOf(err), end.target)
		}
		if c := contract.CodeOf(err); c != contract.Canceled {
			t.Errorf("WaitKey with a context %s returned code %q, want %q", end.name, c, contract.Canceled)
		}
	}
}

func testErrorsDoNotEchoInput(t *testing.T, e *env) {
	b, _ := e.rawOpen()
	s := e.open()
	const marker = "Echo7Qz"
	fs, inputs := failures(t, e, b, marker)
	check := func(via, name string, err error) {
		t.Helper()
		if err == nil {
			t.Errorf("%s, %s: no error", via, name)
			return
		}
		msg := err.Error()
		for _, in := range inputs {
			if strings.Contains(msg, in) {
				t.Errorf("%s, %s: Error() contains the caller's input %q: %s (put identifiers and payloads in nothing Error() prints)", via, name, in, msg)
				return
			}
		}
	}
	for _, f := range fs {
		check("called directly", f.name, f.call(e.rawCtx()))
	}
	// The same through the Store, which prints what the backend said.
	sc := contract.Scope("scope-" + marker)
	ref := contract.KeyRef{Scope: sc, Key: "key-" + marker}
	_, err := s.GetWorkflow(e.ctx, sc, "wf-"+marker+"-missing")
	check("through the Store", "GetWorkflow", err)
	_, err = s.CreateWorkflow(e.ctx, contract.Workflow{Scope: sc, ID: "wf-" + marker, RequestID: "req-" + marker})
	check("through the Store", "CreateWorkflow", err)
	_, err = s.ClaimKey(e.ctx, contract.ClaimRequest{KeyRef: ref, Fingerprint: "fp-" + marker + "-other", TTL: e.ttl})
	check("through the Store", "ClaimKey", err)
	_, err = s.RenewKey(e.ctx, ref, "token-"+marker, e.ttl)
	check("through the Store", "RenewKey", err)
	_, err = s.AcquireLease(e.ctx, contract.LeaseRequest{Scope: sc, Resource: "res-" + marker, Owner: "owner-" + marker + "-other", TTL: e.ttl})
	check("through the Store", "AcquireLease", err)
	_, err = s.GetLease(e.ctx, sc, "res-"+marker+"-missing")
	check("through the Store", "GetLease", err)
}

func testEveryClientReportsTheSameTolerance(t *testing.T, e *env) {
	first, _ := e.rawOpen()
	r, ok := first.(contract.ToleranceReporter)
	if !ok {
		e.skipf("the backend does not implement contract.ToleranceReporter (optional): the Store, its lease runner and the suite assume no clock tolerance")
	}
	if got := r.ClockTolerance(); got != e.tol {
		t.Errorf("ClockTolerance() = %v, another client reported %v", got, e.tol)
	}
	for i := range 3 {
		b, _ := e.rawOpen()
		r, ok := b.(contract.ToleranceReporter)
		if !ok {
			t.Errorf("client %d does not implement contract.ToleranceReporter, the first does", i+2)
			continue
		}
		if got := r.ClockTolerance(); got != e.tol {
			t.Errorf("client %d: ClockTolerance() = %v, another client reported %v: every client of one storage judges expiry with the same tolerance", i+2, got, e.tol)
		}
	}
	if got := e.open().ClockTolerance(); got != e.tol {
		t.Errorf("Store.ClockTolerance() = %v, the backend reports %v", got, e.tol)
	}
}
