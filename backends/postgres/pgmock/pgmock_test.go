package pgmock_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/DATA-DOG/go-sqlmock"
	"github.com/durable-go/durable"
	"github.com/durable-go/durable/backends/postgres"
	"github.com/durable-go/durable/backends/postgres/pgmock"
	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/pgtest"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
	"github.com/lib/pq"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// clock is a test clock shared by the real backend and the mock: a fixed
// base (with nanoseconds, which the backend cuts) plus an offset.
type clock struct{ offset atomic.Int64 }

var clockBase = time.Date(2031, 3, 4, 5, 6, 7, 891234567, time.UTC)

func (c *clock) now() time.Time          { return clockBase.Add(time.Duration(c.offset.Load())) }
func (c *clock) Now() time.Time          { return c.now() } // contract.Clock
func (c *clock) advance(d time.Duration) { c.offset.Add(int64(d)) }

// pair is the same Store call's two worlds: a Store on a real PostgreSQL
// (through database/sql, pgx's stdlib) and one on a go-sqlmock *sql.DB
// whose expectations pgmock registers, with the same options and clock.
type pair struct {
	real, mocked *durable.Store
	realB        *postgres.Backend
	mockB        *postgres.Backend
	realDB       *sql.DB
	mockDB       *sql.DB
	sqlmock      sqlmock.Sqlmock
	m            *pgmock.Mock
	clock        *clock
}

func newPair(t *testing.T) *pair {
	t.Helper()
	srv := pgtest.Require(t)
	ctx := t.Context()
	p := &pair{clock: &clock{}}
	opts := postgres.Options{Schema: srv.Schema(t), Clock: p.clock, Listen: postgres.ListenOff}

	db, err := sql.Open("pgx", srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	p.realDB = db
	if p.real, err = postgres.New(ctx, db, opts); err != nil { // migrates
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.real.Close() })
	p.real.As(&p.realB)

	mdb, mock, err := sqlmock.New(sqlmock.QueryMatcherOption(sqlmock.QueryMatcherEqual))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mdb.Close() })
	p.mockDB, p.sqlmock = mdb, mock
	mopts := opts
	mopts.Migrate = postgres.MigrateVerify
	p.m = pgmock.New(mock, pgmock.Backend(mopts), pgmock.MatchEqual())
	p.m.ExpectOpen().Current()
	if p.mocked, err = postgres.New(ctx, mdb, mopts); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.mocked.Close() })
	p.mocked.As(&p.mockB)
	return p
}

// result is what a Store call returned, normalized for comparison.
type result struct {
	v   any
	err error
}

// normalize clears what is random in v: claim tokens (after checking that
// a new or reclaimed claim has one).
func normalize(t *testing.T, v any) any {
	t.Helper()
	switch c := v.(type) {
	case durable.Claim:
		if (c.Kind == durable.ClaimNew || c.Kind == durable.ClaimReclaimed) != (len(c.Token) == 32) {
			t.Errorf("claim %v has token %q", c.Kind, c.Token)
		}
		c.Token = ""
		return c
	}
	return v
}

// same fails t unless the two results are equal: the values deeply, the
// errors in their text (code, operation, message, details) and code.
func same(t *testing.T, real, mocked result) {
	t.Helper()
	rv, mv := normalize(t, real.v), normalize(t, mocked.v)
	if !reflect.DeepEqual(rv, mv) {
		t.Errorf("values differ:\nreal   %+v\nmocked %+v", rv, mv)
	}
	switch {
	case (real.err == nil) != (mocked.err == nil):
		t.Errorf("errors differ: real %v, mocked %v", real.err, mocked.err)
	case real.err != nil && (real.err.Error() != mocked.err.Error() || durable.CodeOf(real.err) != durable.CodeOf(mocked.err)):
		t.Errorf("errors differ:\nreal   %v\nmocked %v", real.err, mocked.err)
	}
}

// A case is one Store call and one outcome: setup brings the real
// database into the state of that outcome, run makes the call on either
// Store (and may make several, as a service does), and expect registers,
// from what the real call returned, the pgmock outcome.
type tcase struct {
	name   string
	setup  func(ctx context.Context, t *testing.T, p *pair)
	run    func(ctx context.Context, s *durable.Store) (any, error)
	expect func(m *pgmock.Mock, real any)
}

var (
	ref1  = durable.KeyRef{Scope: "tenant", Key: "k-1"}
	claim = durable.ClaimRequest{KeyRef: ref1, Fingerprint: "fp-1", WorkflowID: "wf-k"}
	out1  = durable.Outcome{Code: 201, Header: map[string][]string{"Content-Type": {"text/plain"}}, Body: []byte("done"), Ref: "r-1"}
)

func must[T any](t *testing.T) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func cases() []tcase {
	wf := durable.Workflow{Scope: "tenant", ID: "wf-1", RequestID: "req-1", Status: "running", Snapshot: []byte("s1")}
	create := func(ctx context.Context, t *testing.T, p *pair) {
		must[durable.Workflow](t)(p.real.CreateWorkflow(ctx, wf))
	}
	update := durable.Update{Scope: "tenant", ID: "wf-1", ExpectStatus: "running", ExpectRevision: 1, Status: "waiting", Snapshot: []byte("s2")}
	lreq := durable.LeaseRequest{Scope: "tenant", Resource: "res-1", Owner: "owner-1"}
	acquire := func(ctx context.Context, t *testing.T, p *pair) durable.Lease {
		return must[durable.Lease](t)(p.real.AcquireLease(ctx, lreq))
	}
	claimKey := func(ctx context.Context, t *testing.T, p *pair) {
		must[durable.Claim](t)(p.real.ClaimKey(ctx, claim))
	}
	// claimThen claims the key, then calls f with the claim's token.
	claimThen := func(f func(ctx context.Context, s *durable.Store, token string) (any, error)) func(ctx context.Context, s *durable.Store) (any, error) {
		return func(ctx context.Context, s *durable.Store) (any, error) {
			c, err := s.ClaimKey(ctx, claim)
			if err != nil {
				return nil, err
			}
			return f(ctx, s, c.Token)
		}
	}
	complete := func(c durable.Completion) func(ctx context.Context, s *durable.Store, token string) (any, error) {
		return func(ctx context.Context, s *durable.Store, token string) (any, error) {
			c.Token = token
			return s.CompleteKey(ctx, c)
		}
	}
	// theLease is the lease the real database granted, read back.
	var granted durable.Lease

	return []tcase{
		// --- workflows ---
		{name: "CreateWorkflow/Created",
			run:    func(ctx context.Context, s *durable.Store) (any, error) { return s.CreateWorkflow(ctx, wf) },
			expect: func(m *pgmock.Mock, _ any) { m.ExpectCreateWorkflow(wf).Created() }},
		{name: "CreateWorkflow/DefaultStatus",
			run: func(ctx context.Context, s *durable.Store) (any, error) {
				return s.CreateWorkflow(ctx, durable.Workflow{Scope: "tenant", ID: "wf-2"})
			},
			expect: func(m *pgmock.Mock, _ any) {
				m.ExpectCreateWorkflow(durable.Workflow{Scope: "tenant", ID: "wf-2"}).Created()
			}},
		{name: "CreateWorkflow/Exists", setup: create,
			run:    func(ctx context.Context, s *durable.Store) (any, error) { return s.CreateWorkflow(ctx, wf) },
			expect: func(m *pgmock.Mock, _ any) { m.ExpectCreateWorkflow(wf).Exists() }},
		{name: "GetWorkflow/Returns", setup: create,
			run: func(ctx context.Context, s *durable.Store) (any, error) { return s.GetWorkflow(ctx, "tenant", "wf-1") },
			expect: func(m *pgmock.Mock, real any) {
				m.ExpectGetWorkflow("tenant", "wf-1").Returns(real.(durable.Workflow))
			}},
		{name: "GetWorkflow/NotFound",
			run:    func(ctx context.Context, s *durable.Store) (any, error) { return s.GetWorkflow(ctx, "tenant", "wf-1") },
			expect: func(m *pgmock.Mock, _ any) { m.ExpectGetWorkflow("tenant", "wf-1").NotFound() }},
		{name: "UpdateWorkflow/Applies", setup: create,
			run: func(ctx context.Context, s *durable.Store) (any, error) { return s.UpdateWorkflow(ctx, update) },
			expect: func(m *pgmock.Mock, _ any) {
				// The record created at the clock's time, as setup made it.
				m.ExpectUpdateWorkflow(update).Applies(wf)
			}},
		{name: "UpdateWorkflow/Conflict", setup: func(ctx context.Context, t *testing.T, p *pair) {
			create(ctx, t, p)
			must[durable.Workflow](t)(p.real.UpdateWorkflow(ctx, update))
		},
			run: func(ctx context.Context, s *durable.Store) (any, error) { return s.UpdateWorkflow(ctx, update) },
			expect: func(m *pgmock.Mock, _ any) {
				m.ExpectUpdateWorkflow(update).Conflict(durable.Workflow{Status: "waiting", Revision: 2})
			}},
		{name: "UpdateWorkflow/Terminal", setup: func(ctx context.Context, t *testing.T, p *pair) {
			create(ctx, t, p)
			u := update
			u.Status = "succeeded"
			must[durable.Workflow](t)(p.real.UpdateWorkflow(ctx, u))
		},
			run: func(ctx context.Context, s *durable.Store) (any, error) { return s.UpdateWorkflow(ctx, update) },
			expect: func(m *pgmock.Mock, _ any) {
				m.ExpectUpdateWorkflow(update).Terminal(durable.Workflow{Status: "succeeded", Revision: 2})
			}},
		{name: "UpdateWorkflow/TerminalSameStatus", setup: func(ctx context.Context, t *testing.T, p *pair) {
			create(ctx, t, p)
			u := update
			u.Status, u.RequestID = "succeeded", "req-1"
			must[durable.Workflow](t)(p.real.UpdateWorkflow(ctx, u))
		},
			run: func(ctx context.Context, s *durable.Store) (any, error) {
				u := update
				u.Status, u.ExpectRevision = "succeeded", 0
				return s.UpdateWorkflow(ctx, u)
			},
			expect: func(m *pgmock.Mock, real any) {
				u := update
				u.Status, u.ExpectRevision = "succeeded", 0
				m.ExpectUpdateWorkflow(u).Terminal(real.(durable.Workflow))
			}},
		{name: "UpdateWorkflow/Fenced", setup: create,
			run: func(ctx context.Context, s *durable.Store) (any, error) {
				u := update
				u.Fence = &durable.Fence{Resource: "res-9", Owner: "o", Token: 5}
				return s.UpdateWorkflow(ctx, u)
			},
			expect: func(m *pgmock.Mock, _ any) {
				u := update
				u.Fence = &durable.Fence{Resource: "res-9", Owner: "o", Token: 5}
				m.ExpectUpdateWorkflow(u).Fenced()
			}},
		{name: "UpdateWorkflow/NotFound",
			run:    func(ctx context.Context, s *durable.Store) (any, error) { return s.UpdateWorkflow(ctx, update) },
			expect: func(m *pgmock.Mock, _ any) { m.ExpectUpdateWorkflow(update).NotFound() }},
		{name: "Step/Applies", setup: create,
			run: func(ctx context.Context, s *durable.Store) (any, error) {
				return s.Step(ctx, "tenant", "wf-1", durable.StepOptions{}, func(cur durable.Workflow) (durable.Change, error) {
					return durable.Change{Status: "waiting", Snapshot: append(cur.Snapshot, '+')}, nil
				})
			},
			expect: func(m *pgmock.Mock, _ any) {
				cur := m.ExpectGetWorkflow("tenant", "wf-1").Returns(wf)
				m.ExpectUpdateWorkflow(durable.Update{Scope: "tenant", ID: "wf-1", ExpectStatus: "running", ExpectRevision: 1,
					Status: "waiting", Snapshot: []byte("s1+")}).Applies(cur)
			}},
		{name: "ListWorkflows/Returns", setup: func(ctx context.Context, t *testing.T, p *pair) {
			for _, id := range []string{"a", "b", "c"} {
				must[durable.Workflow](t)(p.real.CreateWorkflow(ctx, durable.Workflow{Scope: "tenant", ID: id, Status: "running"}))
			}
		},
			run: func(ctx context.Context, s *durable.Store) (any, error) {
				return s.ListWorkflows(ctx, durable.ListQuery{Scope: "tenant", After: "a"})
			},
			expect: func(m *pgmock.Mock, real any) {
				m.ExpectListWorkflows(durable.ListQuery{Scope: "tenant", After: "a"}).Returns(real.([]durable.Workflow)...)
			}},
		{name: "ListWorkflows/ByStatusEmpty", setup: create,
			run: func(ctx context.Context, s *durable.Store) (any, error) {
				return s.ListWorkflows(ctx, durable.ListQuery{Scope: "tenant", Status: "failed", Limit: 5})
			},
			expect: func(m *pgmock.Mock, _ any) {
				m.ExpectListWorkflows(durable.ListQuery{Scope: "tenant", Status: "failed", Limit: 5}).Returns()
			}},

		// --- idempotency keys ---
		{name: "ClaimKey/New",
			run:    func(ctx context.Context, s *durable.Store) (any, error) { return s.ClaimKey(ctx, claim) },
			expect: func(m *pgmock.Mock, _ any) { m.ExpectClaimKey(claim).New() }},
		{name: "ClaimKey/InFlight", setup: claimKey,
			run:    func(ctx context.Context, s *durable.Store) (any, error) { return s.ClaimKey(ctx, claim) },
			expect: func(m *pgmock.Mock, _ any) { m.ExpectClaimKey(claim).InFlight() }},
		{name: "ClaimKey/Reclaimed", setup: func(ctx context.Context, t *testing.T, p *pair) {
			// A claim created one TTL ago, which expired a tolerance ago.
			p.clock.advance(-time.Minute - time.Second - time.Microsecond)
			claimKey(ctx, t, p)
			p.clock.advance(time.Minute + time.Second + time.Microsecond)
		},
			run:    func(ctx context.Context, s *durable.Store) (any, error) { return s.ClaimKey(ctx, claim) },
			expect: func(m *pgmock.Mock, _ any) { m.ExpectClaimKey(claim).Reclaimed() }},
		{name: "ClaimKey/Completed", setup: func(ctx context.Context, t *testing.T, p *pair) {
			c := must[durable.Claim](t)(p.real.ClaimKey(ctx, claim))
			must[durable.KeyRecord](t)(p.real.CompleteKey(ctx, durable.Completion{KeyRef: ref1, Token: c.Token, Outcome: out1}))
		},
			run:    func(ctx context.Context, s *durable.Store) (any, error) { return s.ClaimKey(ctx, claim) },
			expect: func(m *pgmock.Mock, _ any) { m.ExpectClaimKey(claim).Completed(out1) }},
		{name: "ClaimKey/KeyConflict", setup: claimKey,
			run: func(ctx context.Context, s *durable.Store) (any, error) {
				c := claim
				c.Fingerprint = "fp-2"
				return s.ClaimKey(ctx, c)
			},
			expect: func(m *pgmock.Mock, _ any) {
				c := claim
				c.Fingerprint = "fp-2"
				m.ExpectClaimKey(c).KeyConflict()
			}},
		{name: "CompleteKey/Stores",
			run: claimThen(complete(durable.Completion{KeyRef: ref1, Outcome: out1})),
			expect: func(m *pgmock.Mock, _ any) {
				m.ExpectClaimKey(claim).New()
				m.ExpectCompleteKey(durable.Completion{KeyRef: ref1, Outcome: out1}).Stores()
			}},
		{name: "CompleteKey/AlreadyStored",
			run: claimThen(func(ctx context.Context, s *durable.Store, token string) (any, error) {
				if _, err := s.CompleteKey(ctx, durable.Completion{KeyRef: ref1, Token: token, Outcome: out1, Retain: time.Hour}); err != nil {
					return nil, err
				}
				return s.CompleteKey(ctx, durable.Completion{KeyRef: ref1, Token: token, Outcome: out1, Retain: time.Hour})
			}),
			expect: func(m *pgmock.Mock, _ any) {
				m.ExpectClaimKey(claim).New()
				m.ExpectCompleteKey(durable.Completion{KeyRef: ref1, Outcome: out1, Retain: time.Hour}).Stores()
				m.ExpectCompleteKey(durable.Completion{KeyRef: ref1, Outcome: out1, Retain: time.Hour}).AlreadyStored()
			}},
		{name: "CompleteKey/Fenced",
			run: claimThen(func(ctx context.Context, s *durable.Store, _ string) (any, error) {
				return s.CompleteKey(ctx, durable.Completion{KeyRef: ref1, Token: "stale", Outcome: out1})
			}),
			expect: func(m *pgmock.Mock, _ any) {
				m.ExpectClaimKey(claim).New()
				m.ExpectCompleteKey(durable.Completion{KeyRef: ref1, Token: "stale", Outcome: out1}).Fenced()
			}},
		{name: "CompleteKey/FenceInvalid",
			run: claimThen(complete(durable.Completion{KeyRef: ref1, Outcome: out1, Fence: &durable.Fence{Resource: "res-9", Owner: "o", Token: 3}})),
			expect: func(m *pgmock.Mock, _ any) {
				m.ExpectClaimKey(claim).New()
				m.ExpectCompleteKey(durable.Completion{KeyRef: ref1, Outcome: out1, Fence: &durable.Fence{Resource: "res-9", Owner: "o", Token: 3}}).FenceInvalid()
			}},
		{name: "RenewKey/Renewed",
			run: claimThen(func(ctx context.Context, s *durable.Store, token string) (any, error) {
				return s.RenewKey(ctx, ref1, token, 90*time.Second)
			}),
			expect: func(m *pgmock.Mock, _ any) {
				m.ExpectClaimKey(claim).New()
				m.ExpectRenewKey(ref1, "", 90*time.Second).Renewed()
			}},
		{name: "RenewKey/Fenced",
			run: func(ctx context.Context, s *durable.Store) (any, error) { return s.RenewKey(ctx, ref1, "stale", 0) },
			expect: func(m *pgmock.Mock, _ any) {
				m.ExpectRenewKey(ref1, "stale", 0).Fenced()
			}},
		{name: "ReleaseKey/Released",
			run: claimThen(func(ctx context.Context, s *durable.Store, token string) (any, error) {
				return s.ReleaseKey(ctx, ref1, token)
			}),
			expect: func(m *pgmock.Mock, _ any) {
				m.ExpectClaimKey(claim).New()
				m.ExpectReleaseKey(ref1, "").Released()
			}},
		{name: "ReleaseKey/NotHeld", setup: claimKey,
			run:    func(ctx context.Context, s *durable.Store) (any, error) { return s.ReleaseKey(ctx, ref1, "stale") },
			expect: func(m *pgmock.Mock, _ any) { m.ExpectReleaseKey(ref1, "stale").NotHeld() }},
		{name: "GetKey/Returns", setup: claimKey,
			run: func(ctx context.Context, s *durable.Store) (any, error) { return s.GetKey(ctx, ref1) },
			expect: func(m *pgmock.Mock, real any) {
				m.ExpectGetKey(ref1).Returns(real.(durable.KeyRecord))
			}},
		{name: "GetKey/NotFound",
			run:    func(ctx context.Context, s *durable.Store) (any, error) { return s.GetKey(ctx, ref1) },
			expect: func(m *pgmock.Mock, _ any) { m.ExpectGetKey(ref1).NotFound() }},
		{name: "Do/New",
			run: func(ctx context.Context, s *durable.Store) (any, error) {
				return s.Do(ctx, claim, durable.DoOptions{}, func(context.Context) (durable.Outcome, error) { return out1, nil })
			},
			expect: func(m *pgmock.Mock, _ any) {
				m.ExpectClaimKey(claim).New()
				m.ExpectCompleteKey(durable.Completion{KeyRef: ref1, Outcome: out1}).Stores()
			}},
		{name: "Do/FunctionFails",
			run: func(ctx context.Context, s *durable.Store) (any, error) {
				return s.Do(ctx, claim, durable.DoOptions{}, func(context.Context) (durable.Outcome, error) {
					return durable.Outcome{}, errors.New("card declined")
				})
			},
			expect: func(m *pgmock.Mock, _ any) {
				m.ExpectClaimKey(claim).New()
				m.ExpectReleaseKey(ref1, "").Released()
			}},
		{name: "Do/InFlight", setup: claimKey,
			run: func(ctx context.Context, s *durable.Store) (any, error) {
				return s.Do(ctx, claim, durable.DoOptions{}, func(context.Context) (durable.Outcome, error) { return out1, nil })
			},
			expect: func(m *pgmock.Mock, _ any) { m.ExpectClaimKey(claim).InFlight() }},

		// --- leases ---
		{name: "AcquireLease/Granted",
			run: func(ctx context.Context, s *durable.Store) (any, error) { return s.AcquireLease(ctx, lreq) },
			expect: func(m *pgmock.Mock, real any) {
				m.ExpectAcquireLease(lreq).Granted(real.(durable.Lease).Token)
			}},
		{name: "AcquireLease/Busy", setup: func(ctx context.Context, t *testing.T, p *pair) { acquire(ctx, t, p) },
			run:    func(ctx context.Context, s *durable.Store) (any, error) { return s.AcquireLease(ctx, lreq) },
			expect: func(m *pgmock.Mock, _ any) { m.ExpectAcquireLease(lreq).Busy() }},
		{name: "RenewLease/Renewed", setup: func(ctx context.Context, t *testing.T, p *pair) { granted = acquire(ctx, t, p) },
			run: func(ctx context.Context, s *durable.Store) (any, error) {
				return s.RenewLease(ctx, granted, 45*time.Second)
			},
			expect: func(m *pgmock.Mock, _ any) {
				m.ExpectRenewLease(granted, 45*time.Second).Renewed()
			}},
		{name: "RenewLease/Fenced", setup: func(ctx context.Context, t *testing.T, p *pair) {
			granted = acquire(ctx, t, p)
			must[bool](t)(p.real.ReleaseLease(ctx, granted))
		},
			run:    func(ctx context.Context, s *durable.Store) (any, error) { return s.RenewLease(ctx, granted, 0) },
			expect: func(m *pgmock.Mock, _ any) { m.ExpectRenewLease(granted, 0).Fenced() }},
		{name: "RenewLeases/OneFenced", setup: func(ctx context.Context, t *testing.T, p *pair) { granted = acquire(ctx, t, p) },
			run: func(ctx context.Context, s *durable.Store) (any, error) {
				stale := granted
				stale.Token += 100
				return s.RenewLeases(ctx, []durable.Lease{granted, stale, granted}, 45*time.Second)
			},
			expect: func(m *pgmock.Mock, _ any) {
				stale := granted
				stale.Token += 100
				m.ExpectRenewLeases([]durable.Lease{granted, stale, granted}, 45*time.Second).Fenced(1)
			}},
		{name: "ReleaseLease/Released", setup: func(ctx context.Context, t *testing.T, p *pair) { granted = acquire(ctx, t, p) },
			run:    func(ctx context.Context, s *durable.Store) (any, error) { return s.ReleaseLease(ctx, granted) },
			expect: func(m *pgmock.Mock, _ any) { m.ExpectReleaseLease(granted).Released() }},
		{name: "ReleaseLease/NotHeld", setup: func(ctx context.Context, t *testing.T, p *pair) {
			granted = acquire(ctx, t, p)
			granted.Token++
		},
			run:    func(ctx context.Context, s *durable.Store) (any, error) { return s.ReleaseLease(ctx, granted) },
			expect: func(m *pgmock.Mock, _ any) { m.ExpectReleaseLease(granted).NotHeld() }},
		{name: "GetLease/Returns", setup: func(ctx context.Context, t *testing.T, p *pair) { acquire(ctx, t, p) },
			run: func(ctx context.Context, s *durable.Store) (any, error) { return s.GetLease(ctx, "tenant", "res-1") },
			expect: func(m *pgmock.Mock, real any) {
				m.ExpectGetLease("tenant", "res-1").Returns(real.(durable.Lease))
			}},
		{name: "GetLease/NotFound",
			run:    func(ctx context.Context, s *durable.Store) (any, error) { return s.GetLease(ctx, "tenant", "res-1") },
			expect: func(m *pgmock.Mock, _ any) { m.ExpectGetLease("tenant", "res-1").NotFound() }},
		{name: "RunWithLease",
			run: func(ctx context.Context, s *durable.Store) (any, error) {
				var got durable.Lease
				err := s.RunWithLease(ctx, lreq, durable.LeaseOptions{}, func(_ context.Context, l durable.Lease) error {
					got = l
					return nil
				})
				return got, err
			},
			expect: func(m *pgmock.Mock, real any) {
				l := m.ExpectAcquireLease(lreq).Granted(real.(durable.Lease).Token)
				m.ExpectReleaseLease(l).Released()
			}},

		// --- maintenance ---
		{name: "Cleanup/Deletes", setup: func(ctx context.Context, t *testing.T, p *pair) {
			create(ctx, t, p)
			u := update
			u.Status = "succeeded"
			must[durable.Workflow](t)(p.real.UpdateWorkflow(ctx, u))
			claimKey(ctx, t, p)
			acquire(ctx, t, p)
			p.clock.advance(2 * time.Hour)
		},
			run: func(ctx context.Context, s *durable.Store) (any, error) {
				return s.Cleanup(ctx, durable.CleanupRequest{TerminalAge: time.Hour, Limit: 1})
			},
			expect: func(m *pgmock.Mock, real any) {
				m.ExpectCleanup(durable.CleanupRequest{TerminalAge: time.Hour, Limit: 1}).Deletes(real.(durable.CleanupResult))
			}},
		{name: "CountCleanup/Counts", setup: func(ctx context.Context, t *testing.T, p *pair) {
			for _, id := range []string{"a", "b"} {
				must[durable.Workflow](t)(p.real.CreateWorkflow(ctx, durable.Workflow{Scope: "tenant", ID: id, Status: "failed"}))
			}
			p.clock.advance(2 * time.Hour)
		},
			run: func(ctx context.Context, s *durable.Store) (any, error) {
				return s.CountCleanup(ctx, durable.CleanupRequest{TerminalAge: time.Hour, Limit: 1})
			},
			expect: func(m *pgmock.Mock, real any) {
				if !real.(durable.CleanupResult).More {
					panic("the setup leaves more than the limit")
				}
				m.ExpectCountCleanup(durable.CleanupRequest{TerminalAge: time.Hour, Limit: 1}).Counts(real.(durable.CleanupResult))
			}},
		{name: "DeleteRecord/Deleted", setup: claimKey,
			run: func(ctx context.Context, s *durable.Store) (any, error) {
				return s.DeleteRecord(ctx, contract.KindKey, "tenant", "k-1")
			},
			expect: func(m *pgmock.Mock, _ any) { m.ExpectDeleteRecord(contract.KindKey, "tenant", "k-1").Deleted() }},
		{name: "DeleteRecord/NotFound",
			run: func(ctx context.Context, s *durable.Store) (any, error) {
				return s.DeleteRecord(ctx, contract.KindWorkflow, "tenant", "wf-1")
			},
			expect: func(m *pgmock.Mock, _ any) { m.ExpectDeleteRecord(contract.KindWorkflow, "tenant", "wf-1").NotFound() }},
		{name: "ListKeys/Returns", setup: func(ctx context.Context, t *testing.T, p *pair) {
			// A completed key (with an outcome), a claim, and one in another
			// scope; paged after the cursor "a".
			for _, k := range []string{"a", "b", "c"} {
				must[durable.Claim](t)(p.real.ClaimKey(ctx, durable.ClaimRequest{KeyRef: durable.KeyRef{Scope: "tenant", Key: k}, Fingerprint: "fp"}))
			}
			c := must[durable.Claim](t)(p.real.ClaimKey(ctx, durable.ClaimRequest{KeyRef: durable.KeyRef{Scope: "tenant", Key: "d"}, Fingerprint: "fp"}))
			must[durable.KeyRecord](t)(p.real.CompleteKey(ctx, durable.Completion{KeyRef: c.Record.KeyRef, Token: c.Token, Outcome: out1}))
			must[durable.Claim](t)(p.real.ClaimKey(ctx, durable.ClaimRequest{KeyRef: durable.KeyRef{Scope: "other", Key: "e"}, Fingerprint: "fp"}))
		},
			run: func(ctx context.Context, s *durable.Store) (any, error) {
				return s.ListKeys(ctx, durable.KeyListQuery{Scope: "tenant", After: "a"})
			},
			expect: func(m *pgmock.Mock, real any) {
				if len(real.([]durable.KeyRecord)) != 3 {
					panic("the setup lists three keys after a")
				}
				m.ExpectListKeys(durable.KeyListQuery{Scope: "tenant", After: "a"}).Returns(real.([]durable.KeyRecord)...)
			}},
		{name: "ListKeys/ByStateEmpty", setup: claimKey,
			run: func(ctx context.Context, s *durable.Store) (any, error) {
				return s.ListKeys(ctx, durable.KeyListQuery{Scope: "tenant", State: durable.KeyCompleted, Limit: 5})
			},
			expect: func(m *pgmock.Mock, _ any) {
				m.ExpectListKeys(durable.KeyListQuery{Scope: "tenant", State: durable.KeyCompleted, Limit: 5}).Returns()
			}},
		{name: "ListLeases/Returns", setup: func(ctx context.Context, t *testing.T, p *pair) {
			for _, r := range []string{"r-1", "r-2"} {
				must[durable.Lease](t)(p.real.AcquireLease(ctx, durable.LeaseRequest{Scope: "tenant", Resource: r, Owner: "o"}))
			}
			p.clock.advance(time.Hour) // expired, still listed
		},
			run: func(ctx context.Context, s *durable.Store) (any, error) {
				return s.ListLeases(ctx, durable.LeaseListQuery{Scope: "tenant", Limit: 1})
			},
			expect: func(m *pgmock.Mock, real any) {
				m.ExpectListLeases(durable.LeaseListQuery{Scope: "tenant", Limit: 1}).Returns(real.([]durable.Lease)...)
			}},
		{name: "ListLeases/Held", setup: func(ctx context.Context, t *testing.T, p *pair) {
			must[durable.Lease](t)(p.real.AcquireLease(ctx, durable.LeaseRequest{Scope: "tenant", Resource: "r-1", Owner: "o"}))
			p.clock.advance(time.Hour)
			must[durable.Lease](t)(p.real.AcquireLease(ctx, durable.LeaseRequest{Scope: "tenant", Resource: "r-2", Owner: "o"}))
		},
			run: func(ctx context.Context, s *durable.Store) (any, error) {
				return s.ListLeases(ctx, durable.LeaseListQuery{Scope: "tenant", Held: true})
			},
			expect: func(m *pgmock.Mock, real any) {
				if l := real.([]durable.Lease); len(l) != 1 || l[0].Resource != "r-2" {
					panic("the setup holds r-2 only")
				}
				m.ExpectListLeases(durable.LeaseListQuery{Scope: "tenant", Held: true}).Returns(real.([]durable.Lease)...)
			}},
	}
}

// TestHelpersMatchPostgres: for every operation and outcome, the same Store
// call against a real PostgreSQL and against pgmock's expectation returns
// the same value or the same error, and the mock's expectations are all
// met.
func TestHelpersMatchPostgres(t *testing.T) {
	for _, c := range cases() {
		t.Run(c.name, func(t *testing.T) {
			ctx := t.Context()
			p := newPair(t)
			if c.setup != nil {
				c.setup(ctx, t, p)
			}
			var real result
			real.v, real.err = c.run(ctx, p.real)
			c.expect(p.m, real.v)
			var mocked result
			mocked.v, mocked.err = c.run(ctx, p.mocked)
			same(t, real, mocked)
			if err := p.sqlmock.ExpectationsWereMet(); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestFenceTxMatchesPostgres: FenceTx in a transaction of the caller's,
// valid and fenced.
func TestFenceTxMatchesPostgres(t *testing.T) {
	for _, valid := range []bool{true, false} {
		t.Run(fmt.Sprint("valid=", valid), func(t *testing.T) {
			ctx := t.Context()
			p := newPair(t)
			l := must[durable.Lease](t)(p.real.AcquireLease(ctx, durable.LeaseRequest{Scope: "tenant", Resource: "res-1", Owner: "o"}))
			fence := l.Fence()
			if !valid {
				fence.Token++
			}
			p.sqlmock.ExpectBegin()
			if valid {
				p.m.ExpectFenceTx("tenant", fence).Valid()
			} else {
				p.m.ExpectFenceTx("tenant", fence).Fenced()
			}
			p.sqlmock.ExpectRollback()
			fenceTx := func(db *sql.DB, b *postgres.Backend) error {
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer func() { _ = tx.Rollback() }()
				return b.FenceTx(ctx, tx, "tenant", fence)
			}
			same(t, result{err: fenceTx(p.realDB, p.realB)}, result{err: fenceTx(p.mockDB, p.mockB)})
			if err := p.sqlmock.ExpectationsWereMet(); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestOpenMatchesPostgres: migrate=verify on a current schema succeeds on
// both; on a schema that does not exist it fails alike, the mock's version
// read failing with the server's 42P01.
func TestOpenMatchesPostgres(t *testing.T) {
	srv := pgtest.Require(t)
	ctx := t.Context()
	db, err := sql.Open("pgx", srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	opts := postgres.Options{Schema: srv.Schema(t), Migrate: postgres.MigrateVerify}
	mdb, mock, err := sqlmock.New()
	if err != nil {
		t.Fatal(err)
	}
	defer mdb.Close()
	m := pgmock.New(mock, pgmock.Backend(opts)) // the regexp matcher
	m.ExpectOpen().FailsWith(&pq.Error{Severity: "ERROR", Code: "42P01", Message: `relation "schema_migrations" does not exist`})
	_, realErr := postgres.New(ctx, db, opts)
	_, mockErr := postgres.New(ctx, mdb, opts)
	same(t, result{err: realErr}, result{err: mockErr})
	if durable.CodeOf(mockErr) != contract.SchemaMismatch {
		t.Errorf("opening an absent schema = %v, want SchemaMismatch", mockErr)
	}

	auto := opts
	auto.Migrate = postgres.MigrateAuto
	s, err := postgres.New(ctx, db, auto) // migrates
	if err != nil {
		t.Fatal(err)
	}
	m.ExpectOpen().Current()
	_, realErr = postgres.New(ctx, db, opts)
	_, mockErr = postgres.New(ctx, mdb, opts)
	same(t, result{err: realErr}, result{err: mockErr})

	// A schema that records an older version.
	var b *postgres.Backend
	s.As(&b)
	if err := b.Force(ctx, int(postgres.LatestVersion())-1); err != nil {
		t.Fatal(err)
	}
	s.Close()
	m.ExpectOpen().Version(postgres.LatestVersion()-1, false)
	_, realErr = postgres.New(ctx, db, opts)
	_, mockErr = postgres.New(ctx, mdb, opts)
	same(t, result{err: realErr}, result{err: mockErr})
	if !errors.Is(mockErr, durable.ErrSchemaMismatch) {
		t.Errorf("opening an older schema = %v, want ErrSchemaMismatch", mockErr)
	}
	if err := mock.ExpectationsWereMet(); err != nil {
		t.Error(err)
	}
}

// --- without a server ---

// newMock returns a Store on a sqlmock *sql.DB with the exact matcher and
// a pgmock on it, with migrate=off, no clock and a fixed server time.
func newMock(t *testing.T, popts ...pgmock.Option) (*durable.Store, sqlmock.Sqlmock, *pgmock.Mock) {
	t.Helper()
	db, mock, err := sqlmock.New(sqlmock.QueryMatcherOption(sqlmock.QueryMatcherEqual))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	opts := postgres.Options{Schema: "svc", Migrate: postgres.MigrateOff}
	s, err := postgres.New(t.Context(), db, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s, mock, pgmock.New(mock, append([]pgmock.Option{pgmock.Backend(opts), pgmock.MatchEqual(),
		pgmock.ServerTime(clockBase)}, popts...)...)
}

// TestWrongExpectationFails: an expectation for another workflow or
// another scope does not match: the call fails with sqlmock's mismatch
// (in the error's chain) and the expectation stays unmet.
func TestWrongExpectationFails(t *testing.T) {
	for _, c := range []struct {
		name  string
		scope durable.Scope
		id    string
	}{{"WrongID", "tenant", "wf-2"}, {"WrongScope", "other", "wf-1"}} {
		t.Run(c.name, func(t *testing.T) {
			s, mock, m := newMock(t)
			m.ExpectGetWorkflow(c.scope, c.id).Returns(durable.Workflow{Status: "running"})
			_, err := s.GetWorkflow(t.Context(), "tenant", "wf-1")
			if err == nil || !strings.Contains(chain(err), "arguments do not match") {
				t.Errorf("error = %v (chain %q), want sqlmock's argument mismatch", err, chain(err))
			}
			if mock.ExpectationsWereMet() == nil {
				t.Error("the wrong expectation was met")
			}
		})
	}
	t.Run("WrongSchema", func(t *testing.T) {
		s, mock, _ := newMock(t)
		m := pgmock.New(mock, pgmock.Schema("other"), pgmock.MatchEqual())
		m.ExpectGetWorkflow("tenant", "wf-1").NotFound()
		_, err := s.GetWorkflow(t.Context(), "tenant", "wf-1")
		if err == nil || !strings.Contains(chain(err), "does not equal to expected") {
			t.Errorf("error = %v, want sqlmock's query mismatch", err)
		}
	})
}

// chain is the text of every error in err's chain.
func chain(err error) string {
	var b strings.Builder
	for e := err; e != nil; e = errors.Unwrap(e) {
		b.WriteString(e.Error())
		b.WriteString(" | ")
	}
	return b.String()
}

// TestFailsWith: a driver error on the first statement gives the durable
// error a server's would, the backend's retries included, and no
// expectation is left over.
func TestFailsWith(t *testing.T) {
	serialization := &pq.Error{Severity: "ERROR", Code: "40001", Message: "could not serialize access"}
	for _, c := range []struct {
		name   string
		expect func(m *pgmock.Mock, err error)
		run    func(ctx context.Context, s *durable.Store) error
		err    error
		want   durable.Code
	}{
		{"SerializationOnAWriteIsRetriedThenUnavailable", func(m *pgmock.Mock, err error) {
			m.ExpectAcquireLease(durable.LeaseRequest{Resource: "r", Owner: "o"}).FailsWith(err)
		},
			func(ctx context.Context, s *durable.Store) error {
				_, err := s.AcquireLease(ctx, durable.LeaseRequest{Resource: "r", Owner: "o"})
				return err
			}, serialization, contract.Unavailable},
		{"UniqueViolationIsAlreadyExists", func(m *pgmock.Mock, err error) { m.ExpectCreateWorkflow(durable.Workflow{ID: "w"}).FailsWith(err) },
			func(ctx context.Context, s *durable.Store) error {
				_, err := s.CreateWorkflow(ctx, durable.Workflow{ID: "w"})
				return err
			}, &pq.Error{Severity: "ERROR", Code: "23505"}, contract.AlreadyExists},
		{"BadConnOnAWriteIsOutcomeUnknown", func(m *pgmock.Mock, err error) { m.ExpectClaimKey(claim).FailsWith(err) },
			func(ctx context.Context, s *durable.Store) error {
				_, err := s.ClaimKey(ctx, claim)
				return err
			}, driver.ErrBadConn, contract.OutcomeUnknown},
		{"BadConnOnAReadIsUnavailable", func(m *pgmock.Mock, err error) { m.ExpectGetKey(ref1).FailsWith(err) },
			func(ctx context.Context, s *durable.Store) error {
				_, err := s.GetKey(ctx, ref1)
				return err
			}, driver.ErrBadConn, contract.Unavailable},
		{"DeadlockOnAReadIsRetriedThenUnavailable", func(m *pgmock.Mock, err error) {
			m.ExpectListWorkflows(durable.ListQuery{Scope: "s"}).FailsWith(err)
		},
			func(ctx context.Context, s *durable.Store) error {
				_, err := s.ListWorkflows(ctx, durable.ListQuery{Scope: "s"})
				return err
			}, &pq.Error{Severity: "ERROR", Code: "40P01"}, contract.Unavailable},
		{"BadConnOnAListIsUnavailable", func(m *pgmock.Mock, err error) {
			m.ExpectListLeases(durable.LeaseListQuery{Scope: "s", Held: true}).FailsWith(err)
		},
			func(ctx context.Context, s *durable.Store) error {
				_, err := s.ListLeases(ctx, durable.LeaseListQuery{Scope: "s", Held: true})
				return err
			}, driver.ErrBadConn, contract.Unavailable},
		{"DeadlockOnListKeysIsRetriedThenUnavailable", func(m *pgmock.Mock, err error) {
			m.ExpectListKeys(durable.KeyListQuery{Scope: "s", State: durable.KeyClaimed}).FailsWith(err)
		},
			func(ctx context.Context, s *durable.Store) error {
				_, err := s.ListKeys(ctx, durable.KeyListQuery{Scope: "s", State: durable.KeyClaimed})
				return err
			}, &pq.Error{Severity: "ERROR", Code: "40P01"}, contract.Unavailable},
		{"MissingTableIsSchemaMismatch", func(m *pgmock.Mock, err error) {
			m.ExpectUpdateWorkflow(durable.Update{ID: "w", ExpectStatus: "running", Status: "succeeded"}).FailsWith(err)
		},
			func(ctx context.Context, s *durable.Store) error {
				_, err := s.UpdateWorkflow(ctx, durable.Update{ID: "w", ExpectStatus: "running", Status: "succeeded"})
				return err
			}, &pq.Error{Severity: "ERROR", Code: "42P01"}, contract.SchemaMismatch},
		{"StatementTimeoutIsUnavailable", func(m *pgmock.Mock, err error) { m.ExpectCleanup(durable.CleanupRequest{}).FailsWith(err) },
			func(ctx context.Context, s *durable.Store) error {
				_, err := s.Cleanup(ctx, durable.CleanupRequest{})
				return err
			}, &pq.Error{Severity: "ERROR", Code: "57014"}, contract.Unavailable},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, mock, m := newMock(t)
			c.expect(m, c.err)
			err := c.run(t.Context(), s)
			if got := durable.CodeOf(err); got != c.want {
				t.Errorf("error = %v (code %v), want code %v", err, got, c.want)
			}
			if err := mock.ExpectationsWereMet(); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestRegexpMatcherAndNoClock: with sqlmock's default matcher and a
// backend without a clock (@now is NULL), Do runs, replays and refuses as
// with the exact matcher.
func TestRegexpMatcherAndNoClock(t *testing.T) {
	ctx := t.Context()
	db, mock, err := sqlmock.New()
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	opts := postgres.Options{Migrate: postgres.MigrateVerify}
	m := pgmock.New(mock, pgmock.Backend(opts), pgmock.Store(durable.WithKeyRetention(time.Hour), durable.WithDefaultTTLs(5*time.Second, 5*time.Second)))
	m.ExpectOpen().Current()
	s, err := postgres.New(ctx, db, opts, durable.WithKeyRetention(time.Hour), durable.WithDefaultTTLs(5*time.Second, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	req := durable.ClaimRequest{KeyRef: durable.KeyRef{Key: "k"}, Fingerprint: "fp"}
	ran := 0
	fn := func(context.Context) (durable.Outcome, error) { ran++; return out1, nil }

	m.ExpectClaimKey(req).New()
	want := m.ExpectCompleteKey(durable.Completion{KeyRef: req.KeyRef, Outcome: out1}).Stores()
	res, err := s.Do(ctx, req, durable.DoOptions{}, fn)
	if err != nil || res.Replayed || !reflect.DeepEqual(res.Record, want) || time.Until(want.ExpiresAt) < 59*time.Minute {
		t.Errorf("Do = %+v, %v; want record %+v", res, err, want)
	}
	m.ExpectClaimKey(req).Completed(out1)
	if res, err := s.Do(ctx, req, durable.DoOptions{}, fn); err != nil || !res.Replayed {
		t.Errorf("replayed Do = %+v, %v", res, err)
	}
	m.ExpectClaimKey(req).InFlight()
	if _, err := s.Do(ctx, req, durable.DoOptions{}, fn); !errors.Is(err, durable.ErrInFlight) {
		t.Errorf("Do on a key in flight = %v", err)
	}
	if ran != 1 {
		t.Errorf("fn ran %d times", ran)
	}
	if err := mock.ExpectationsWereMet(); err != nil {
		t.Error(err)
	}
}

// TestMisusePanics: what a test cannot mean panics with a message.
func TestMisusePanics(t *testing.T) {
	for name, f := range map[string]func(m *pgmock.Mock){
		"InvalidRequest":  func(m *pgmock.Mock) { m.ExpectClaimKey(durable.ClaimRequest{KeyRef: durable.KeyRef{Key: "k"}}) }, // no fingerprint
		"NoClaimForToken": func(m *pgmock.Mock) { m.ExpectCompleteKey(durable.Completion{KeyRef: durable.KeyRef{Key: "nope"}}) },
		"NoFence": func(m *pgmock.Mock) {
			m.ExpectUpdateWorkflow(durable.Update{ID: "w", ExpectStatus: "running", Status: "done"}).Fenced()
		},
		"ApplyToConflict": func(m *pgmock.Mock) {
			m.ExpectUpdateWorkflow(durable.Update{ID: "w", ExpectStatus: "running", ExpectRevision: 2, Status: "done"}).Applies(durable.Workflow{Revision: 3})
		},
		"NilMock": func(m *pgmock.Mock) { pgmock.New(sqlmock.Sqlmock(nil)) },
		"BadSchema": func(m *pgmock.Mock) {
			db, mock, _ := sqlmock.New()
			defer db.Close()
			pgmock.New(mock, pgmock.Schema("Bad-Schema"))
		},
		"OutcomeTwice": func(m *pgmock.Mock) { e := m.ExpectGetLease("", "r"); e.NotFound(); e.NotFound() },
		"MoreThanLimit": func(m *pgmock.Mock) {
			m.ExpectCountCleanup(durable.CleanupRequest{Limit: 5}).Counts(durable.CleanupResult{Workflows: 1, More: true})
		},
		"ListKeysOutOfOrder": func(m *pgmock.Mock) {
			m.ExpectListKeys(durable.KeyListQuery{}).Returns(durable.KeyRecord{KeyRef: durable.KeyRef{Key: "b"}}, durable.KeyRecord{KeyRef: durable.KeyRef{Key: "a"}})
		},
		"ListKeysBeforeCursor": func(m *pgmock.Mock) {
			m.ExpectListKeys(durable.KeyListQuery{After: "b"}).Returns(durable.KeyRecord{KeyRef: durable.KeyRef{Key: "b"}})
		},
		"ListKeysOtherState": func(m *pgmock.Mock) {
			m.ExpectListKeys(durable.KeyListQuery{State: durable.KeyClaimed}).Returns(durable.KeyRecord{KeyRef: durable.KeyRef{Key: "a"}, State: durable.KeyCompleted})
		},
		"ListLeasesOverLimit": func(m *pgmock.Mock) {
			m.ExpectListLeases(durable.LeaseListQuery{Limit: 1}).Returns(durable.Lease{Resource: "a"}, durable.Lease{Resource: "b"})
		},
		"AutoWouldMigrate": func(m *pgmock.Mock) {
			db, mock, _ := sqlmock.New()
			defer db.Close()
			pgmock.New(mock).ExpectOpen().Version(0, false)
		},
	} {
		t.Run(name, func(t *testing.T) {
			_, _, m := newMock(t)
			defer func() {
				r := recover()
				if s, ok := r.(string); !ok || !strings.HasPrefix(s, "pgmock: ") || strings.Contains(s, "has no outcome") {
					t.Errorf("recovered %v, want a pgmock panic", r)
				}
			}()
			f(m)
		})
	}
	t.Run("NoOutcome", func(t *testing.T) {
		_, _, m := newMock(t)
		m.ExpectGetLease("", "r")
		defer func() {
			if r, _ := recover().(string); !strings.Contains(r, "ExpectGetLease has no outcome") {
				t.Errorf("recovered %q", r)
			}
		}()
		m.ExpectGetLease("", "r")
	})
}

// TestListReturnsWhatTheStoreReturns: ListKeys' and ListLeases' Returns
// fill the defaults (a completed key without an outcome gets an empty one,
// zero times the server's) and return exactly what the Store returns.
func TestListReturnsWhatTheStoreReturns(t *testing.T) {
	s, mock, m := newMock(t)
	ctx := t.Context()
	want := m.ExpectListKeys(durable.KeyListQuery{Scope: "s", After: "A"}).Returns(
		durable.KeyRecord{KeyRef: durable.KeyRef{Key: "B"}, State: durable.KeyCompleted, ExpiresAt: clockBase.Add(time.Hour)},
		durable.KeyRecord{KeyRef: durable.KeyRef{Key: "b"}, Fingerprint: "fp", LeaseUntil: clockBase.Add(time.Minute)})
	got, err := s.ListKeys(ctx, durable.KeyListQuery{Scope: "s", After: "A"})
	if err != nil || !reflect.DeepEqual(got, want) || len(got) != 2 || got[0].Outcome == nil || got[1].Outcome != nil {
		t.Errorf("ListKeys = %+v, %v\nwant %+v", got, err, want)
	}
	wantL := m.ExpectListLeases(durable.LeaseListQuery{Scope: "s", Held: true, Limit: 2}).Returns(
		durable.Lease{Resource: "r", Owner: "o", Token: 3, ExpiresAt: clockBase.Add(time.Minute)})
	gotL, err := s.ListLeases(ctx, durable.LeaseListQuery{Scope: "s", Held: true, Limit: 2})
	if err != nil || !reflect.DeepEqual(gotL, wantL) || len(gotL) != 1 || gotL[0].Scope != "s" {
		t.Errorf("ListLeases = %+v, %v\nwant %+v", gotL, err, wantL)
	}
	m.ExpectListLeases(durable.LeaseListQuery{Scope: "s"}).Returns()
	if gotL, err := s.ListLeases(ctx, durable.LeaseListQuery{Scope: "s"}); err != nil || gotL != nil {
		t.Errorf("ListLeases (empty) = %+v, %v", gotL, err)
	}
	if err := mock.ExpectationsWereMet(); err != nil {
		t.Error(err)
	}
}

// TestCompleteKeyTxMatchesPostgres: CompleteKeyTx inside the backend's
// BeginTx, stored and committed, or fenced (a stale token) and rolled
// back, returns the same on a real PostgreSQL and on pgmock's
// expectations.
func TestCompleteKeyTxMatchesPostgres(t *testing.T) {
	for _, stale := range []bool{false, true} {
		t.Run(fmt.Sprint("stale=", stale), func(t *testing.T) {
			ctx := t.Context()
			p := newPair(t)
			c := durable.Completion{KeyRef: ref1, Outcome: out1, Retain: time.Hour, Tombstone: 2 * time.Hour}
			p.m.ExpectClaimKey(claim).New()
			p.m.ExpectBeginTx()
			if stale {
				c.Token = "stale-token"
				p.m.ExpectCompleteKeyTx(c).Fenced()
				p.sqlmock.ExpectRollback()
			} else {
				p.m.ExpectCompleteKeyTx(c).Stores()
				p.sqlmock.ExpectCommit()
			}
			run := func(s *durable.Store, b *postgres.Backend) result {
				cl, err := s.ClaimKey(ctx, claim)
				if err != nil {
					t.Fatal(err)
				}
				tx, err := b.BeginTx(ctx)
				if err != nil {
					t.Fatal(err)
				}
				cc := c
				if !stale {
					cc.Token = cl.Token
				}
				rec, err := b.CompleteKeyTx(ctx, tx, cc)
				if err != nil {
					_ = tx.Rollback(ctx)
					return result{v: rec, err: err}
				}
				return result{v: rec, err: tx.Commit(ctx)}
			}
			same(t, run(p.real, p.realB), run(p.mocked, p.mockB))
			if err := p.sqlmock.ExpectationsWereMet(); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestContendedClaimMatchesPostgres: a claim decided by ClaimKey's locked
// form (after its optimistic attempts lost) returns what the optimistic
// form returns on a real PostgreSQL for each outcome.
func TestContendedClaimMatchesPostgres(t *testing.T) {
	for _, o := range []string{"New", "InFlight", "Completed", "KeyConflict", "Reclaimed"} {
		t.Run(o, func(t *testing.T) {
			ctx := t.Context()
			p := newPair(t)
			req := claim
			req.TTL = 10 * time.Second
			switch o {
			case "InFlight", "Completed", "KeyConflict", "Reclaimed":
				cl := must[durable.Claim](t)(p.real.ClaimKey(ctx, req))
				if o == "Completed" {
					must[durable.KeyRecord](t)(p.real.CompleteKey(ctx, durable.Completion{KeyRef: ref1, Token: cl.Token, Outcome: out1}))
				}
				if o == "Reclaimed" {
					p.clock.advance(time.Minute)
				}
			}
			if o == "KeyConflict" {
				req.Fingerprint = "fp-other"
			}
			var real result
			real.v, real.err = p.real.ClaimKey(ctx, req)
			e := p.m.ExpectClaimKey(req).Contended()
			switch o {
			case "New":
				e.New()
			case "InFlight":
				e.InFlight()
			case "Completed":
				e.Completed(out1)
			case "KeyConflict":
				e.KeyConflict()
			case "Reclaimed":
				e.Reclaimed()
			}
			var mocked result
			mocked.v, mocked.err = p.mocked.ClaimKey(ctx, req)
			if o == "Completed" || o == "InFlight" || o == "Reclaimed" {
				// The mock's records are its own (times, the fingerprint
				// the expectation knows); the kind and the error decide.
				rc, mc := real.v.(durable.Claim), mocked.v.(durable.Claim)
				if rc.Kind != mc.Kind || (real.err == nil) != (mocked.err == nil) {
					t.Errorf("real %v, %v; mocked %v, %v", rc.Kind, real.err, mc.Kind, mocked.err)
				}
			} else {
				same(t, real, mocked)
			}
			if err := p.sqlmock.ExpectationsWereMet(); err != nil {
				t.Error(err)
			}
		})
	}
}
