package etcd

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/durable-go/durable"
	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/faultmodel"
	"go.uber.org/goleak"
)

// faultDuration is how long TestFaultsMemberLoss drives its clients:
// DURABLE_ETCD_FAULT_DURATION (a Go duration) or 8 s.
func faultDuration(t *testing.T) time.Duration {
	if v := os.Getenv("DURABLE_ETCD_FAULT_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 2*time.Second {
			t.Fatalf("DURABLE_ETCD_FAULT_DURATION=%q: want a Go duration of at least 2s", v)
		}
		return d
	}
	return 8 * time.Second
}

const (
	faultClients   = 16
	faultResources = 4 // leases, each fencing writes to its own workflow
	faultCounters  = 4 // workflows updated by plain compare-and-set
	faultSems      = 2 // fenced semaphores (of semPermits permits), each fencing writes to its own workflow
	faultKeys      = 6 // idempotency keys live at a time (renamed every epoch)
	faultOpTimeout = 2 * time.Second
	faultLeaseTTL  = time.Minute // nothing expires within a history
)

// semPermits is the number of permits of semaphore i: 2 or 3, so that
// permit N+1, which no one may ever hold (the clients read it), is still
// within the model's faultmodel.MaxModelPermits.
func semPermits(i int) int { return 2 + i%2 }

// TestFaultsMemberLoss drives 16 clients (each its own durable.Open with
// every endpoint in the DSN) against a 3-member in-process cluster while it
// stops a follower, brings it back, then stops the leader (and brings it
// back), recording every call. It then checks that:
//
//   - every error is a *contract.Error with a code the contract allows for
//     the call, and Canceled only when the caller's context ended;
//   - the history of every lease, fenced semaphore (AcquirePermit grants
//     the lowest free permit atomically, never more than N holders, one
//     token sequence across the permits; per-permit renewals, releases,
//     reads and fenced writes), workflow and key is linearizable
//     (porcupine, the model of internal/faultmodel): Unavailable/Canceled is
//     "not applied", OutcomeUnknown "may have applied";
//   - fencing tokens of acknowledged grants strictly increase per resource
//     (per semaphore, across its permits),
//     and a fenced workflow's revisions were written by grants in
//     increasing token order (never an older holder after a newer one:
//     at most one holder valid at a time);
//   - no acknowledged write is lost: each workflow's final revision counts
//     every acknowledged update (and at most the unknown ones besides);
//   - no call outlived its deadline by much, and no goroutine outlives the
//     clients' Close.
func TestFaultsMemberLoss(t *testing.T) {
	leakBase := goleak.IgnoreCurrent()
	dur := faultDuration(t)
	c := startCluster(t, 3)
	ctx := t.Context()
	prefix := "faults"
	dsn := c.dsn(prefix, "tolerance=1s&dial_timeout=3s")

	setup, err := durable.Open(ctx, dsn)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	for _, id := range append(names("wf-res-", faultResources), names("sem-", faultSems)...) {
		if _, err := setup.CreateWorkflow(ctx, contract.Workflow{ID: id, Status: contract.StatusRunning, RequestID: faultmodel.InitRef}); err != nil {
			t.Fatalf("setup: %v", err)
		}
	}
	rec := &faultmodel.Recorder{Base: time.Now()}
	// The counters' creation is part of their histories (a lease's
	// workflow is in its model's initial state).
	for i := range faultCounters {
		id := fmt.Sprintf("wf-cnt-%d", i)
		o := &faultmodel.Op{Client: -1, Part: id, In: faultmodel.Input{Kind: faultmodel.Create, Ref: faultmodel.InitRef}, Start: time.Since(rec.Base)}
		w, err := setup.CreateWorkflow(ctx, contract.Workflow{ID: id, Status: contract.StatusRunning, RequestID: faultmodel.InitRef})
		if err != nil {
			t.Fatalf("setup: %v", err)
		}
		o.End, o.Out = time.Since(rec.Base), faultmodel.Output{O: faultmodel.OK, Rev: w.Revision, Ref: w.RequestID}
		rec.Add(o)
	}

	stores := make([]*durable.Store, faultClients)
	for i := range stores {
		if stores[i], err = durable.Open(ctx, dsn, durable.WithOperationTimeout(faultOpTimeout)); err != nil {
			t.Fatalf("Open client %d: %v", i, err)
		}
	}

	var violations sync.Map // string → struct{}
	var nViol atomic.Int64
	violate := func(format string, args ...any) {
		if nViol.Add(1) <= 50 {
			violations.Store(fmt.Sprintf(format, args...), struct{}{})
		}
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, s := range stores {
		wg.Go(func() { runFaultClient(i, s, rec, stop, violate) })
	}

	// The faults.
	var events []string
	logEvent := func(s string) {
		events = append(events, fmt.Sprintf("%6.2fs %s", time.Since(rec.Base).Seconds(), s))
	}
	sleep := func(d time.Duration) { time.Sleep(d) }
	sleep(dur / 4)
	ld := c.leader()
	follower := (ld + 1) % 3
	logEvent(fmt.Sprintf("stop follower m%d (leader m%d)", follower, ld))
	c.stop(follower, false)
	sleep(dur / 4)
	logEvent(fmt.Sprintf("restart m%d", follower))
	c.restart(t, follower)
	logEvent(fmt.Sprintf("m%d ready", follower))
	ld = c.leader()
	if ld < 0 {
		time.Sleep(time.Second)
		ld = c.leader()
	}
	if ld >= 0 {
		logEvent(fmt.Sprintf("crash leader m%d (no leadership transfer)", ld))
		c.stop(ld, true)
	} else {
		t.Errorf("no leader to stop")
	}
	sleep(dur / 4)
	if ld >= 0 {
		logEvent(fmt.Sprintf("restart m%d", ld))
		c.restart(t, ld)
		logEvent(fmt.Sprintf("m%d ready, new leader m%d", ld, c.leader()))
	}
	sleep(dur / 4)
	close(stop)
	wg.Wait()
	logEvent("clients stopped")
	t.Logf("faults: %s", strings.Join(events, "; "))

	// Final reads, on a healed cluster.
	finalRev := map[string]int64{}
	for _, id := range append(append(names("wf-res-", faultResources), names("wf-cnt-", faultCounters)...), names("sem-", faultSems)...) {
		var w contract.Workflow
		for attempt := 0; ; attempt++ {
			w, err = setup.GetWorkflow(ctx, "", id)
			if err == nil || attempt == 20 {
				break
			}
			time.Sleep(250 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("final GetWorkflow(%s): %v", id, err)
		}
		finalRev[id] = w.Revision
	}

	for _, s := range stores {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}
	if err := setup.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}

	ops := rec.Snapshot()
	counts := map[faultmodel.Outcome]int{}
	for _, o := range ops {
		counts[o.Out.O]++
		if o.End-o.Start > faultOpTimeout+time.Second {
			violate("%s took %v, more than the operation timeout %v plus 1s", o.In.Kind, o.End-o.Start, faultOpTimeout)
		}
	}
	permits := map[faultmodel.Outcome]int{}
	for _, o := range ops {
		if o.In.Kind == faultmodel.AcquirePermit {
			permits[o.Out.O]++
		}
	}
	line := fmt.Sprintf("FAULTS backend=etcd clients=%d duration=%v ops=%d ok=%d refused=%d not-applied=%d unknown=%d bad=%d permits{acq=%d busy=%d not-applied=%d unknown=%d}",
		faultClients, dur, len(ops), counts[faultmodel.OK], counts[faultmodel.Fail], counts[faultmodel.NotApplied], counts[faultmodel.Unknown], counts[faultmodel.Bad],
		permits[faultmodel.OK], permits[faultmodel.Fail], permits[faultmodel.NotApplied], permits[faultmodel.Unknown])
	t.Log(line)
	// CI collects the fault suites' counts (see .ci/run).
	if path := os.Getenv("DURABLE_FAULT_SUMMARY"); path != "" {
		if f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o600); err == nil {
			_, _ = fmt.Fprintln(f, line)
			_ = f.Close()
		}
	}
	if counts[faultmodel.OK] < 50 {
		t.Errorf("only %d operations succeeded: the workload did not run", counts[faultmodel.OK])
	}

	checkFaultHistory(t, ops, finalRev, violate)

	violations.Range(func(k, _ any) bool {
		t.Errorf("violation: %s", k)
		return true
	})

	c.stopAll()
	// The stopped members' HTTP connections (peer pipelines, the client
	// listener's HTTP handler) wind down on their own: they are etcd
	// server goroutines, not the clients', and net/http is used by nothing
	// else here (gRPC has its own HTTP/2).
	if err := goleak.Find(leakBase,
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreAnyFunction("net/http.(*connReader).backgroundRead"),
		goleak.IgnoreAnyFunction("net/http.(*conn).serve"),
	); err != nil {
		t.Errorf("goroutines outlive Close and the cluster: %v", err)
	}
}

func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return out
}

// runFaultClient is one client's loop: leases and fenced semaphores with
// fenced writes, plain compare-and-set increments, and idempotency keys.
func runFaultClient(id int, s *durable.Store, rec *faultmodel.Recorder, stop <-chan struct{}, violate func(string, ...any)) {
	rng := rand.New(rand.NewPCG(uint64(id), 42))
	owner := fmt.Sprintf("c%d", id)
	held := map[string]contract.Lease{} // resource (a lease's or a permit's) → the grant this client holds
	var stale []contract.Lease          // permits' grants this client held once
	keyTokens := map[string]string{}    // key → this client's claim token
	seq := 0
	ref := func() string { seq++; return fmt.Sprintf("c%d-%d", id, seq) }

	// call records one operation.
	call := func(part string, in faultmodel.Input, f func(ctx context.Context) (faultmodel.Output, error)) (faultmodel.Output, error) {
		ctx, cancel := context.WithTimeout(context.Background(), faultOpTimeout)
		defer cancel()
		o := &faultmodel.Op{Client: id, Part: part, In: in, Start: time.Since(rec.Base)}
		out, err := f(ctx)
		o.End = time.Since(rec.Base)
		cls, why := faultmodel.Classify(in.Kind, err, ctx.Err() != nil)
		if err != nil {
			cls.Rev = max(cls.Rev, out.Rev)
			out = cls
		}
		if why != "" {
			violate("%s: %s (%v)", in.Kind, why, err)
		}
		o.Out, o.Err = out, err
		rec.Add(o)
		return out, err
	}

	for {
		select {
		case <-stop:
			return
		default:
		}
		switch p := rng.IntN(13); {
		case p >= 10: // a fenced semaphore and its workflow
			semAction(s, rng, id, rng.IntN(faultSems), held, &stale, call, ref)
		case p < 5: // a lease and its fenced workflow
			r := rng.IntN(faultResources)
			res, wf := fmt.Sprintf("res-%d", r), fmt.Sprintf("wf-res-%d", r)
			part := res
			l, ok := held[res]
			if !ok {
				out, err := call(part, faultmodel.Input{Kind: faultmodel.Acquire, Owner: owner}, func(ctx context.Context) (faultmodel.Output, error) {
					l, err := s.AcquireLease(ctx, contract.LeaseRequest{Resource: res, Owner: owner, TTL: faultLeaseTTL})
					return faultmodel.Output{Owner: l.Owner, Token: l.Token}, err
				})
				switch {
				case err == nil:
					held[res] = contract.Lease{Resource: res, Owner: owner, Token: out.Token}
				case out.O == faultmodel.Unknown:
					// Maybe granted: find out, so a lost grant does not
					// block the resource for a minute.
					out, err := call(part, faultmodel.Input{Kind: faultmodel.GetLease}, func(ctx context.Context) (faultmodel.Output, error) {
						l, err := s.GetLease(ctx, "", res)
						return faultmodel.Output{Owner: l.Owner, Token: l.Token}, err
					})
					if err == nil && out.Owner == owner {
						held[res] = contract.Lease{Resource: res, Owner: owner, Token: out.Token}
					}
				}
				continue
			}
			switch q := rng.IntN(10); {
			case q < 6:
				rf := ref()
				_, err := call(part, faultmodel.Input{Kind: faultmodel.FencedUpdate, Owner: owner, Token: l.Token, Ref: rf}, func(ctx context.Context) (faultmodel.Output, error) {
					w, err := s.UpdateWorkflow(ctx, contract.Update{
						ID: wf, ExpectStatus: contract.StatusRunning, Status: contract.StatusRunning,
						RequestID: rf, Snapshot: []byte(rf), Fence: &contract.Fence{Resource: res, Owner: owner, Token: l.Token},
					})
					return faultmodel.Output{Rev: w.Revision, Ref: w.RequestID}, err
				})
				if contract.CodeOf(err) == contract.Fenced {
					delete(held, res)
				}
			case q < 7:
				call(part, faultmodel.Input{Kind: faultmodel.GetWorkflow}, func(ctx context.Context) (faultmodel.Output, error) {
					w, err := s.GetWorkflow(ctx, "", wf)
					return faultmodel.Output{Rev: w.Revision, Ref: w.RequestID}, err
				})
			case q < 8:
				_, err := call(part, faultmodel.Input{Kind: faultmodel.Renew, Owner: owner, Token: l.Token}, func(ctx context.Context) (faultmodel.Output, error) {
					r, err := s.RenewLease(ctx, contract.Lease{Resource: res, Owner: owner, Token: l.Token}, faultLeaseTTL)
					return faultmodel.Output{Owner: r.Owner, Token: r.Token}, err
				})
				if contract.CodeOf(err) == contract.Fenced {
					delete(held, res)
				}
			default:
				out, err := call(part, faultmodel.Input{Kind: faultmodel.Release, Owner: owner, Token: l.Token}, func(ctx context.Context) (faultmodel.Output, error) {
					ok, err := s.ReleaseLease(ctx, contract.Lease{Resource: res, Owner: owner, Token: l.Token})
					return faultmodel.Output{Bool: ok}, err
				})
				if err == nil || !out.Bool && out.O == faultmodel.OK {
					delete(held, res)
				}
			}
		case p < 8: // compare-and-set increments
			wf := fmt.Sprintf("wf-cnt-%d", rng.IntN(faultCounters))
			out, err := call(wf, faultmodel.Input{Kind: faultmodel.GetWorkflow}, func(ctx context.Context) (faultmodel.Output, error) {
				w, err := s.GetWorkflow(ctx, "", wf)
				return faultmodel.Output{Rev: w.Revision, Ref: w.RequestID}, err
			})
			if err != nil {
				continue
			}
			rf := ref()
			call(wf, faultmodel.Input{Kind: faultmodel.Update, ExpectRev: out.Rev, Ref: rf}, func(ctx context.Context) (faultmodel.Output, error) {
				w, err := s.UpdateWorkflow(ctx, contract.Update{
					ID: wf, ExpectStatus: contract.StatusRunning, ExpectRevision: out.Rev,
					Status: contract.StatusRunning, RequestID: rf, Snapshot: []byte(rf),
				})
				return faultmodel.Output{Rev: w.Revision, Ref: w.RequestID}, err
			})
		default: // idempotency keys, renamed every 400 ms
			epoch := time.Since(rec.Base) / (400 * time.Millisecond)
			key := fmt.Sprintf("key-%d-%d", epoch, rng.IntN(faultKeys))
			ref := contract.KeyRef{Key: key}
			if tok, ok := keyTokens[key]; ok {
				delete(keyTokens, key)
				if rng.IntN(4) == 0 {
					call(key, faultmodel.Input{Kind: faultmodel.ReleaseKey, KeyToken: tok}, func(ctx context.Context) (faultmodel.Output, error) {
						ok, err := s.ReleaseKey(ctx, ref, tok)
						return faultmodel.Output{Bool: ok}, err
					})
					continue
				}
				rf := fmt.Sprintf("out-c%d-%d", id, seq)
				seq++
				call(key, faultmodel.Input{Kind: faultmodel.Complete, KeyToken: tok, Ref: rf}, func(ctx context.Context) (faultmodel.Output, error) {
					r, err := s.CompleteKey(ctx, contract.Completion{KeyRef: ref, Token: tok, Outcome: contract.Outcome{Code: 200, Ref: rf}, Retain: time.Hour})
					return keyOutput(r), err
				})
				continue
			}
			if rng.IntN(5) == 0 {
				call(key, faultmodel.Input{Kind: faultmodel.GetKey}, func(ctx context.Context) (faultmodel.Output, error) {
					r, err := s.GetKey(ctx, ref)
					return keyOutput(r), err
				})
				continue
			}
			fp := "fp-a"
			if rng.IntN(8) == 0 {
				fp = "fp-b"
			}
			out, err := call(key, faultmodel.Input{Kind: faultmodel.Claim, Fp: fp}, func(ctx context.Context) (faultmodel.Output, error) {
				c, err := s.ClaimKey(ctx, contract.ClaimRequest{KeyRef: ref, Fingerprint: fp, TTL: faultLeaseTTL})
				o := keyOutput(c.Record)
				o.Claim, o.KToken = c.Kind, c.Token
				return o, err
			})
			if err == nil && out.Claim.Owned() {
				keyTokens[key] = out.KToken
			}
		}
	}
}

// semAction is one step of a client on semaphore i (partition and
// workflow "sem-i"): acquire a permit (after a lost reply, read every
// permit back and adopt the one granted), read a permit (permit N+1 too,
// which no one may hold), or act on a permit it holds — a fenced write, a
// renewal, a release — or write with a stale permit's fence or another
// permit's.
func semAction(st *durable.Store, rng *rand.Rand, id, i int, held map[string]contract.Lease, stale *[]contract.Lease, call faultCall, ref func() string) {
	s, n := fmt.Sprintf("sem-%d", i), semPermits(i)
	var mine []contract.Lease
	for m := 1; m <= n; m++ {
		if l, ok := held[contract.PermitResource(s, m)]; ok {
			mine = append(mine, l)
		}
	}
	getLease := func(m int) (faultmodel.Output, error) {
		return call(s, faultmodel.Input{Kind: faultmodel.GetLease, Permit: m}, func(ctx context.Context) (faultmodel.Output, error) {
			l, err := st.GetLease(ctx, "", contract.PermitResource(s, m))
			return faultmodel.Output{Owner: l.Owner, Token: l.Token}, err
		})
	}
	if len(mine) > 0 && rng.Float64() < 0.75 {
		l := mine[rng.IntN(len(mine))]
		_, m, _ := contract.SplitPermit(l.Resource)
		switch r := rng.Float64(); {
		case r < 0.3:
			semFenced(st, s, m, l, call, ref)
		case r < 0.4:
			// Permit m's fence with the owner and token of a grant this
			// client held once or holds (maybe of another permit): valid
			// only if it is permit m's current grant.
			pool := append(append([]contract.Lease(nil), (*stale)...), mine...)
			semFenced(st, s, m, pool[rng.IntN(len(pool))], call, ref)
		case r < 0.5:
			_, err := call(s, faultmodel.Input{Kind: faultmodel.Renew, Permit: m, Owner: l.Owner, Token: l.Token}, func(ctx context.Context) (faultmodel.Output, error) {
				got, err := st.RenewLease(ctx, l, faultLeaseTTL)
				return faultmodel.Output{Owner: got.Owner, Token: got.Token}, err
			})
			if contract.CodeOf(err) == contract.Fenced {
				delete(held, l.Resource)
				*stale = append((*stale)[max(0, len(*stale)-7):], l)
			}
		default:
			out, err := call(s, faultmodel.Input{Kind: faultmodel.Release, Permit: m, Owner: l.Owner, Token: l.Token}, func(ctx context.Context) (faultmodel.Output, error) {
				ok, err := st.ReleaseLease(ctx, l)
				return faultmodel.Output{Bool: ok}, err
			})
			if err == nil || !out.Bool && out.O == faultmodel.OK {
				delete(held, l.Resource)
				*stale = append((*stale)[max(0, len(*stale)-7):], l)
			}
		}
		return
	}
	switch q := rng.Float64(); {
	case q < 0.6:
		owner := fmt.Sprintf("c%d-%s", id, ref())
		out, err := call(s, faultmodel.Input{Kind: faultmodel.AcquirePermit, Owner: owner, Permits: n}, func(ctx context.Context) (faultmodel.Output, error) {
			l, err := st.AcquirePermit(ctx, contract.PermitRequest{Resource: s, Owner: owner, TTL: faultLeaseTTL, Permits: n})
			o := faultmodel.Output{Owner: l.Owner, Token: l.Token, Permit: -1}
			if base, m, ok := contract.SplitPermit(l.Resource); ok && base == s {
				o.Permit = m
			}
			return o, err
		})
		switch {
		case err == nil && out.Permit > 0:
			r := contract.PermitResource(s, out.Permit)
			held[r] = contract.Lease{Resource: r, Owner: owner, Token: out.Token}
		case out.O == faultmodel.Unknown:
			// Maybe granted: read every permit back and adopt the grant,
			// so that it does not block the permit for a minute.
			for m := 1; m <= n; m++ {
				if o, err := getLease(m); err == nil && o.Owner == owner {
					r := contract.PermitResource(s, m)
					held[r] = contract.Lease{Resource: r, Owner: owner, Token: o.Token}
				}
			}
		}
	case q < 0.85:
		getLease(1 + rng.IntN(n+1))
	default:
		call(s, faultmodel.Input{Kind: faultmodel.GetWorkflow}, func(ctx context.Context) (faultmodel.Output, error) {
			w, err := st.GetWorkflow(ctx, "", s)
			return faultmodel.Output{Rev: w.Revision, Ref: w.RequestID}, err
		})
	}
}

// faultCall is runFaultClient's recorder of one call.
type faultCall = func(part string, in faultmodel.Input, f func(ctx context.Context) (faultmodel.Output, error)) (faultmodel.Output, error)

// semFenced writes semaphore s's workflow under the fence of l, as permit
// m's.
func semFenced(st *durable.Store, s string, m int, l contract.Lease, call faultCall, ref func() string) {
	rf := ref()
	call(s, faultmodel.Input{Kind: faultmodel.FencedUpdate, Permit: m, Owner: l.Owner, Token: l.Token, Ref: rf}, func(ctx context.Context) (faultmodel.Output, error) {
		w, err := st.UpdateWorkflow(ctx, contract.Update{
			ID: s, ExpectStatus: contract.StatusRunning, Status: contract.StatusRunning,
			RequestID: rf, Snapshot: []byte(rf), Fence: &contract.Fence{Resource: contract.PermitResource(s, m), Owner: l.Owner, Token: l.Token},
		})
		return faultmodel.Output{Rev: w.Revision, Ref: w.RequestID}, err
	})
}

func keyOutput(r contract.KeyRecord) faultmodel.Output {
	o := faultmodel.Output{KState: r.State, Fp: r.Fingerprint}
	if r.Outcome != nil {
		o.Ref = r.Outcome.Ref
	}
	return o
}

// checkFaultHistory runs the checks on the recorded history.
func checkFaultHistory(t *testing.T, ops []*faultmodel.Op, finalRev map[string]int64, violate func(string, ...any)) {
	t.Helper()
	parts := faultmodel.ByPart(ops)
	keys := make([]string, 0, len(parts))
	for p := range parts {
		keys = append(keys, p)
	}
	sort.Strings(keys)
	for _, p := range keys {
		k := faultmodel.PartKey
		switch {
		case strings.HasPrefix(p, "res-"):
			k = faultmodel.PartLease
		case strings.HasPrefix(p, "wf-"):
			k = faultmodel.PartWorkflow
		case strings.HasPrefix(p, "sem-"):
			k = faultmodel.PartSemaphore
		}
		res, info := faultmodel.LinCheck(k, parts[p], 30*time.Second)
		switch res {
		case porcupine.Illegal:
			f, err := os.CreateTemp("", "etcd-faults-*.html")
			if err == nil {
				_ = porcupine.Visualize(faultmodel.Model(k), info, f)
				_ = f.Close()
			}
			violate("history of %s is not linearizable (%d ops; visualization in %s)", p, len(parts[p]), f.Name())
		case porcupine.Unknown:
			t.Logf("linearizability check of %s timed out (%d ops): not checked", p, len(parts[p]))
		}
	}

	// Tokens of acknowledged grants strictly increase per resource, in
	// real-time order; and fenced writes come from grants in increasing
	// token order along the workflow's revisions.
	for r := range faultResources {
		res := fmt.Sprintf("res-%d", r)
		var grants []*faultmodel.Op
		byRev := map[int64]int64{} // revision → fencing token of its writer
		for _, o := range parts[res] {
			if o.Out.O != faultmodel.OK {
				continue
			}
			switch o.In.Kind {
			case faultmodel.Acquire:
				grants = append(grants, o)
			case faultmodel.FencedUpdate:
				byRev[o.Out.Rev] = o.In.Token
			}
		}
		for i, a := range grants {
			for _, b := range grants[i+1:] {
				if a.End < b.Start && b.Out.Token <= a.Out.Token {
					violate("%s: grant with token %d acknowledged before grant with token %d began", res, a.Out.Token, b.Out.Token)
				}
			}
		}
		revs := make([]int64, 0, len(byRev))
		for rev := range byRev {
			revs = append(revs, rev)
		}
		sort.Slice(revs, func(i, j int) bool { return revs[i] < revs[j] })
		for i := 1; i < len(revs); i++ {
			if byRev[revs[i]] < byRev[revs[i-1]] {
				violate("%s: revision %d written with token %d after revision %d with the newer token %d: two holders were valid",
					res, revs[i], byRev[revs[i]], revs[i-1], byRev[revs[i-1]])
			}
		}
	}

	// Tokens of acknowledged permit grants strictly increase per
	// semaphore, across its permits, in real-time order.
	for _, sem := range names("sem-", faultSems) {
		var grants []*faultmodel.Op
		for _, o := range parts[sem] {
			if o.Out.O == faultmodel.OK && o.In.Kind == faultmodel.AcquirePermit {
				grants = append(grants, o)
			}
		}
		for i, a := range grants {
			for _, b := range grants[i+1:] {
				if a.End < b.Start && b.Out.Token <= a.Out.Token {
					violate("%s: permit grant with token %d acknowledged before permit grant with token %d began", sem, a.Out.Token, b.Out.Token)
				}
			}
		}
	}

	// No acknowledged write is lost.
	for id, rev := range finalRev {
		part := id
		if strings.HasPrefix(id, "wf-res-") {
			part = "res-" + strings.TrimPrefix(id, "wf-res-")
		}
		acked, unknown := 0, 0
		for _, o := range parts[part] {
			if o.In.Kind != faultmodel.Update && o.In.Kind != faultmodel.FencedUpdate {
				continue
			}
			switch o.Out.O {
			case faultmodel.OK:
				acked++
			case faultmodel.Unknown, faultmodel.Bad:
				unknown++
			}
		}
		if got := int(rev - 1); got < acked || got > acked+unknown {
			violate("%s: final revision %d, but %d updates were acknowledged and %d unknown", id, rev, acked, unknown)
		}
	}
}
