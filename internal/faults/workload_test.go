package faults

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/backends/postgres"
	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/faultmodel"
)

// Workload parameters.
const (
	nClients      = 16
	nStores       = 4 // clients share stores, as goroutines of a few processes would
	nLeaseParts   = 3
	nSemParts     = 2 // fenced semaphores, of 2 and 3 permits (semPermits)
	nWfParts      = 2
	nKeyParts     = 4
	nDoKeys       = 3
	leaseTTL      = 2 * time.Minute // nothing expires within a history
	claimTTL      = 2 * time.Minute
	doTTL         = 3 * time.Second // Do's claims expire and are reclaimed under faults
	doMaxWait     = 1500 * time.Millisecond
	backstop      = 60 * time.Second // no call may hang a test forever
	hungThreshold = 30 * time.Second // a call without deadline that takes this long is hung
	scope         = durable.Scope("faults")
)

// semPermits is the number of permits of semaphore partition i: 2 or 3,
// so that permit N+1, which no one may ever hold, is still within the
// model's faultmodel.MaxModelPermits (the clients read it).
func semPermits(i int) int { return 2 + i%2 }

// semKind is the model the semaphore partitions are checked against: the
// native semantics (the lowest free permit, atomically), since the
// Postgres backend implements contract.PermitAcquirer (checked at compile
// time below, so that losing it cannot silently weaken the check).
func semKind() faultmodel.PartKind { return faultmodel.PartSemaphore }

var _ contract.PermitAcquirer = (*postgres.Backend)(nil)

// hist is one short history: fresh partitions, a recorder, and the
// knowledge its clients gather.
type hist struct {
	n      int
	prefix string
	leases []string // lease resources; each has a workflow of the same id
	sems   []string // semaphore resources; each has a workflow of the same id
	// permits is each semaphore's number of permits (PermitRequest.Permits)
	permits map[string]int
	wfs     []string // workflows created during the history
	keys    []string
	dos     []string
	rec     *faultmodel.Recorder
	end     time.Time
	runs    *doRuns
}

func (h *hist) partKind(part string) (faultmodel.PartKind, bool) {
	for _, r := range h.leases {
		if r == part {
			return faultmodel.PartLease, true
		}
	}
	if h.permits[part] > 0 {
		return semKind(), true
	}
	for _, w := range h.wfs {
		if w == part {
			return faultmodel.PartWorkflow, true
		}
	}
	for _, k := range h.keys {
		if k == part {
			return faultmodel.PartKey, true
		}
	}
	return 0, false
}

// where returns the partition that calls on the lease of resource r are
// recorded in, and the permit r is (0: r is a plain lease's resource).
func (h *hist) where(r string) (part string, permit int) {
	if base, n, ok := contract.SplitPermit(r); ok && h.permits[base] > 0 {
		return base, n
	}
	return r, 0
}

// lease is a grant a client knows about.
type lease struct {
	owner string
	token int64
}

// client is one of the concurrent callers.
type client struct {
	id  int
	env *env
	s   *durable.Store
	rng *rand.Rand
	h   *hist

	held   map[string]lease   // lease or permit resource → grant I hold
	stale  map[string][]lease // lease or permit resource → grants I held once
	rev    map[string]int64   // workflow → last revision I saw
	exists map[string]bool    // workflow → I know it exists
	claims map[string]string  // key → claim token I hold
}

func (c *client) reset(h *hist) {
	c.h = h
	c.held = map[string]lease{}
	c.stale = map[string][]lease{}
	c.rev = map[string]int64{}
	c.exists = map[string]bool{}
	c.claims = map[string]string{}
}

func (c *client) pick(xs []string) string { return xs[c.rng.IntN(len(xs))] }

func (c *client) ref(tag string) string {
	return fmt.Sprintf("%s-%s%d", c.h.prefix, tag, c.env.seq.Add(1))
}

// callCtx returns the context of one call, as the scenario's faults want
// it: a deadline, a cancellation at a random moment, or neither (and then
// only the backstop).
func (c *client) callCtx() (context.Context, func(), time.Duration, time.Duration) {
	sc := c.env.sc
	ctx, cancel := context.WithTimeout(context.Background(), backstop)
	var dl, cancelAfter time.Duration
	var timer *time.Timer
	p := c.rng.Float64()
	switch {
	case sc.deadlineMax > 0 && (sc.deadlineP >= 1 || p < sc.deadlineP):
		dl = c.logUniform(sc.deadlineMin, sc.deadlineMax)
		var cancel2 context.CancelFunc
		ctx, cancel2 = context.WithTimeout(ctx, dl)
		prev := cancel
		cancel = func() { cancel2(); prev() }
		c.env.stats.fault("deadline")
	case p < sc.deadlineP+sc.cancelP:
		cancelAfter = c.logUniform(sc.cancelMin, sc.cancelMax)
		var cancel2 context.CancelFunc
		ctx, cancel2 = context.WithCancel(ctx)
		timer = time.AfterFunc(cancelAfter, cancel2)
		if cancelAfter == 0 {
			cancelAfter = 1 // recorded as "cancelled"
		}
		prev := cancel
		cancel = func() { timer.Stop(); cancel2(); prev() }
		c.env.stats.fault("cancel")
	}
	return ctx, cancel, dl, cancelAfter
}

// logUniform returns a random duration in [lo, hi] whose logarithm is
// uniform.
func (c *client) logUniform(lo, hi time.Duration) time.Duration {
	lo = max(lo, time.Microsecond)
	if hi <= lo {
		return lo
	}
	return time.Duration(float64(lo) * math.Pow(float64(hi)/float64(lo), c.rng.Float64()))
}

// call runs f as one recorded operation and returns it.
func (c *client) call(part string, in faultmodel.Input, f func(ctx context.Context) (faultmodel.Output, error)) *faultmodel.Op {
	ctx, cancel, dl, cancelAfter := c.callCtx()
	e := c.env
	start := time.Since(e.base)
	out, err := f(ctx)
	end := time.Since(e.base)
	ctxErr := ctx.Err() != nil
	cancel()
	o := &faultmodel.Op{Client: c.id, Part: part, In: in, Start: start, End: end, Deadline: dl, CtxErr: ctxErr, Err: err}
	if cancelAfter > 0 {
		o.Cancel = cancelAfter
	}
	if err == nil {
		out.O = faultmodel.OK
		o.Out = out
	} else {
		cls, why := faultmodel.Classify(in.Kind, err, ctxErr)
		cls.Rev = max(cls.Rev, 0)
		o.Out = cls
		if why != "" {
			e.violate(c.h, "error-code", why, o)
		}
		e.stats.sqlState(err)
	}
	c.h.rec.Add(o)
	e.stats.op(o)
	e.checkErrorText(c.h, o)
	e.checkTimeBound(c.h, o)
	return o
}

// run is a client's loop for one history.
func (c *client) run(h *hist) {
	c.reset(h)
	for time.Now().Before(h.end) {
		p := c.rng.Float64()
		switch {
		case len(c.held) > 0 && p < 0.35:
			for r := range c.held {
				c.leaseAction(r)
				break
			}
		case p < 0.45:
			c.leaseAction(c.pick(h.leases))
		case p < 0.60:
			c.semAction(c.pick(h.sems))
		case p < 0.72:
			c.workflowAction(c.pick(h.wfs))
		case p < 0.90:
			c.keyAction(c.pick(h.keys))
		default:
			c.doAction(c.pick(h.dos))
		}
		if d := c.env.sc.think; d > 0 {
			time.Sleep(time.Duration(c.rng.Int64N(int64(d))))
		}
	}
}

// --- leases and fenced writes ---

// leaseAction acts on the lease of r: a plain lease's resource, or a
// permit's resource that the client holds.
func (c *client) leaseAction(r string) {
	if l, ok := c.held[r]; ok {
		p := c.rng.Float64()
		switch {
		case p < 0.55:
			c.fencedUpdate(r, l)
		case p < 0.75:
			c.renew(r, l)
		case p < 0.95:
			c.release(r, l)
		default:
			part, _ := c.h.where(r)
			c.getWorkflow(part)
		}
		return
	}
	p := c.rng.Float64()
	switch {
	case p < 0.45:
		c.acquire(r)
	case p < 0.60:
		c.getLease(r, "")
	case p < 0.75:
		c.update(r)
	case p < 0.85:
		// A stale or forged fence: must be rejected unless it is the
		// current grant.
		var l lease
		if old := c.stale[r]; len(old) > 0 {
			l = old[c.rng.IntN(len(old))]
		} else {
			l = lease{owner: c.ref("forged"), token: 1 + c.rng.Int64N(1<<20)}
		}
		c.fencedUpdate(r, l)
	default:
		c.getWorkflow(r)
	}
}

func (c *client) acquire(r string) {
	owner := c.ref("o")
	o := c.call(r, faultmodel.Input{Kind: faultmodel.Acquire, Owner: owner, Ref: owner}, func(ctx context.Context) (faultmodel.Output, error) {
		l, err := c.s.AcquireLease(ctx, durable.LeaseRequest{Scope: scope, Resource: r, Owner: owner, TTL: leaseTTL})
		return faultmodel.Output{Owner: l.Owner, Token: l.Token, Exp: l.ExpiresAt.UnixMicro()}, err
	})
	switch o.Out.O {
	case faultmodel.OK:
		c.env.grant(r, o, o.Out.Token)
		c.held[r] = lease{owner, o.Out.Token}
	case faultmodel.Unknown, faultmodel.Bad:
		// The retry that tells what happened: read the lease.
		for range 3 {
			if c.getLease(r, owner) {
				return
			}
		}
	}
}

// getLease reads the lease of r (a plain lease's or a permit's resource);
// when it is held by owner (a grant whose reply was lost) the client adopts
// it. It reports whether the read succeeded.
func (c *client) getLease(r, owner string) bool {
	part, n := c.h.where(r)
	o := c.call(part, faultmodel.Input{Kind: faultmodel.GetLease, Permit: n}, func(ctx context.Context) (faultmodel.Output, error) {
		l, err := c.s.GetLease(ctx, scope, r)
		return faultmodel.Output{Owner: l.Owner, Token: l.Token}, err
	})
	if o.Out.O == faultmodel.OK {
		c.env.grant(r, o, o.Out.Token)
		if owner != "" && o.Out.Owner == owner {
			c.held[r] = lease{owner, o.Out.Token}
		}
	}
	return o.Out.O == faultmodel.OK || o.Out.O == faultmodel.Fail
}

func (c *client) drop(r string, l lease) {
	delete(c.held, r)
	c.stale[r] = append(c.stale[r], l)
}

func (c *client) renew(r string, l lease) {
	part, n := c.h.where(r)
	o := c.call(part, faultmodel.Input{Kind: faultmodel.Renew, Permit: n, Owner: l.owner, Token: l.token}, func(ctx context.Context) (faultmodel.Output, error) {
		got, err := c.s.RenewLease(ctx, durable.Lease{Scope: scope, Resource: r, Owner: l.owner, Token: l.token}, leaseTTL)
		return faultmodel.Output{Owner: got.Owner, Token: got.Token, Exp: got.ExpiresAt.UnixMicro()}, err
	})
	if o.Out.O == faultmodel.Fail {
		c.drop(r, l)
	}
}

func (c *client) release(r string, l lease) {
	part, n := c.h.where(r)
	for range 3 {
		o := c.call(part, faultmodel.Input{Kind: faultmodel.Release, Permit: n, Owner: l.owner, Token: l.token}, func(ctx context.Context) (faultmodel.Output, error) {
			ok, err := c.s.ReleaseLease(ctx, durable.Lease{Scope: scope, Resource: r, Owner: l.owner, Token: l.token})
			return faultmodel.Output{Bool: ok}, err
		})
		if o.Out.O == faultmodel.OK || o.Out.O == faultmodel.Fail {
			c.drop(r, l)
			return
		}
		// Not applied or unknown: retry (a retry after an applied release
		// reports false).
	}
}

// --- fenced semaphores ---

// semAction acts on semaphore s without a particular permit of it (a
// client may hold several of its permits, each its own grant).
func (c *client) semAction(s string) {
	n := c.h.permits[s]
	p := c.rng.Float64()
	switch {
	case p < 0.45:
		c.acquirePermit(s)
	case p < 0.60:
		// Permit N+1 too: no one may ever hold it.
		c.getLease(contract.PermitResource(s, 1+c.rng.IntN(n+1)), "")
	case p < 0.70:
		c.update(s)
	case p < 0.85:
		// A stale, forged or other permit's fence: must be rejected
		// unless it is the permit's current grant.
		r := contract.PermitResource(s, 1+c.rng.IntN(n))
		var fences []lease
		for m := 1; m <= n; m++ {
			pr := contract.PermitResource(s, m)
			fences = append(fences, c.stale[pr]...)
			if l, ok := c.held[pr]; ok && pr != r {
				fences = append(fences, l) // held, but of another permit
			}
		}
		l := lease{owner: c.ref("forged"), token: 1 + c.rng.Int64N(1<<20)}
		if len(fences) > 0 && c.rng.Float64() < 0.8 {
			l = fences[c.rng.IntN(len(fences))]
		}
		c.fencedUpdate(r, l)
	default:
		c.getWorkflow(s)
	}
}

// acquirePermit asks for one of s's permits; after a lost reply it reads
// every permit back and adopts the one granted to it, if any.
func (c *client) acquirePermit(s string) {
	owner := c.ref("o")
	n := c.h.permits[s]
	in := faultmodel.Input{Kind: faultmodel.AcquirePermit, Owner: owner, Ref: owner, Permits: n}
	o := c.call(s, in, func(ctx context.Context) (faultmodel.Output, error) {
		l, err := c.s.AcquirePermit(ctx, durable.PermitRequest{Scope: scope, Resource: s, Owner: owner, TTL: leaseTTL, Permits: n})
		out := faultmodel.Output{Owner: l.Owner, Token: l.Token, Exp: l.ExpiresAt.UnixMicro(), Permit: -1}
		if base, m, ok := contract.SplitPermit(l.Resource); ok && base == s {
			out.Permit = m
		}
		return out, err
	})
	switch o.Out.O {
	case faultmodel.OK:
		c.env.stats.add("permits.acq", 1)
		if o.Out.Permit < 1 {
			return // not a permit of s: the model flags it
		}
		r := contract.PermitResource(s, o.Out.Permit)
		c.env.grant(r, o, o.Out.Token)
		c.held[r] = lease{owner, o.Out.Token}
	case faultmodel.Fail:
		c.env.stats.add("permits.busy", 1)
	case faultmodel.NotApplied:
		c.env.stats.add("permits.not-applied", 1)
	case faultmodel.Unknown, faultmodel.Bad:
		c.env.stats.add("permits.unknown", 1)
		// The retry that tells what happened: read every permit.
		for m := 1; m <= n; m++ {
			r := contract.PermitResource(s, m)
			for range 3 {
				if c.getLease(r, owner) {
					break
				}
			}
			if l, ok := c.held[r]; ok && l.owner == owner {
				c.env.stats.add("permits.adopted", 1)
				return
			}
		}
	}
}

func (c *client) expectRev(w string) int64 {
	if c.rng.Float64() < 0.25 {
		return 0 // any revision
	}
	if r, ok := c.rev[w]; ok {
		return r
	}
	return 1
}

func (c *client) noteRev(w string, o *faultmodel.Op) {
	switch {
	case o.Out.O == faultmodel.OK:
		c.rev[w] = o.Out.Rev
		c.exists[w] = true
	case o.Out.O == faultmodel.Fail && o.Out.Code == contract.Conflict:
		c.rev[w] = o.Out.Rev
	}
}

// fencedUpdate writes the workflow of r's partition with the fence (r,
// l): valid only while l holds the lease of r.
func (c *client) fencedUpdate(r string, l lease) {
	ref := c.ref("u")
	part, n := c.h.where(r)
	in := faultmodel.Input{Kind: faultmodel.FencedUpdate, Permit: n, Owner: l.owner, Token: l.token, ExpectRev: c.expectRev(part), Ref: ref}
	o := c.call(part, in, func(ctx context.Context) (faultmodel.Output, error) {
		w, err := c.s.UpdateWorkflow(ctx, durable.Update{
			Scope: scope, ID: part, ExpectStatus: durable.StatusRunning, ExpectRevision: in.ExpectRev,
			Fence:  &durable.Fence{Resource: r, Owner: l.owner, Token: l.token},
			Status: durable.StatusRunning, RequestID: ref, Snapshot: []byte(ref),
		})
		return faultmodel.Output{Rev: w.Revision, Ref: w.RequestID}, err
	})
	c.noteRev(part, o)
	if o.Out.O == faultmodel.Fail && o.Out.Code == contract.Fenced {
		if h, ok := c.held[r]; ok && h == l {
			c.drop(r, l)
		}
	}
}

func (c *client) update(w string) {
	ref := c.ref("u")
	in := faultmodel.Input{Kind: faultmodel.Update, ExpectRev: c.expectRev(w), Ref: ref}
	o := c.call(w, in, func(ctx context.Context) (faultmodel.Output, error) {
		got, err := c.s.UpdateWorkflow(ctx, durable.Update{
			Scope: scope, ID: w, ExpectStatus: durable.StatusRunning, ExpectRevision: in.ExpectRev,
			Status: durable.StatusRunning, RequestID: ref, Snapshot: []byte(ref),
		})
		return faultmodel.Output{Rev: got.Revision, Ref: got.RequestID}, err
	})
	c.noteRev(w, o)
}

func (c *client) getWorkflow(w string) *faultmodel.Op {
	o := c.call(w, faultmodel.Input{Kind: faultmodel.GetWorkflow}, func(ctx context.Context) (faultmodel.Output, error) {
		got, err := c.s.GetWorkflow(ctx, scope, w)
		return faultmodel.Output{Rev: got.Revision, Ref: got.RequestID}, err
	})
	c.noteRev(w, o)
	return o
}

// --- workflows: create and CAS ---

func (c *client) workflowAction(w string) {
	p := c.rng.Float64()
	switch {
	case !c.exists[w] && p < 0.6:
		ref := c.ref("c")
		o := c.call(w, faultmodel.Input{Kind: faultmodel.Create, Ref: ref}, func(ctx context.Context) (faultmodel.Output, error) {
			got, err := c.s.CreateWorkflow(ctx, durable.Workflow{
				Scope: scope, ID: w, Status: durable.StatusRunning, RequestID: ref, Snapshot: []byte(ref),
			})
			return faultmodel.Output{Rev: got.Revision, Ref: got.RequestID}, err
		})
		switch {
		case o.Out.O == faultmodel.OK:
			c.exists[w], c.rev[w] = true, 1
		case o.Out.Code == contract.AlreadyExists:
			c.exists[w] = true
		}
	case p < 0.8:
		c.update(w)
	default:
		c.getWorkflow(w)
	}
}

// --- idempotency keys ---

func (c *client) keyAction(k string) {
	ref := durable.KeyRef{Scope: scope, Key: k}
	if tok, ok := c.claims[k]; ok {
		p := c.rng.Float64()
		switch {
		case p < 0.6:
			// Complete, retrying what may not have been stored.
			for range 3 {
				cref := c.ref("k")
				o := c.call(k, faultmodel.Input{Kind: faultmodel.Complete, KeyToken: tok, Ref: cref}, func(ctx context.Context) (faultmodel.Output, error) {
					rec, err := c.s.CompleteKey(ctx, durable.Completion{KeyRef: ref, Token: tok,
						Outcome: durable.Outcome{Code: 200, Ref: cref, Body: []byte(cref)}, Retain: time.Hour})
					return keyOutput(rec), err
				})
				if o.Out.O == faultmodel.OK || o.Out.O == faultmodel.Fail {
					delete(c.claims, k)
					return
				}
			}
		case p < 0.8:
			o := c.call(k, faultmodel.Input{Kind: faultmodel.RenewKey, KeyToken: tok}, func(ctx context.Context) (faultmodel.Output, error) {
				rec, err := c.s.RenewKey(ctx, ref, tok, claimTTL)
				return keyOutput(rec), err
			})
			if o.Out.O == faultmodel.Fail {
				delete(c.claims, k)
			}
		default:
			for range 3 {
				o := c.call(k, faultmodel.Input{Kind: faultmodel.ReleaseKey, KeyToken: tok}, func(ctx context.Context) (faultmodel.Output, error) {
					ok, err := c.s.ReleaseKey(ctx, ref, tok)
					return faultmodel.Output{Bool: ok}, err
				})
				if o.Out.O == faultmodel.OK || o.Out.O == faultmodel.Fail {
					delete(c.claims, k)
					return
				}
			}
		}
		return
	}
	if c.rng.Float64() < 0.3 {
		c.call(k, faultmodel.Input{Kind: faultmodel.GetKey}, func(ctx context.Context) (faultmodel.Output, error) {
			rec, err := c.s.GetKey(ctx, ref)
			return keyOutput(rec), err
		})
		return
	}
	fp := "fpA"
	if c.rng.Float64() < 0.1 {
		fp = "fpB"
	}
	for range 3 {
		o := c.call(k, faultmodel.Input{Kind: faultmodel.Claim, Fp: fp}, func(ctx context.Context) (faultmodel.Output, error) {
			cl, err := c.s.ClaimKey(ctx, durable.ClaimRequest{KeyRef: ref, Fingerprint: fp, TTL: claimTTL})
			out := keyOutput(cl.Record)
			out.Claim, out.KToken = cl.Kind, cl.Token
			return out, err
		})
		if o.Out.O == faultmodel.OK && o.Out.Claim.Owned() {
			c.claims[k] = o.Out.KToken
		}
		if o.Out.O != faultmodel.Unknown && o.Out.O != faultmodel.Bad {
			return
		}
		// The retry tells: InFlight if the lost claim applied.
	}
}

func keyOutput(rec durable.KeyRecord) faultmodel.Output {
	out := faultmodel.Output{KState: rec.State, Fp: rec.Fingerprint}
	if rec.Outcome != nil {
		out.Ref = rec.Outcome.Ref
	}
	return out
}

// --- Store.Do ---

// handlerError is the error the Do handler returns itself.
type handlerError struct{ why string }

func (e *handlerError) Error() string { return "handler: " + e.why }

// doRun is one run of a Do handler.
type doRun struct {
	key, id    string
	client     int
	call       int // the Do call that ran it
	start, end time.Duration
	ended      bool
	ok         bool // returned an outcome
}

// doCall is one Store.Do call.
type doCall struct {
	id       int
	key      string
	client   int
	runs     []string
	op       *faultmodel.Op
	replayed bool
	ref      string
}

// doRuns records handler runs and checks, as they happen, that no two runs
// of one key overlap.
type doRuns struct {
	mu     sync.Mutex
	active map[string]*doRun // key → running
	runs   map[string]*doRun // id → run
	byKey  map[string][]*doRun
	calls  []*doCall
	seq    atomic.Int64
}

func newDoRuns() *doRuns {
	return &doRuns{active: map[string]*doRun{}, runs: map[string]*doRun{}, byKey: map[string][]*doRun{}}
}

func (c *client) doAction(k string) {
	e := c.env
	dr := c.h.runs
	call := &doCall{id: int(dr.seq.Add(1)), key: k, client: c.id}
	fn := func(ctx context.Context) (durable.Outcome, error) {
		run := &doRun{key: k, id: fmt.Sprintf("%s-run%d", k, e.seq.Add(1)), client: c.id, call: call.id, start: time.Since(e.base)}
		dr.mu.Lock()
		if other := dr.active[k]; other != nil {
			e.violateDo(c.h, "do-overlap", fmt.Sprintf("Do ran the handler for key %s (run %s, client %d) while run %s (client %d, started %v) had not returned",
				k, run.id, c.id, other.id, other.client, other.start), nil)
		}
		dr.active[k] = run
		dr.runs[run.id] = run
		dr.byKey[k] = append(dr.byKey[k], run)
		call.runs = append(call.runs, run.id)
		dr.mu.Unlock()
		finish := func(ok bool) {
			dr.mu.Lock()
			run.end, run.ended, run.ok = time.Since(e.base), true, ok
			if dr.active[k] == run {
				delete(dr.active, k)
			}
			dr.mu.Unlock()
		}
		d := time.Duration(c.rng.Int64N(int64(300 * time.Millisecond)))
		if c.rng.Float64() < 0.15 {
			d = time.Second + time.Duration(c.rng.Int64N(int64(1500*time.Millisecond))) // outlives a renewal period
		}
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			finish(false)
			return durable.Outcome{}, &handlerError{"context ended: " + fmt.Sprint(context.Cause(ctx))}
		}
		if c.rng.Float64() < 0.1 {
			finish(false)
			return durable.Outcome{}, &handlerError{"injected failure"}
		}
		finish(true)
		return durable.Outcome{Code: 200, Ref: run.id, Body: []byte(run.id)}, nil
	}
	o := c.call("do:"+k, faultmodel.Input{Kind: faultmodel.Do, Ref: fmt.Sprintf("do%d", call.id)}, func(ctx context.Context) (faultmodel.Output, error) {
		res, err := c.s.Do(ctx, durable.ClaimRequest{KeyRef: durable.KeyRef{Scope: scope, Key: k}, Fingerprint: "do", TTL: doTTL},
			durable.DoOptions{MaxWait: doMaxWait}, fn)
		var he *handlerError
		if errors.As(err, &he) {
			// The handler's own error, passed through (or wrapped in
			// Fenced when the claim was lost): not a store error.
			if contract.CodeOf(err) == contract.Fenced {
				return faultmodel.Output{}, &contract.Error{Code: contract.Fenced, Op: "Do", Msg: "handler error after claim loss"}
			}
			return faultmodel.Output{Ref: "handler-error"}, nil
		}
		return faultmodel.Output{Ref: res.Outcome.Ref, Bool: res.Replayed}, err
	})
	call.op = o
	if o.Out.O == faultmodel.OK && o.Out.Ref != "handler-error" {
		call.ref, call.replayed = o.Out.Ref, o.Out.Bool
	}
	dr.mu.Lock()
	dr.calls = append(dr.calls, call)
	dr.mu.Unlock()
}

// finalReads reads every partition once the clients have stopped, retrying
// until the read is definite, so that the history ends with the state the
// model must explain.
func (c *client) finalReads(h *hist) {
	c.reset(h)
	for _, r := range h.leases {
		c.retryRead(func() bool { return c.getLease(r, "") })
		c.retryRead(func() bool { o := c.getWorkflow(r); return o.Out.O == faultmodel.OK || o.Out.O == faultmodel.Fail })
	}
	for _, s := range h.sems {
		for m := 1; m <= h.permits[s]; m++ {
			c.retryRead(func() bool { return c.getLease(contract.PermitResource(s, m), "") })
		}
		c.retryRead(func() bool { o := c.getWorkflow(s); return o.Out.O == faultmodel.OK || o.Out.O == faultmodel.Fail })
	}
	for _, w := range h.wfs {
		c.retryRead(func() bool { o := c.getWorkflow(w); return o.Out.O == faultmodel.OK || o.Out.O == faultmodel.Fail })
	}
	for _, k := range h.keys {
		c.retryRead(func() bool {
			o := c.call(k, faultmodel.Input{Kind: faultmodel.GetKey}, func(ctx context.Context) (faultmodel.Output, error) {
				rec, err := c.s.GetKey(ctx, durable.KeyRef{Scope: scope, Key: k})
				return keyOutput(rec), err
			})
			return o.Out.O == faultmodel.OK || o.Out.O == faultmodel.Fail
		})
	}
}

func (c *client) retryRead(f func() bool) {
	deadline := time.Now().Add(30 * time.Second)
	for pause := 10 * time.Millisecond; time.Now().Before(deadline); pause = min(2*pause, 500*time.Millisecond) {
		if f() {
			return
		}
		time.Sleep(pause)
	}
}
