package redis

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path"
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
	"github.com/durable-go/durable/internal/redistest"
)

// The kill test. Run it with
//
//	DURABLE_REQUIRE_REDIS=1 go test -race -count=1 -run TestKillUnderLoad -v ./backends/redis/
//
// Knobs (environment):
//
//	DURABLE_REDIS_FAULT_DURATION  how long the clients run (a Go duration,
//	                              at least 3s; default 12s)
//	DURABLE_FAULT_SUMMARY         a file to append the summary line to (CI
//	                              prints it: go test hides a passing
//	                              package's output)
//
// It prints (t.Log) and appends one line:
//
//	FAULTS driver=redis clients=… duration=… kills=… ops=… ok=… refused=… not-applied=… unknown=… bad=… permits{…} lin{…} lost=… violations=…

// killPermits is the number of permits of semaphore i of an epoch.
func killPermits(i int) int { return 2 + i%2 }

// killSem is semaphore i of epoch e: its resource, its workflow's id and
// the name of its partition.
func killSem(e, i int) string { return fmt.Sprintf("sem-%d-%d", e, i) }

func killDuration(t *testing.T) time.Duration {
	if v := os.Getenv("DURABLE_REDIS_FAULT_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 3*time.Second {
			t.Fatalf("DURABLE_REDIS_FAULT_DURATION=%q: want a Go duration of at least 3s", v)
		}
		return d
	}
	return 12 * time.Second
}

const (
	killClients   = 16
	killStores    = 4 // the clients share them (see TestKillUnderLoad)
	killResources = 3 // leases per epoch, each fencing writes to its own workflow
	killCounters  = 3 // workflows per epoch updated by plain compare-and-set
	killKeys      = 6 // idempotency keys per key epoch
	killSems      = 2 // fenced semaphores per epoch, of 2 and 3 permits (killPermits), each fencing writes to its own workflow
	killEpoch     = 2 * time.Second
	killKeyEpoch  = 400 * time.Millisecond
	killOpTimeout = 2 * time.Second
	killLeaseTTL  = time.Minute // nothing expires within a history
	killPeriod    = 2 * time.Second
)

// appendSummary appends line to the file DURABLE_FAULT_SUMMARY names, if
// any (see .ci/run).
func appendSummary(t *testing.T, line string) {
	path := os.Getenv("DURABLE_FAULT_SUMMARY")
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Errorf("DURABLE_FAULT_SUMMARY: %v", err)
		return
	}
	defer f.Close()
	if _, err := fmt.Fprintln(f, line); err != nil {
		t.Errorf("DURABLE_FAULT_SUMMARY: %v", err)
	}
}

// TestKillUnderLoad drives 16 clients (four to a Store opened from a
// redis:// DSN, real clock, so that each Store coalesces the scripts its
// clients send at once: on its shared connection with the default
// coalesce=on, in pipelines with coalesce=pipeline&coalesce_inflight=1;
// one subtest each) against one node with
// appendonly yes and appendfsync always, while the node is killed with SIGKILL and restarted
// every ~2 s; after the clients stop, it is killed and restarted once more
// and every lease, workflow and key is read back. It checks that:
//
//   - every error is a *contract.Error with a code the contract allows for
//     the call (a connection error is Unavailable or OutcomeUnknown, never
//     a false success or refusal), and Canceled only when the caller's
//     context ended;
//   - the history of every lease, fenced semaphore (Store.AcquirePermit of
//     2 or 3 permits: the lowest free permit, never more holders than
//     permits, one token sequence across them), workflow and key, final
//     reads included, is linearizable (porcupine, internal/faultmodel): so
//     no acknowledged write is lost unless a later write superseded it;
//   - no acknowledged write is lost, counted directly too: each
//     workflow's final revision counts every acknowledged update, every
//     acknowledged completion is read back with its outcome, every
//     acknowledged claim and grant not later released is still held;
//   - fencing tokens of acknowledged grants strictly increase per resource
//     and per semaphore in real-time order (across the restarts), and a
//     lease's fenced workflow's revisions were written in increasing token
//     order.
func TestKillUnderLoad(t *testing.T) {
	t.Run("shared", func(t *testing.T) { killUnderLoad(t, "") })
	t.Run("pipeline", func(t *testing.T) { killUnderLoad(t, "&coalesce=pipeline&coalesce_inflight=1") })
}

func killUnderLoad(t *testing.T, coalesce string) {
	dur := killDuration(t)
	srv := redistest.Start(t, redistest.Options{AppendOnly: "yes", AppendFsync: "always"})
	ctx := t.Context()
	dsn := srv.URL() + "/?prefix=kill&tolerance=1s&dial_timeout=500ms" + coalesce
	epochs := int(dur/killEpoch) + 2

	setup, err := durable.Open(ctx, dsn)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer setup.Close()
	rec := &faultmodel.Recorder{Base: time.Now(), Driver: "redis"}
	for e := range epochs {
		for i := range killResources {
			if _, err := setup.CreateWorkflow(ctx, contract.Workflow{ID: fmt.Sprintf("wf-res-%d-%d", e, i), Status: contract.StatusRunning, RequestID: faultmodel.InitRef}); err != nil {
				t.Fatalf("setup: %v", err)
			}
		}
		for i := range killSems {
			if _, err := setup.CreateWorkflow(ctx, contract.Workflow{ID: killSem(e, i), Status: contract.StatusRunning, RequestID: faultmodel.InitRef}); err != nil {
				t.Fatalf("setup: %v", err)
			}
		}
		// The counters' creation is part of their histories (a lease's
		// workflow is in its model's initial state).
		for i := range killCounters {
			id := fmt.Sprintf("wf-cnt-%d-%d", e, i)
			o := &faultmodel.Op{Client: -1, Part: id, In: faultmodel.Input{Kind: faultmodel.Create, Ref: faultmodel.InitRef}, Start: time.Since(rec.Base)}
			w, err := setup.CreateWorkflow(ctx, contract.Workflow{ID: id, Status: contract.StatusRunning, RequestID: faultmodel.InitRef})
			if err != nil {
				t.Fatalf("setup: %v", err)
			}
			o.End, o.Out = time.Since(rec.Base), faultmodel.Output{O: faultmodel.OK, Rev: w.Revision, Ref: w.RequestID}
			rec.Add(o)
		}
	}

	// The clients share killStores Stores, so that the scripts of one
	// Store's clients go out together (one pipeline in flight each with
	// coalesce=pipeline) while the server is killed under them.
	cfg, err := ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	backends := make([]*Backend, killStores)
	stores := make([]*durable.Store, killStores)
	for i := range stores {
		if backends[i], err = dial(ctx, cfg); err != nil {
			t.Fatalf("Open store %d: %v", i, err)
		}
		if stores[i], err = durable.New(backends[i], durable.WithOperationTimeout(killOpTimeout)); err != nil {
			t.Fatalf("Open store %d: %v", i, err)
		}
	}
	defer func() {
		for _, s := range stores {
			_ = s.Close()
		}
	}()

	var violations sync.Map // string → struct{}
	var nViol atomic.Int64
	violate := func(format string, args ...any) {
		if nViol.Add(1) <= 50 {
			violations.Store(fmt.Sprintf(format, args...), struct{}{})
		}
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range killClients {
		wg.Go(func() { runKillClient(i, stores[i%killStores], rec, stop, violate) })
	}

	// The faults: SIGKILL, then a restart after 0–300 ms.
	var events []string
	logEvent := func(s string) {
		events = append(events, fmt.Sprintf("%6.2fs %s", time.Since(rec.Base).Seconds(), s))
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	kills := 0
	kill := func() {
		srv.Kill()
		kills++
		logEvent("kill -9")
		time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond)
		if err := srv.Restart(); err != nil {
			t.Fatalf("restart: %v", err)
		}
		logEvent("restarted")
	}
	end := time.Now().Add(dur)
	for {
		next := time.Duration(float64(killPeriod) * (0.5 + rng.Float64()))
		if time.Until(end) < next {
			break
		}
		time.Sleep(next)
		kill()
	}
	time.Sleep(time.Until(end))
	close(stop)
	wg.Wait()
	logEvent("clients stopped")
	// Whatever was acknowledged must survive one more kill.
	kill()
	t.Logf("faults: %s", strings.Join(events, "; "))
	var piped CoalesceStats
	for _, b := range backends {
		st := b.CoalesceStats()
		piped.Batches += st.Batches
		piped.Calls += st.Calls
		piped.Largest = max(piped.Largest, st.Largest)
	}
	t.Logf("coalesced: %d scripts in %d writes or pipelines, the largest of %d", piped.Calls, piped.Batches, piped.Largest)
	if piped.Largest < 2 {
		t.Errorf("no two scripts of a Store went out together: the run did not exercise coalescing")
	}

	// Final reads, recorded as part of the histories.
	finalRead := func(part string, in faultmodel.Input, f func(ctx context.Context) (faultmodel.Output, error)) faultmodel.Output {
		for attempt := 0; ; attempt++ {
			c, cancel := context.WithTimeout(ctx, 5*time.Second)
			o := &faultmodel.Op{Client: -1, Part: part, In: in, Start: time.Since(rec.Base)}
			out, err := f(c)
			o.End = time.Since(rec.Base)
			cls, why := faultmodel.Classify(in.Kind, err, c.Err() != nil)
			cancel()
			if why != "" {
				violate("final %s: %s (%v)", in.Kind, why, err)
			}
			if err != nil {
				out = cls
			}
			if out.O == faultmodel.OK || out.O == faultmodel.Fail || attempt == 20 {
				if out.O != faultmodel.OK && out.O != faultmodel.Fail {
					t.Fatalf("final read of %s: %v", part, err)
				}
				o.Out, o.Err = out, err
				rec.Add(o)
				return out
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	ops := rec.Snapshot()
	parts := faultmodel.ByPart(ops)
	final := map[string]faultmodel.Output{} // workflow id or key or resource → final read
	for e := range epochs {
		for i := range killResources {
			res, wf := fmt.Sprintf("res-%d-%d", e, i), fmt.Sprintf("wf-res-%d-%d", e, i)
			final[res] = finalRead(res, faultmodel.Input{Kind: faultmodel.GetLease}, func(ctx context.Context) (faultmodel.Output, error) {
				l, err := setup.GetLease(ctx, "", res)
				return faultmodel.Output{Owner: l.Owner, Token: l.Token}, err
			})
			final[wf] = finalRead(res, faultmodel.Input{Kind: faultmodel.GetWorkflow}, func(ctx context.Context) (faultmodel.Output, error) {
				w, err := setup.GetWorkflow(ctx, "", wf)
				return faultmodel.Output{Rev: w.Revision, Ref: w.RequestID}, err
			})
		}
		for i := range killSems {
			sem := killSem(e, i)
			for n := 1; n <= killPermits(i); n++ {
				r := contract.PermitResource(sem, n)
				finalRead(sem, faultmodel.Input{Kind: faultmodel.GetLease, Permit: n}, func(ctx context.Context) (faultmodel.Output, error) {
					l, err := setup.GetLease(ctx, "", r)
					return faultmodel.Output{Owner: l.Owner, Token: l.Token}, err
				})
			}
			final[sem] = finalRead(sem, faultmodel.Input{Kind: faultmodel.GetWorkflow}, func(ctx context.Context) (faultmodel.Output, error) {
				w, err := setup.GetWorkflow(ctx, "", sem)
				return faultmodel.Output{Rev: w.Revision, Ref: w.RequestID}, err
			})
		}
		for i := range killCounters {
			wf := fmt.Sprintf("wf-cnt-%d-%d", e, i)
			final[wf] = finalRead(wf, faultmodel.Input{Kind: faultmodel.GetWorkflow}, func(ctx context.Context) (faultmodel.Output, error) {
				w, err := setup.GetWorkflow(ctx, "", wf)
				return faultmodel.Output{Rev: w.Revision, Ref: w.RequestID}, err
			})
		}
	}
	for p := range parts {
		if !strings.HasPrefix(p, "key-") {
			continue
		}
		final[p] = finalRead(p, faultmodel.Input{Kind: faultmodel.GetKey}, func(ctx context.Context) (faultmodel.Output, error) {
			r, err := setup.GetKey(ctx, contract.KeyRef{Key: p})
			return keyOutput(r), err
		})
	}

	ops = rec.Snapshot()
	counts := map[faultmodel.Outcome]int{}
	permits := map[faultmodel.Outcome]int{} // AcquirePermit outcomes
	for _, o := range ops {
		counts[o.Out.O]++
		if o.In.Kind == faultmodel.AcquirePermit {
			permits[o.Out.O]++
		}
	}
	lin := checkLinearizable(t, ops, violate)
	checkTokens(ops, violate)
	lost := countLost(ops, final, violate)

	line := fmt.Sprintf("FAULTS driver=redis coalesce=%s clients=%d stores=%d coalesced{scripts=%d sent=%d largest=%d} duration=%v kills=%d ops=%d ok=%d refused=%d not-applied=%d unknown=%d bad=%d permits{granted=%d busy=%d not-applied=%d unknown=%d} lin{partitions=%d ok=%d illegal=%d timeout=%d} lost=%d violations=%d",
		path.Base(t.Name()), killClients, killStores, piped.Calls, piped.Batches, piped.Largest, dur, kills, len(ops), counts[faultmodel.OK], counts[faultmodel.Fail], counts[faultmodel.NotApplied],
		counts[faultmodel.Unknown], counts[faultmodel.Bad], permits[faultmodel.OK], permits[faultmodel.Fail], permits[faultmodel.NotApplied],
		permits[faultmodel.Unknown]+permits[faultmodel.Bad], lin.partitions, lin.ok, lin.illegal, lin.timeout, lost, nViol.Load())
	t.Log(line)
	appendSummary(t, line)
	if counts[faultmodel.OK] < 100 {
		t.Errorf("only %d operations succeeded: the workload did not run", counts[faultmodel.OK])
	}
	if permits[faultmodel.OK] < 10 || permits[faultmodel.Fail] == 0 {
		t.Errorf("%d permits granted, %d refused: the semaphores were not exercised", permits[faultmodel.OK], permits[faultmodel.Fail])
	}
	if counts[faultmodel.NotApplied]+counts[faultmodel.Unknown] == 0 {
		t.Errorf("no call saw a kill: the faults did not land")
	}
	violations.Range(func(k, _ any) bool {
		t.Errorf("violation: %s", k)
		return true
	})
}

// runKillClient is one client's loop: leases and semaphores' permits with
// fenced writes, plain compare-and-set increments, and idempotency keys;
// resources, workflows and keys are renamed every epoch so that each
// history stays short enough for porcupine.
func runKillClient(id int, s *durable.Store, rec *faultmodel.Recorder, stop <-chan struct{}, violate func(string, ...any)) {
	rng := rand.New(rand.NewPCG(uint64(id), 28))
	owner := fmt.Sprintf("c%d", id)
	held := map[string]contract.Lease{} // resource → the grant this client holds
	keyTokens := map[string]string{}    // key → this client's claim token
	seq := 0
	ref := func() string { seq++; return fmt.Sprintf("c%d-%d", id, seq) }

	// call records one operation.
	call := func(part string, in faultmodel.Input, f func(ctx context.Context) (faultmodel.Output, error)) (faultmodel.Output, error) {
		ctx, cancel := context.WithTimeout(context.Background(), killOpTimeout)
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
		if out.O == faultmodel.NotApplied || out.O == faultmodel.Unknown {
			time.Sleep(20 * time.Millisecond) // the server is down: do not spin
		}
		return out, err
	}

	for {
		select {
		case <-stop:
			return
		default:
		}
		epoch := int(time.Since(rec.Base) / killEpoch)
		switch p := rng.IntN(12); {
		case p < 5: // a lease and its fenced workflow
			r := rng.IntN(killResources)
			res, wf := fmt.Sprintf("res-%d-%d", epoch, r), fmt.Sprintf("wf-res-%d-%d", epoch, r)
			part := res
			l, ok := held[res]
			if !ok {
				out, err := call(part, faultmodel.Input{Kind: faultmodel.Acquire, Owner: owner}, func(ctx context.Context) (faultmodel.Output, error) {
					l, err := s.AcquireLease(ctx, contract.LeaseRequest{Resource: res, Owner: owner, TTL: killLeaseTTL})
					return faultmodel.Output{Owner: l.Owner, Token: l.Token}, err
				})
				switch {
				case err == nil:
					held[res] = contract.Lease{Resource: res, Owner: owner, Token: out.Token}
				case out.Code == contract.LeaseBusy:
					time.Sleep(5 * time.Millisecond) // another client holds it: do not spin
				case out.O == faultmodel.Unknown:
					// Maybe granted: find out, so a lost reply does not
					// block the resource for the rest of the epoch.
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
					r, err := s.RenewLease(ctx, contract.Lease{Resource: res, Owner: owner, Token: l.Token}, killLeaseTTL)
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
		case p < 7: // a permit of a fenced semaphore and the semaphore's fenced workflow
			i := rng.IntN(killSems)
			sem, n := killSem(epoch, i), killPermits(i)
			var (
				r  string
				l  contract.Lease
				pn int
			)
			for m := 1; m <= n; m++ {
				if h, ok := held[contract.PermitResource(sem, m)]; ok {
					r, l, pn = contract.PermitResource(sem, m), h, m
					break
				}
			}
			if r == "" {
				o := ref() // an owner per request: a lost reply's grant is found by it
				out, err := call(sem, faultmodel.Input{Kind: faultmodel.AcquirePermit, Owner: o, Ref: o, Permits: n}, func(ctx context.Context) (faultmodel.Output, error) {
					l, err := s.AcquirePermit(ctx, contract.PermitRequest{Resource: sem, Owner: o, TTL: killLeaseTTL, Permits: n})
					out := faultmodel.Output{Owner: l.Owner, Token: l.Token, Permit: -1}
					if base, m, ok := contract.SplitPermit(l.Resource); ok && base == sem {
						out.Permit = m
					}
					return out, err
				})
				switch {
				case err == nil && out.Permit >= 1:
					r := contract.PermitResource(sem, out.Permit)
					held[r] = contract.Lease{Resource: r, Owner: o, Token: out.Token}
				case out.Code == contract.LeaseBusy:
					time.Sleep(5 * time.Millisecond)
				case out.O == faultmodel.Unknown:
					// Maybe granted: read the permits back.
					for m := 1; m <= n; m++ {
						r := contract.PermitResource(sem, m)
						got, err := call(sem, faultmodel.Input{Kind: faultmodel.GetLease, Permit: m}, func(ctx context.Context) (faultmodel.Output, error) {
							l, err := s.GetLease(ctx, "", r)
							return faultmodel.Output{Owner: l.Owner, Token: l.Token}, err
						})
						if err == nil && got.Owner == o {
							held[r] = contract.Lease{Resource: r, Owner: o, Token: got.Token}
							break
						}
					}
				}
				continue
			}
			switch q := rng.IntN(10); {
			case q < 6:
				rf := ref()
				_, err := call(sem, faultmodel.Input{Kind: faultmodel.FencedUpdate, Permit: pn, Owner: l.Owner, Token: l.Token, Ref: rf}, func(ctx context.Context) (faultmodel.Output, error) {
					w, err := s.UpdateWorkflow(ctx, contract.Update{
						ID: sem, ExpectStatus: contract.StatusRunning, Status: contract.StatusRunning,
						RequestID: rf, Snapshot: []byte(rf), Fence: &contract.Fence{Resource: r, Owner: l.Owner, Token: l.Token},
					})
					return faultmodel.Output{Rev: w.Revision, Ref: w.RequestID}, err
				})
				if contract.CodeOf(err) == contract.Fenced {
					delete(held, r)
				}
			case q < 7:
				call(sem, faultmodel.Input{Kind: faultmodel.GetWorkflow}, func(ctx context.Context) (faultmodel.Output, error) {
					w, err := s.GetWorkflow(ctx, "", sem)
					return faultmodel.Output{Rev: w.Revision, Ref: w.RequestID}, err
				})
			case q < 8:
				_, err := call(sem, faultmodel.Input{Kind: faultmodel.Renew, Permit: pn, Owner: l.Owner, Token: l.Token}, func(ctx context.Context) (faultmodel.Output, error) {
					got, err := s.RenewLease(ctx, l, killLeaseTTL)
					return faultmodel.Output{Owner: got.Owner, Token: got.Token}, err
				})
				if contract.CodeOf(err) == contract.Fenced {
					delete(held, r)
				}
			default:
				out, err := call(sem, faultmodel.Input{Kind: faultmodel.Release, Permit: pn, Owner: l.Owner, Token: l.Token}, func(ctx context.Context) (faultmodel.Output, error) {
					ok, err := s.ReleaseLease(ctx, l)
					return faultmodel.Output{Bool: ok}, err
				})
				if err == nil || !out.Bool && out.O == faultmodel.OK {
					delete(held, r)
				}
			}
		case p < 10: // compare-and-set increments
			wf := fmt.Sprintf("wf-cnt-%d-%d", epoch, rng.IntN(killCounters))
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
		default: // idempotency keys
			kepoch := time.Since(rec.Base) / killKeyEpoch
			key := fmt.Sprintf("key-%d-%d", kepoch, rng.IntN(killKeys))
			kref := contract.KeyRef{Key: key}
			if tok, ok := keyTokens[key]; ok {
				delete(keyTokens, key)
				if rng.IntN(4) == 0 {
					call(key, faultmodel.Input{Kind: faultmodel.ReleaseKey, KeyToken: tok}, func(ctx context.Context) (faultmodel.Output, error) {
						ok, err := s.ReleaseKey(ctx, kref, tok)
						return faultmodel.Output{Bool: ok}, err
					})
					continue
				}
				rf := "out-" + ref()
				call(key, faultmodel.Input{Kind: faultmodel.Complete, KeyToken: tok, Ref: rf}, func(ctx context.Context) (faultmodel.Output, error) {
					r, err := s.CompleteKey(ctx, contract.Completion{KeyRef: kref, Token: tok, Outcome: contract.Outcome{Code: 200, Ref: rf}, Retain: time.Hour})
					return keyOutput(r), err
				})
				continue
			}
			if rng.IntN(5) == 0 {
				call(key, faultmodel.Input{Kind: faultmodel.GetKey}, func(ctx context.Context) (faultmodel.Output, error) {
					r, err := s.GetKey(ctx, kref)
					return keyOutput(r), err
				})
				continue
			}
			fp := "fp-a"
			if rng.IntN(8) == 0 {
				fp = "fp-b"
			}
			out, err := call(key, faultmodel.Input{Kind: faultmodel.Claim, Fp: fp}, func(ctx context.Context) (faultmodel.Output, error) {
				c, err := s.ClaimKey(ctx, contract.ClaimRequest{KeyRef: kref, Fingerprint: fp, TTL: killLeaseTTL})
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

func keyOutput(r contract.KeyRecord) faultmodel.Output {
	o := faultmodel.Output{KState: r.State, Fp: r.Fingerprint}
	if r.Outcome != nil {
		o.Ref = r.Outcome.Ref
	}
	return o
}

type linCounts struct{ partitions, ok, illegal, timeout int }

// checkLinearizable checks every partition's history with porcupine.
func checkLinearizable(t *testing.T, ops []*faultmodel.Op, violate func(string, ...any)) linCounts {
	t.Helper()
	var c linCounts
	parts := faultmodel.ByPart(ops)
	names := make([]string, 0, len(parts))
	for p := range parts {
		names = append(names, p)
	}
	sort.Strings(names)
	for _, p := range names {
		k := faultmodel.PartKey
		switch {
		case strings.HasPrefix(p, "res-"):
			k = faultmodel.PartLease
		case strings.HasPrefix(p, "sem-"):
			k = faultmodel.PartSemaphore
		case strings.HasPrefix(p, "wf-"):
			k = faultmodel.PartWorkflow
		}
		c.partitions++
		res, info := faultmodel.LinCheck(k, parts[p], 20*time.Second)
		switch res {
		case porcupine.Ok:
			c.ok++
		case porcupine.Illegal:
			c.illegal++
			f, err := os.CreateTemp("", "redis-faults-*.html")
			name := "(none)"
			if err == nil {
				_ = porcupine.Visualize(faultmodel.Model(k), info, f)
				_ = f.Close()
				name = f.Name()
			}
			violate("history of %s is not linearizable (%d ops; visualization in %s)", p, len(parts[p]), name)
		default:
			c.timeout++
			t.Logf("linearizability check of %s timed out (%d ops): not checked", p, len(parts[p]))
		}
	}
	return c
}

// checkTokens checks that acknowledged grants' tokens strictly increase per
// resource, and per semaphore across its permits, in real-time order (a
// grant acknowledged before another began has the smaller token: restarts
// included), and that a lease's fenced workflow's revisions were written
// in increasing token order.
func checkTokens(ops []*faultmodel.Op, violate func(string, ...any)) {
	for res, pops := range faultmodel.ByPart(ops) {
		sem := strings.HasPrefix(res, "sem-")
		if !strings.HasPrefix(res, "res-") && !sem {
			continue
		}
		var grants []*faultmodel.Op
		byRev := map[int64]int64{} // revision → fencing token of its writer
		for _, o := range pops {
			if o.Out.O != faultmodel.OK {
				continue
			}
			switch o.In.Kind {
			case faultmodel.Acquire, faultmodel.AcquirePermit:
				grants = append(grants, o)
			case faultmodel.FencedUpdate:
				if !sem { // a semaphore's holders write at the same time
					byRev[o.Out.Rev] = o.In.Token
				}
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
}

// countLost counts acknowledged writes the final reads do not show (and
// that no later write superseded), reporting each as a violation.
func countLost(ops []*faultmodel.Op, final map[string]faultmodel.Output, violate func(string, ...any)) int {
	lost := 0
	for part, pops := range faultmodel.ByPart(ops) {
		switch {
		case strings.HasPrefix(part, "res-"), strings.HasPrefix(part, "wf-cnt-"), strings.HasPrefix(part, "sem-"):
			// Workflow revisions: one per applied update. (A semaphore's
			// grants are checked by its history: the final reads of its
			// permits are part of it.)
			wf := part
			if strings.HasPrefix(part, "res-") {
				wf = "wf-" + part
			}
			acked, unknown := 0, 0
			for _, o := range pops {
				if o.Client < 0 || o.In.Kind != faultmodel.Update && o.In.Kind != faultmodel.FencedUpdate {
					continue
				}
				switch o.Out.O {
				case faultmodel.OK:
					acked++
				case faultmodel.Unknown, faultmodel.Bad:
					unknown++
				}
			}
			got := int(final[wf].Rev - 1)
			if got < acked {
				lost += acked - got
				violate("%s: final revision %d, but %d updates were acknowledged", wf, final[wf].Rev, acked)
			} else if got > acked+unknown {
				violate("%s: final revision %d, but only %d updates were acknowledged and %d unknown", wf, final[wf].Rev, acked, unknown)
			}
			if !strings.HasPrefix(part, "res-") {
				continue
			}
			// The last acknowledged grant, unless a later call may have
			// released it (or its holder's renewal was refused), is
			// still held with its token.
			var last *faultmodel.Op
			for _, o := range pops {
				if o.Client >= 0 && o.In.Kind == faultmodel.Acquire && o.Out.O == faultmodel.OK {
					last = o
				}
			}
			if last == nil {
				continue
			}
			released := false
			for _, o := range pops {
				if o.Client >= 0 && o.In.Kind == faultmodel.Release && o.In.Token == last.Out.Token && o.Out.O != faultmodel.NotApplied {
					released = true
				}
			}
			if f := final[part]; !released && (f.O != faultmodel.OK || f.Owner != last.In.Owner || f.Token != last.Out.Token) {
				lost++
				violate("%s: acknowledged grant %s/%d not held at the end (final read: %+v)", part, last.In.Owner, last.Out.Token, f)
			}
		case strings.HasPrefix(part, "key-"):
			f := final[part]
			for _, o := range pops {
				if o.Client < 0 || o.Out.O != faultmodel.OK {
					continue
				}
				switch {
				case o.In.Kind == faultmodel.Complete:
					if f.O != faultmodel.OK || f.KState != contract.KeyCompleted || f.Ref != o.Out.Ref {
						lost++
						violate("%s: acknowledged completion %s not read back (final read: %+v)", part, o.Out.Ref, f)
					}
				case o.In.Kind == faultmodel.Claim && o.Out.Claim == contract.ClaimNew:
					released := false
					for _, r := range pops {
						if r.In.Kind == faultmodel.ReleaseKey && r.In.KeyToken == o.Out.KToken && r.Out.O != faultmodel.NotApplied {
							released = true
						}
					}
					if !released && (f.O != faultmodel.OK || f.KState == "" || f.Fp != o.In.Fp) {
						lost++
						violate("%s: acknowledged claim (fingerprint %s) not read back (final read: %+v)", part, o.In.Fp, f)
					}
				}
			}
		}
	}
	return lost
}
