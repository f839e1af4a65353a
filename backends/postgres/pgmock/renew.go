package pgmock

import (
	"context"
	"slices"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/backends/postgres/internal/mockspec"
	"github.com/durable-go/durable/contract"
)

var _ contract.LeaseRenewer = (*recorder)(nil)

type renewLeasesReq struct {
	leases []durable.Lease
	ttl    time.Duration
}

func (r *recorder) RenewLeases(_ context.Context, leases []contract.Lease, ttl time.Duration) ([]contract.LeaseRenewal, error) {
	return nil, r.keep(renewLeasesReq{slices.Clone(leases), ttl})
}

// RenewLeases is the expectation of Store.RenewLeases, and of each round
// of Store.RunWithLease's renewals (one RenewLeases call for the leases
// that are due; for one RunWithLease, its one lease).
type RenewLeases struct {
	expectation
	r   renewLeasesReq
	gen mockspec.RenewLeasesGen
}

// ExpectRenewLeases expects Store.RenewLeases(ctx, leases, ttl), one
// statement for the batch. A zero ttl is the Store's default lease TTL;
// leases must not be empty (an empty batch sends nothing).
func (m *Mock) ExpectRenewLeases(leases []durable.Lease, ttl time.Duration) *RenewLeases {
	r := capture[renewLeasesReq](m, "RenewLeases", func(ctx context.Context, s *durable.Store) error {
		_, err := s.RenewLeases(ctx, leases, ttl)
		return err
	})
	g, ok := m.gen.(mockspec.RenewLeasesGen)
	if !ok {
		panic("pgmock: the backend's mock generator cannot renew leases in batches")
	}
	e := &RenewLeases{r: r, gen: g}
	e.expectation = m.begin("RenewLeases", func() mockspec.Statement { return g.RenewLeases(r.leases, r.ttl, nil)[0] })
	m.track(&e.expectation)
	return e
}

// Renewed: every lease is still held and now expires ttl from the
// server's time. It returns the outcomes the Store returns.
func (e *RenewLeases) Renewed() []durable.LeaseRenewal { return e.Fenced() }

// Fenced: the leases at the positions fenced (indexes into the batch) are
// no longer held (ErrFenced in their outcomes); the others are renewed, to
// ttl from the server's time. It returns the outcomes the Store returns
// (each Err a *contract.Error with Code Fenced).
func (e *RenewLeases) Fenced(fenced ...int) []durable.LeaseRenewal {
	now := e.m.now()
	renewed := make([]*contract.Lease, len(e.r.leases))
	out := make([]durable.LeaseRenewal, len(e.r.leases))
	// A lease given twice has one outcome: fenced at one position, fenced
	// at all.
	gone := map[durable.Lease]bool{}
	for _, j := range fenced {
		if j < 0 || j >= len(e.r.leases) {
			panic("pgmock: RenewLeases.Fenced: position out of the batch")
		}
		gone[e.r.leases[j]] = true
	}
	for i, l := range e.r.leases {
		if gone[l] {
			out[i].Err = &contract.Error{Code: contract.Fenced, Op: "RenewLeases", Msg: "lease is no longer held"}
			continue
		}
		l.AcquiredAt = e.m.orNow(l.AcquiredAt)
		l.ExpiresAt = now.Add(e.r.ttl)
		renewed[i] = &l
		out[i].Lease = l
	}
	e.finish(e.gen.RenewLeases(e.r.leases, e.r.ttl, renewed))
	return out
}
