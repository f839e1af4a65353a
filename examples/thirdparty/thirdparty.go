// Package thirdparty is an example of a backend written outside durable: a
// decorator that counts the operations of any other backend. It shows the
// three things a third-party backend needs: implement the interfaces of
// package contract, forward or decline the optional capabilities, and run
// durable's conformance suite from its own test (see thirdparty_test.go,
// whose harness wires a contract.ManualClock into the storage so that
// no scenario is skipped) with one line:
//
//	func TestConformance(t *testing.T) { conformance.Run(t, newHarness) }
//
// A real backend would talk to its own storage; this one forwards to the
// memory backend, so the example runs with no setup:
//
//	go test ./examples/thirdparty/
package thirdparty

import (
	"context"
	"sync"
	"time"

	"github.com/durable-go/durable/contract"
)

// Counting wraps a backend and counts calls per operation.
type Counting struct {
	next contract.Backend

	mu     sync.Mutex
	counts map[string]int
}

var _ contract.Backend = (*Counting)(nil)

// New wraps next.
func New(next contract.Backend) *Counting {
	return &Counting{next: next, counts: map[string]int{}}
}

// Counts returns a copy of the call counts by operation name.
func (c *Counting) Counts() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.counts))
	for k, v := range c.counts {
		out[k] = v
	}
	return out
}

func (c *Counting) count(op string) {
	c.mu.Lock()
	c.counts[op]++
	c.mu.Unlock()
}

// A decorator forwards the optional capabilities of package contract
// (found by type assertion on the wrapped backend) and, when the wrapped
// backend lacks one, declines it at run time with an error of Code
// Unimplemented: a decorator must not claim a capability it cannot honour.
// The Store then does what it does for a backend without the capability
// (WaitKey polls GetKey; CountCleanup, DeleteRecord, ListKeys and
// ListLeases report Unimplemented to their caller; RenewLeases, in
// renew.go, falls back to one RenewLease per lease; BeginTx, CompleteKeyTx
// and DoTx report Unimplemented).
var (
	_ contract.KeyWaiter         = (*Counting)(nil)
	_ contract.ToleranceReporter = (*Counting)(nil)
	_ contract.CleanupCounter    = (*Counting)(nil)
	_ contract.RecordDeleter     = (*Counting)(nil)
	_ contract.RecordLister      = (*Counting)(nil)
	_ contract.TxCompleter       = (*Counting)(nil)
)

// BeginTx forwards the optional TxCompleter capability.
func (c *Counting) BeginTx(ctx context.Context) (contract.Tx, error) {
	c.count("BeginTx")
	if tc, ok := c.next.(contract.TxCompleter); ok {
		return tc.BeginTx(ctx)
	}
	return nil, declined("TxCompleter")
}

// CompleteKeyTx forwards the optional TxCompleter capability.
func (c *Counting) CompleteKeyTx(ctx context.Context, tx any, comp contract.Completion) (contract.KeyRecord, error) {
	c.count("CompleteKeyTx")
	if tc, ok := c.next.(contract.TxCompleter); ok {
		return tc.CompleteKeyTx(ctx, tx, comp)
	}
	return contract.KeyRecord{}, declined("TxCompleter")
}

func declined(what string) error {
	return &contract.Error{Code: contract.Unimplemented, Msg: "the wrapped backend does not implement " + what}
}

// WaitKey forwards the optional KeyWaiter capability.
func (c *Counting) WaitKey(ctx context.Context, k contract.KeyRef) (contract.KeyRecord, error) {
	c.count("WaitKey")
	if w, ok := c.next.(contract.KeyWaiter); ok {
		return w.WaitKey(ctx, k)
	}
	return contract.KeyRecord{}, declined("KeyWaiter")
}

// ClockTolerance forwards the optional ToleranceReporter capability. A
// backend that judges expiry with a tolerance must report it: the Store's
// minimum TTL, its lease runner and the conformance suite all read it here.
func (c *Counting) ClockTolerance() time.Duration {
	if r, ok := c.next.(contract.ToleranceReporter); ok {
		return r.ClockTolerance()
	}
	return 0
}

// CountCleanup forwards the optional CleanupCounter capability.
func (c *Counting) CountCleanup(ctx context.Context, r contract.CleanupRequest) (contract.CleanupResult, error) {
	c.count("CountCleanup")
	if cc, ok := c.next.(contract.CleanupCounter); ok {
		return cc.CountCleanup(ctx, r)
	}
	return contract.CleanupResult{}, declined("CleanupCounter")
}

// DeleteRecord forwards the optional RecordDeleter capability.
func (c *Counting) DeleteRecord(ctx context.Context, kind contract.RecordKind, scope contract.Scope, id string) (bool, error) {
	c.count("DeleteRecord")
	if d, ok := c.next.(contract.RecordDeleter); ok {
		return d.DeleteRecord(ctx, kind, scope, id)
	}
	return false, declined("RecordDeleter")
}

// ListKeys forwards the optional RecordLister capability.
func (c *Counting) ListKeys(ctx context.Context, q contract.KeyListQuery) ([]contract.KeyRecord, error) {
	c.count("ListKeys")
	if l, ok := c.next.(contract.RecordLister); ok {
		return l.ListKeys(ctx, q)
	}
	return nil, declined("RecordLister")
}

// ListLeases forwards the optional RecordLister capability.
func (c *Counting) ListLeases(ctx context.Context, q contract.LeaseListQuery) ([]contract.Lease, error) {
	c.count("ListLeases")
	if l, ok := c.next.(contract.RecordLister); ok {
		return l.ListLeases(ctx, q)
	}
	return nil, declined("RecordLister")
}

func (c *Counting) CreateWorkflow(ctx context.Context, w contract.Workflow) (contract.Workflow, error) {
	c.count("CreateWorkflow")
	return c.next.CreateWorkflow(ctx, w)
}

func (c *Counting) GetWorkflow(ctx context.Context, scope contract.Scope, id string) (contract.Workflow, error) {
	c.count("GetWorkflow")
	return c.next.GetWorkflow(ctx, scope, id)
}

func (c *Counting) UpdateWorkflow(ctx context.Context, u contract.Update) (contract.Workflow, error) {
	c.count("UpdateWorkflow")
	return c.next.UpdateWorkflow(ctx, u)
}

func (c *Counting) ListWorkflows(ctx context.Context, q contract.ListQuery) ([]contract.Workflow, error) {
	c.count("ListWorkflows")
	return c.next.ListWorkflows(ctx, q)
}

func (c *Counting) ClaimKey(ctx context.Context, r contract.ClaimRequest) (contract.Claim, error) {
	c.count("ClaimKey")
	return c.next.ClaimKey(ctx, r)
}

func (c *Counting) CompleteKey(ctx context.Context, comp contract.Completion) (contract.KeyRecord, error) {
	c.count("CompleteKey")
	return c.next.CompleteKey(ctx, comp)
}

func (c *Counting) RenewKey(ctx context.Context, k contract.KeyRef, token string, ttl time.Duration) (contract.KeyRecord, error) {
	c.count("RenewKey")
	return c.next.RenewKey(ctx, k, token, ttl)
}

func (c *Counting) ReleaseKey(ctx context.Context, k contract.KeyRef, token string) (bool, error) {
	c.count("ReleaseKey")
	return c.next.ReleaseKey(ctx, k, token)
}

func (c *Counting) GetKey(ctx context.Context, k contract.KeyRef) (contract.KeyRecord, error) {
	c.count("GetKey")
	return c.next.GetKey(ctx, k)
}

func (c *Counting) AcquireLease(ctx context.Context, r contract.LeaseRequest) (contract.Lease, error) {
	c.count("AcquireLease")
	return c.next.AcquireLease(ctx, r)
}

func (c *Counting) RenewLease(ctx context.Context, l contract.Lease, ttl time.Duration) (contract.Lease, error) {
	c.count("RenewLease")
	return c.next.RenewLease(ctx, l, ttl)
}

func (c *Counting) ReleaseLease(ctx context.Context, l contract.Lease) (bool, error) {
	c.count("ReleaseLease")
	return c.next.ReleaseLease(ctx, l)
}

func (c *Counting) GetLease(ctx context.Context, scope contract.Scope, resource string) (contract.Lease, error) {
	c.count("GetLease")
	return c.next.GetLease(ctx, scope, resource)
}

func (c *Counting) Cleanup(ctx context.Context, r contract.CleanupRequest) (contract.CleanupResult, error) {
	c.count("Cleanup")
	return c.next.Cleanup(ctx, r)
}

func (c *Counting) Close() error { return c.next.Close() }
