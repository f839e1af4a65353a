package broken

import (
	"context"
	"errors"
	"time"

	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/exactmem"
)

// Scopes, errors, Close, the tolerance and optional capabilities.
func init() {
	register("scope-leak", variant{
		doc:  "GetWorkflow ignores the scope and reads the unscoped namespace",
		wrap: func(b *exactmem.Backend, _ *state) contract.Backend { return scopeLeak{b} },
	})
	register("scoped-reads-fall-back-to-unscoped", variant{
		doc:  "a read in a scope that finds nothing falls back to the unscoped namespace (GetWorkflow, GetKey, WaitKey, GetLease)",
		wrap: func(b *exactmem.Backend, _ *state) contract.Backend { return scopedFallsBack{b} },
	})
	register("unscoped-lease-read-sees-scopes", variant{
		doc:  "GetLease in the unscoped namespace that finds nothing looks in every scope written so far",
		wrap: func(b *exactmem.Backend, st *state) contract.Backend { return unscopedSeesScopes{b, st} },
	})
	register("errors-echo-input", variant{
		doc:  "error messages name the workflow, key, resource or owner they are about",
		wrap: func(b *exactmem.Backend, _ *state) contract.Backend { return echoes{b} },
	})
	register("plain-errors", variant{
		doc:  "NotFound is a plain Go error (errors.New), not a *contract.Error",
		wrap: func(b *exactmem.Backend, _ *state) contract.Backend { return plainErrors{b} },
	})
	register("close-does-not-wake-waiters", variant{
		doc: "Close does not wake this client's WaitKey callers: they wait until their context ends (the Store hides this from its own callers)",
		wrap: func(b *exactmem.Backend, st *state) contract.Backend {
			return closeDoesNotWake{b, st.storage.Backend()}
		},
	})
	register("close-wakes-with-canceled", variant{
		doc:  "Close wakes WaitKey callers with Canceled instead of Closed (the Store hides this from its own callers)",
		wrap: func(b *exactmem.Backend, _ *state) contract.Backend { return closeWakesCanceled{b} },
	})
	register("tolerance-not-reported", variant{
		doc:  "the backend judges expiry with a 2 s tolerance but does not implement contract.ToleranceReporter",
		wrap: func(b *exactmem.Backend, _ *state) contract.Backend { return partial{b, b} },
	})
	register("tolerance-differs-per-client", variant{
		doc: "only the first client reports the clock tolerance; the others report none",
		wrap: func(b *exactmem.Backend, st *state) contract.Backend {
			st.mu.Lock()
			defer st.mu.Unlock()
			return toleranceOfFirst{b, st.opened == 1}
		},
	})
	register("declines-capabilities", variant{
		doc:     "has WaitKey, CountCleanup, DeleteRecord, ListKeys, ListLeases, RenewLeases, AcquirePermit, WatchLease, BeginTx and CompleteKeyTx but declines them at run time with Unimplemented (the Store must poll for WaitKey)",
		control: true,
		wrap:    func(b *exactmem.Backend, _ *state) contract.Backend { return declines{partial{b, b}, b} },
	})
	register("no-optional-capabilities", variant{
		doc:     "implements contract.Backend and ToleranceReporter only",
		control: true,
		wrap:    func(b *exactmem.Backend, _ *state) contract.Backend { return minimal{b, b} },
	})
}

type scopeLeak struct{ *exactmem.Backend }

func (b scopeLeak) GetWorkflow(ctx context.Context, _ contract.Scope, id string) (contract.Workflow, error) {
	return b.Backend.GetWorkflow(ctx, "", id)
}

// scopedFallsBack reads the unscoped record when a scope has none.
type scopedFallsBack struct{ *exactmem.Backend }

func (b scopedFallsBack) GetWorkflow(ctx context.Context, scope contract.Scope, id string) (contract.Workflow, error) {
	w, err := b.Backend.GetWorkflow(ctx, scope, id)
	if scope != "" && contract.CodeOf(err) == contract.NotFound {
		return b.Backend.GetWorkflow(ctx, "", id)
	}
	return w, err
}

func (b scopedFallsBack) GetKey(ctx context.Context, k contract.KeyRef) (contract.KeyRecord, error) {
	r, err := b.Backend.GetKey(ctx, k)
	if k.Scope != "" && contract.CodeOf(err) == contract.NotFound {
		return b.Backend.GetKey(ctx, contract.KeyRef{Key: k.Key})
	}
	return r, err
}

func (b scopedFallsBack) WaitKey(ctx context.Context, k contract.KeyRef) (contract.KeyRecord, error) {
	if _, err := b.Backend.GetKey(ctx, k); k.Scope != "" && contract.CodeOf(err) == contract.NotFound {
		k.Scope = ""
	}
	return b.Backend.WaitKey(ctx, k)
}

func (b scopedFallsBack) GetLease(ctx context.Context, scope contract.Scope, resource string) (contract.Lease, error) {
	l, err := b.Backend.GetLease(ctx, scope, resource)
	if scope != "" && contract.CodeOf(err) == contract.NotFound {
		return b.Backend.GetLease(ctx, "", resource)
	}
	return l, err
}

// unscopedSeesScopes searches the scopes it has seen for an unscoped
// lease read.
type unscopedSeesScopes struct {
	*exactmem.Backend
	st *state
}

func (b unscopedSeesScopes) AcquireLease(ctx context.Context, req contract.LeaseRequest) (contract.Lease, error) {
	b.st.mu.Lock()
	b.st.scopes[req.Scope] = true
	b.st.mu.Unlock()
	return b.Backend.AcquireLease(ctx, req)
}

func (b unscopedSeesScopes) GetLease(ctx context.Context, scope contract.Scope, resource string) (contract.Lease, error) {
	l, err := b.Backend.GetLease(ctx, scope, resource)
	if scope == "" && contract.CodeOf(err) == contract.NotFound {
		b.st.mu.Lock()
		var scopes []contract.Scope
		for s := range b.st.scopes {
			scopes = append(scopes, s)
		}
		b.st.mu.Unlock()
		for _, s := range scopes {
			if l2, err2 := b.Backend.GetLease(ctx, s, resource); err2 == nil {
				return l2, nil
			}
		}
	}
	return l, err
}

// echoes puts the caller's names in its error messages.
type echoes struct{ *exactmem.Backend }

func echo(err error, name string) error {
	var ce *contract.Error
	if errors.As(err, &ce) {
		cp := *ce
		cp.Msg += ": " + name
		return &cp
	}
	return err
}

func (b echoes) GetWorkflow(ctx context.Context, scope contract.Scope, id string) (contract.Workflow, error) {
	w, err := b.Backend.GetWorkflow(ctx, scope, id)
	return w, echo(err, string(scope)+"/"+id)
}

func (b echoes) CreateWorkflow(ctx context.Context, w contract.Workflow) (contract.Workflow, error) {
	out, err := b.Backend.CreateWorkflow(ctx, w)
	return out, echo(err, w.ID)
}

func (b echoes) ClaimKey(ctx context.Context, req contract.ClaimRequest) (contract.Claim, error) {
	c, err := b.Backend.ClaimKey(ctx, req)
	return c, echo(err, req.Key+" is bound to another fingerprint than "+req.Fingerprint)
}

func (b echoes) AcquireLease(ctx context.Context, req contract.LeaseRequest) (contract.Lease, error) {
	l, err := b.Backend.AcquireLease(ctx, req)
	return l, echo(err, req.Resource)
}

// plainErrors returns NotFound as a plain error.
type plainErrors struct{ *exactmem.Backend }

var errPlainNotFound = errors.New("not found")

func (b plainErrors) GetLease(ctx context.Context, scope contract.Scope, resource string) (contract.Lease, error) {
	l, err := b.Backend.GetLease(ctx, scope, resource)
	if contract.CodeOf(err) == contract.NotFound {
		return l, errPlainNotFound
	}
	return l, err
}

func (b plainErrors) GetWorkflow(ctx context.Context, scope contract.Scope, id string) (contract.Workflow, error) {
	w, err := b.Backend.GetWorkflow(ctx, scope, id)
	if contract.CodeOf(err) == contract.NotFound {
		return w, errPlainNotFound
	}
	return w, err
}

// closeDoesNotWake waits on a client that is never closed.
type closeDoesNotWake struct {
	*exactmem.Backend
	waiter *exactmem.Backend
}

func (b closeDoesNotWake) WaitKey(ctx context.Context, k contract.KeyRef) (contract.KeyRecord, error) {
	return b.waiter.WaitKey(ctx, k)
}

// closeWakesCanceled reports Close to waiters as Canceled.
type closeWakesCanceled struct{ *exactmem.Backend }

func (b closeWakesCanceled) WaitKey(ctx context.Context, k contract.KeyRef) (contract.KeyRecord, error) {
	rec, err := b.Backend.WaitKey(ctx, k)
	if contract.CodeOf(err) == contract.Closed {
		return rec, &contract.Error{Code: contract.Canceled, Err: context.Canceled}
	}
	return rec, err
}

// toleranceOfFirst reports the tolerance on the first client only.
type toleranceOfFirst struct {
	*exactmem.Backend
	first bool
}

func (b toleranceOfFirst) ClockTolerance() time.Duration {
	if b.first {
		return b.Backend.ClockTolerance()
	}
	return 0
}

// declines has the optional capabilities and declines them at run time.
type declines struct {
	partial
	m *exactmem.Backend
}

func (d declines) BeginTx(context.Context) (contract.Tx, error) {
	return nil, &contract.Error{Code: contract.Unimplemented, Msg: "transactions are not supported here"}
}

func (d declines) CompleteKeyTx(context.Context, any, contract.Completion) (contract.KeyRecord, error) {
	return contract.KeyRecord{}, &contract.Error{Code: contract.Unimplemented, Msg: "transactions are not supported here"}
}

func (d declines) WaitKey(context.Context, contract.KeyRef) (contract.KeyRecord, error) {
	return contract.KeyRecord{}, &contract.Error{Code: contract.Unimplemented, Msg: "waiting is not supported here"}
}

func (d declines) CountCleanup(context.Context, contract.CleanupRequest) (contract.CleanupResult, error) {
	return contract.CleanupResult{}, &contract.Error{Code: contract.Unimplemented, Msg: "counting is not supported here"}
}

func (d declines) DeleteRecord(context.Context, contract.RecordKind, contract.Scope, string) (bool, error) {
	return false, &contract.Error{Code: contract.Unimplemented, Msg: "deleting is not supported here"}
}

func (d declines) ListKeys(context.Context, contract.KeyListQuery) ([]contract.KeyRecord, error) {
	return nil, &contract.Error{Code: contract.Unimplemented, Msg: "listing is not supported here"}
}

func (d declines) ListLeases(context.Context, contract.LeaseListQuery) ([]contract.Lease, error) {
	return nil, &contract.Error{Code: contract.Unimplemented, Msg: "listing is not supported here"}
}

func (d declines) ClockTolerance() time.Duration { return d.m.ClockTolerance() }

// minimal is a backend with no optional capability but the tolerance.
type minimal struct {
	contract.Backend
	m *exactmem.Backend
}

func (b minimal) ClockTolerance() time.Duration { return b.m.ClockTolerance() }
