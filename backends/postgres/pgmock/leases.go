package pgmock

import (
	"context"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/backends/postgres/internal/mockspec"
	"github.com/durable-go/durable/contract"
)

// AcquireLease is the expectation of Store.AcquireLease (and of the
// acquisition that Store.RunWithLease starts with).
type AcquireLease struct {
	expectation
	req durable.LeaseRequest
}

// ExpectAcquireLease expects Store.AcquireLease(ctx, req). A zero req.TTL
// is the Store's default lease TTL.
func (m *Mock) ExpectAcquireLease(req durable.LeaseRequest) *AcquireLease {
	req = capture[durable.LeaseRequest](m, "AcquireLease", func(ctx context.Context, s *durable.Store) error {
		_, err := s.AcquireLease(ctx, req)
		return err
	})
	e := &AcquireLease{req: req}
	e.expectation = m.begin("AcquireLease", func() mockspec.Statement { return m.gen.AcquireLease(req, nil)[0] })
	m.track(&e.expectation)
	return e
}

// Granted: the lease is granted with the fencing token token, from the
// server's time for the request's TTL. It returns the Lease the Store
// returns.
func (e *AcquireLease) Granted(token int64) durable.Lease {
	now := e.m.now()
	l := durable.Lease{
		Scope: e.req.Scope, Resource: e.req.Resource, Owner: e.req.Owner, Token: token,
		AcquiredAt: now, ExpiresAt: now.Add(e.req.TTL), Value: e.req.Value,
	}
	e.finish(e.m.gen.AcquireLease(e.req, &l))
	return l
}

// Busy: another grant is live (ErrLeaseBusy).
func (e *AcquireLease) Busy() { e.finish(e.m.gen.AcquireLease(e.req, nil)) }

// AcquirePermit is the expectation of Store.AcquirePermit.
type AcquirePermit struct {
	expectation
	req durable.PermitRequest
}

// ExpectAcquirePermit expects Store.AcquirePermit(ctx, req): one
// statement. A zero req.TTL is the Store's default lease TTL.
func (m *Mock) ExpectAcquirePermit(req durable.PermitRequest) *AcquirePermit {
	req = capture[durable.PermitRequest](m, "AcquirePermit", func(ctx context.Context, s *durable.Store) error {
		_, err := s.AcquirePermit(ctx, req)
		return err
	})
	e := &AcquirePermit{req: req}
	e.expectation = m.begin("AcquirePermit", func() mockspec.Statement { return m.gen.AcquirePermit(req, nil)[0] })
	m.track(&e.expectation)
	return e
}

// Granted: permit n (1 to the request's Permits) is granted with the
// fencing token token, from the server's time for the request's TTL. It
// returns the Lease the Store returns, on the permit's resource
// (contract.PermitResource).
func (e *AcquirePermit) Granted(n int, token int64) durable.Lease {
	now := e.m.now()
	l := durable.Lease{
		Scope: e.req.Scope, Resource: contract.PermitResource(e.req.Resource, n), Owner: e.req.Owner, Token: token,
		AcquiredAt: now, ExpiresAt: now.Add(e.req.TTL), Value: e.req.Value,
	}
	e.finish(e.m.gen.AcquirePermit(e.req, &l))
	return l
}

// Busy: every permit is held (ErrLeaseBusy).
func (e *AcquirePermit) Busy() { e.finish(e.m.gen.AcquirePermit(e.req, nil)) }

// RenewLease is the expectation of Store.RenewLease. (Store.RunWithLease
// renews in batches: see ExpectRenewLeases.)
type RenewLease struct {
	expectation
	r renewLeaseReq
}

// ExpectRenewLease expects Store.RenewLease(ctx, l, ttl). A zero ttl is
// the Store's default lease TTL.
func (m *Mock) ExpectRenewLease(l durable.Lease, ttl time.Duration) *RenewLease {
	r := capture[renewLeaseReq](m, "RenewLease", func(ctx context.Context, s *durable.Store) error {
		_, err := s.RenewLease(ctx, l, ttl)
		return err
	})
	e := &RenewLease{r: r}
	e.expectation = m.begin("RenewLease", func() mockspec.Statement { return m.gen.RenewLease(r.l, r.ttl, nil)[0] })
	m.track(&e.expectation)
	return e
}

// Renewed: the lease is still held and now expires ttl from the server's
// time. It returns the Lease the Store returns.
func (e *RenewLease) Renewed() durable.Lease {
	l := e.r.l
	l.AcquiredAt = e.m.orNow(l.AcquiredAt)
	l.ExpiresAt = e.m.now().Add(e.r.ttl)
	e.finish(e.m.gen.RenewLease(e.r.l, e.r.ttl, &l))
	return l
}

// Fenced: the lease expired, was released or taken over (ErrFenced).
func (e *RenewLease) Fenced() { e.finish(e.m.gen.RenewLease(e.r.l, e.r.ttl, nil)) }

// ReleaseLease is the expectation of Store.ReleaseLease (and of the
// release that Store.RunWithLease ends with).
type ReleaseLease struct {
	expectation
	l durable.Lease
}

// ExpectReleaseLease expects Store.ReleaseLease(ctx, l).
func (m *Mock) ExpectReleaseLease(l durable.Lease) *ReleaseLease {
	l = capture[durable.Lease](m, "ReleaseLease", func(ctx context.Context, s *durable.Store) error {
		_, err := s.ReleaseLease(ctx, l)
		return err
	})
	e := &ReleaseLease{l: l}
	e.expectation = m.begin("ReleaseLease", func() mockspec.Statement { return m.gen.ReleaseLease(l, false)[0] })
	m.track(&e.expectation)
	return e
}

// Released: l held the lease, which is released (true).
func (e *ReleaseLease) Released() { e.finish(e.m.gen.ReleaseLease(e.l, true)) }

// NotHeld: l no longer held the lease (false).
func (e *ReleaseLease) NotHeld() { e.finish(e.m.gen.ReleaseLease(e.l, false)) }

// GetLease is the expectation of Store.GetLease.
type GetLease struct {
	expectation
	r scopedIDReq
}

// ExpectGetLease expects Store.GetLease(ctx, scope, resource).
func (m *Mock) ExpectGetLease(scope durable.Scope, resource string) *GetLease {
	r := capture[scopedIDReq](m, "GetLease", func(ctx context.Context, s *durable.Store) error {
		_, err := s.GetLease(ctx, scope, resource)
		return err
	})
	e := &GetLease{r: r}
	e.expectation = m.begin("GetLease", func() mockspec.Statement { return m.gen.GetLease(r.scope, r.id, nil)[0] })
	m.track(&e.expectation)
	return e
}

// Returns: the stored lease is l (its Scope and Resource are the
// request's; zero times are the server's time). It returns the Lease the
// Store returns.
func (e *GetLease) Returns(l durable.Lease) durable.Lease {
	l = e.m.storedLease(e.r.scope, e.r.id, l)
	e.finish(e.m.gen.GetLease(e.r.scope, e.r.id, &l))
	return l
}

// storedLease is l as the server stores it as the lease on resource in
// scope: zero times are the server's time, times cut to the microsecond.
func (m *Mock) storedLease(scope durable.Scope, resource string, l durable.Lease) durable.Lease {
	l.Scope, l.Resource = scope, resource
	l.AcquiredAt, l.ExpiresAt = m.orNow(l.AcquiredAt), m.orNow(l.ExpiresAt)
	return l
}

// NotFound: no lease is stored, or it was released (ErrNotFound).
func (e *GetLease) NotFound() { e.finish(e.m.gen.GetLease(e.r.scope, e.r.id, nil)) }

// FenceTx is the expectation of postgres.Backend.FenceTx.
type FenceTx struct {
	expectation
	scope durable.Scope
	fence *durable.Fence
}

// ExpectFenceTx expects backend.FenceTx(ctx, tx, scope, fence) on a *sql.Tx
// of the mocked *sql.DB (expect its Begin and Commit or Rollback with
// sqlmock around it). fence must not be nil: FenceTx sends nothing then.
func (m *Mock) ExpectFenceTx(scope durable.Scope, fence *durable.Fence) *FenceTx {
	if fence == nil {
		panic("pgmock: FenceTx without a fence sends nothing")
	}
	f := *fence
	e := &FenceTx{scope: scope, fence: &f}
	e.expectation = m.begin("FenceTx", func() mockspec.Statement { return m.gen.FenceTx(scope, &f, false)[0] })
	m.track(&e.expectation)
	return e
}

// Valid: the fence holds; the lease row is locked until the transaction
// ends.
func (e *FenceTx) Valid() { e.finish(e.m.gen.FenceTx(e.scope, e.fence, true)) }

// Fenced: the fence is not valid (ErrFenced).
func (e *FenceTx) Fenced() { e.finish(e.m.gen.FenceTx(e.scope, e.fence, false)) }

// --- maintenance ---

// Cleanup is the expectation of Store.Cleanup.
type Cleanup struct {
	expectation
	req durable.CleanupRequest
}

// ExpectCleanup expects Store.Cleanup(ctx, req). A zero req.Limit is the
// Store's default.
func (m *Mock) ExpectCleanup(req durable.CleanupRequest) *Cleanup {
	req = capture[durable.CleanupRequest](m, "Cleanup", func(ctx context.Context, s *durable.Store) error {
		_, err := s.Cleanup(ctx, req)
		return err
	})
	e := &Cleanup{req: req}
	e.expectation = m.begin("Cleanup", func() mockspec.Statement {
		return m.gen.Cleanup(req, durable.CleanupResult{})[0]
	})
	m.track(&e.expectation)
	return e
}

// Deletes: the pass deletes what res counts (and says More). The Store
// returns res.
func (e *Cleanup) Deletes(res durable.CleanupResult) { e.finish(e.m.gen.Cleanup(e.req, res)) }

// CountCleanup is the expectation of Store.CountCleanup.
type CountCleanup struct {
	expectation
	req durable.CleanupRequest
}

// ExpectCountCleanup expects Store.CountCleanup(ctx, req). A zero
// req.Limit is the Store's default.
func (m *Mock) ExpectCountCleanup(req durable.CleanupRequest) *CountCleanup {
	r := capture[countReq](m, "CountCleanup", func(ctx context.Context, s *durable.Store) error {
		_, err := s.CountCleanup(ctx, req)
		return err
	})
	e := &CountCleanup{req: r.req}
	e.expectation = m.begin("CountCleanup", func() mockspec.Statement {
		return m.gen.CountCleanup(r.req, durable.CleanupResult{})[0]
	})
	m.track(&e.expectation)
	return e
}

// Counts: the candidates are what res counts; with res.More, one kind's
// count is the limit (and more are waiting). The Store returns res.
func (e *CountCleanup) Counts(res durable.CleanupResult) { e.finish(e.m.gen.CountCleanup(e.req, res)) }

// DeleteRecord is the expectation of Store.DeleteRecord.
type DeleteRecord struct {
	expectation
	r deleteReq
}

// ExpectDeleteRecord expects Store.DeleteRecord(ctx, kind, scope, id).
func (m *Mock) ExpectDeleteRecord(kind contract.RecordKind, scope durable.Scope, id string) *DeleteRecord {
	r := capture[deleteReq](m, "DeleteRecord", func(ctx context.Context, s *durable.Store) error {
		_, err := s.DeleteRecord(ctx, kind, scope, id)
		return err
	})
	e := &DeleteRecord{r: r}
	e.expectation = m.begin("DeleteRecord", func() mockspec.Statement {
		return m.gen.DeleteRecord(r.kind, r.scope, r.id, false)[0]
	})
	m.track(&e.expectation)
	return e
}

// Deleted: the record existed and is deleted (true).
func (e *DeleteRecord) Deleted() { e.finish(e.m.gen.DeleteRecord(e.r.kind, e.r.scope, e.r.id, true)) }

// NotFound: there was no such record (false).
func (e *DeleteRecord) NotFound() { e.finish(e.m.gen.DeleteRecord(e.r.kind, e.r.scope, e.r.id, false)) }

// ListLeases is the expectation of Store.ListLeases.
type ListLeases struct {
	expectation
	q durable.LeaseListQuery
}

// ExpectListLeases expects Store.ListLeases(ctx, q). A zero q.Limit is
// the Store's default page size.
func (m *Mock) ExpectListLeases(q durable.LeaseListQuery) *ListLeases {
	q = capture[durable.LeaseListQuery](m, "ListLeases", func(ctx context.Context, s *durable.Store) error {
		_, err := s.ListLeases(ctx, q)
		return err
	})
	e := &ListLeases{q: q}
	e.expectation = m.begin("ListLeases", func() mockspec.Statement { return m.gen.ListLeases(q, nil)[0] })
	m.track(&e.expectation)
	return e
}

// Returns: the page is page, in order (each in the query's scope, with
// the defaults of GetLease's Returns; resources in byte order after the
// cursor, at most the limit, else it panics). With q.Held the server
// returns only leases that expire after its time: give such ExpiresAt
// values. It returns what the Store returns (nil for an empty page).
func (e *ListLeases) Returns(page ...durable.Lease) []durable.Lease {
	var out []durable.Lease
	for _, l := range page {
		out = append(out, e.m.storedLease(e.q.Scope, l.Resource, l))
	}
	e.finish(e.m.gen.ListLeases(e.q, out))
	return out
}
