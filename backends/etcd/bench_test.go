package etcd

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/durable-go/durable/contract"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// BenchmarkFastPath runs each fast-path operation of the backend at 1 and
// 16 concurrent clients (goroutines sharing one *Backend and its client)
// against an in-process 3-member cluster, and in the same benchmark raw
// clientv3 doing the same work: the identical transactions (same keys,
// values, comparisons and operations) and the same etcd lease grants.
// Every client alternates the two op by op, so load and drift hit both
// alike.
//
//	durable-µs  mean latency of the backend's call
//	raw-µs      mean latency of the raw clientv3 calls doing the same work
//	ratio       raw-µs ÷ durable-µs: the backend's speed relative to raw
//	            clientv3 (1.00 = no overhead)
//	ns/op       wall time per call of either side (the mixed throughput)
//
// See BENCHMARKS.md for the command and figures.
func BenchmarkFastPath(b *testing.B) {
	c := startCluster(b, 3)
	cli := c.client(b)
	be, err := NewBackend(cli, Options{Prefix: "bench", Tolerance: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = be.Close() })
	ops := benchOps(be)
	for _, op := range ops {
		for _, clients := range []int{1, 16} {
			b.Run(fmt.Sprintf("%s/clients=%d", op.name, clients), func(b *testing.B) {
				runPair(b, be, op, clients)
			})
		}
	}
}

// benchOp is one operation: setup prepares what n iterations per client of
// one variant need (untimed), run does iteration i of client g.
type benchOp struct {
	name  string
	setup func(ctx context.Context, v *variant, clients, n int) error
	run   func(ctx context.Context, v *variant, g, i int) error
}

// variant is the state of one side (durable or raw) of one benchmark.
type variant struct {
	raw    bool
	be     *Backend
	run    string // unique per benchmark run and side: ids never repeat
	leases [][]contract.Lease
	tokens [][]string
	revs   []int64
}

func (v *variant) id(kind string, g, i int) string {
	return fmt.Sprintf("%s-%s-%d-%d", v.run, kind, g, i)
}

var benchSeq sync.Mutex
var benchRun int

func runPair(b *testing.B, be *Backend, op benchOp, clients int) {
	ctx := context.Background()
	benchSeq.Lock()
	benchRun++
	run := benchRun
	benchSeq.Unlock()
	n := max(b.N/clients, 1)
	sides := [2]*variant{
		{be: be, run: fmt.Sprintf("d%d", run)},
		{be: be, raw: true, run: fmt.Sprintf("r%d", run)},
	}
	b.StopTimer()
	for _, v := range sides {
		if op.setup != nil {
			if err := op.setup(ctx, v, clients, n); err != nil {
				b.Fatalf("setup: %v", err)
			}
		}
	}
	// Every client alternates the two sides op by op (durable first on
	// even iterations, raw first on odd ones) and times each call, so both
	// meet the same load, contention and drift.
	var mu sync.Mutex
	var spent [2]time.Duration
	var wg sync.WaitGroup
	errs := make([]error, clients)
	start := time.Now()
	for g := range clients {
		wg.Go(func() {
			var mine [2]time.Duration
			defer func() {
				mu.Lock()
				spent[0] += mine[0]
				spent[1] += mine[1]
				mu.Unlock()
			}()
			for i := range n {
				for k := range 2 {
					s := (i + k) % 2
					t0 := time.Now()
					if err := op.run(ctx, sides[s], g, i); err != nil {
						errs[g] = fmt.Errorf("raw=%v: %w", sides[s].raw, err)
						return
					}
					mine[s] += time.Since(t0)
				}
			}
		})
	}
	wg.Wait()
	wall := time.Since(start)
	for _, err := range errs {
		if err != nil {
			b.Fatalf("%s: %v", op.name, err)
		}
	}
	calls := float64(n * clients)
	d, r := float64(spent[0].Nanoseconds())/calls, float64(spent[1].Nanoseconds())/calls
	b.ReportMetric(float64(wall.Nanoseconds())/(2*calls), "ns/op")
	b.ReportMetric(d/1e3, "durable-µs")
	b.ReportMetric(r/1e3, "raw-µs")
	b.ReportMetric(r/d, "ratio")
}

func benchOps(be *Backend) []benchOp {
	const ttl = 30 * time.Second
	mkWorkflows := func(ctx context.Context, v *variant, clients, n int) error {
		v.revs = make([]int64, clients)
		for g := range clients {
			if _, err := be.CreateWorkflow(ctx, contract.Workflow{ID: v.id("wf", g, 0), Status: contract.StatusRunning}); err != nil {
				return err
			}
			v.revs[g] = 1
		}
		return nil
	}
	mkLeases := func(ctx context.Context, v *variant, clients, n int) error {
		v.leases = make([][]contract.Lease, clients)
		for g := range clients {
			l, err := be.AcquireLease(ctx, contract.LeaseRequest{Resource: v.id("res", g, 0), Owner: "owner", TTL: ttl})
			if err != nil {
				return err
			}
			v.leases[g] = []contract.Lease{l}
		}
		return nil
	}
	snap := make([]byte, 256)
	return []benchOp{
		{
			name: "CreateWorkflow",
			run: func(ctx context.Context, v *variant, g, i int) error {
				w := contract.Workflow{ID: v.id("wf", g, i), Status: contract.StatusRunning, Snapshot: snap}
				if !v.raw {
					_, err := be.CreateWorkflow(ctx, w)
					return err
				}
				now := be.clockNow()
				wk := be.key(nsWorkflow, "", w.ID)
				r, err := be.cli.Txn(ctx).If(absent(wk)).Then(
					clientv3.OpPut(wk, string(encodeWorkflow(w.Status, w.RequestID, now, w.Snapshot))),
					clientv3.OpPut(be.key(nsCreated, "", w.ID), string(putTime(nil, now))),
				).Commit()
				return rawCheck(r, err)
			},
		},
		{
			name:  "GetWorkflow",
			setup: mkWorkflows,
			run: func(ctx context.Context, v *variant, g, i int) error {
				id := v.id("wf", g, 0)
				if !v.raw {
					_, err := be.GetWorkflow(ctx, "", id)
					return err
				}
				r, err := be.cli.Txn(ctx).Then(clientv3.OpGet(be.key(nsWorkflow, "", id)), clientv3.OpGet(be.key(nsCreated, "", id))).Commit()
				return rawCheck(r, err)
			},
		},
		{
			name:  "UpdateWorkflow",
			setup: mkWorkflows,
			run: func(ctx context.Context, v *variant, g, i int) error {
				id := v.id("wf", g, 0)
				rev := v.revs[g]
				v.revs[g]++
				if !v.raw {
					_, err := be.UpdateWorkflow(ctx, contract.Update{ID: id, ExpectStatus: contract.StatusRunning, ExpectRevision: rev, Status: contract.StatusRunning, Snapshot: snap})
					return err
				}
				return rawUpdate(ctx, be, id, rev, nil, snap)
			},
		},
		{
			name: "UpdateWorkflowFenced",
			setup: func(ctx context.Context, v *variant, clients, n int) error {
				if err := mkWorkflows(ctx, v, clients, n); err != nil {
					return err
				}
				return mkLeases(ctx, v, clients, n)
			},
			run: func(ctx context.Context, v *variant, g, i int) error {
				id := v.id("wf", g, 0)
				rev := v.revs[g]
				v.revs[g]++
				l := v.leases[g][0]
				if !v.raw {
					_, err := be.UpdateWorkflow(ctx, contract.Update{ID: id, ExpectStatus: contract.StatusRunning, ExpectRevision: rev, Status: contract.StatusRunning, Snapshot: snap, Fence: l.Fence()})
					return err
				}
				return rawUpdate(ctx, be, id, rev, l.Fence(), snap)
			},
		},
		{
			name: "ClaimKey",
			run: func(ctx context.Context, v *variant, g, i int) error {
				ref := contract.KeyRef{Key: v.id("key", g, i)}
				if !v.raw {
					_, err := be.ClaimKey(ctx, contract.ClaimRequest{KeyRef: ref, Fingerprint: "fp", TTL: ttl})
					return err
				}
				now := be.clockNow()
				lr, err := be.cli.Grant(ctx, ceilSec(ttl+be.tol))
				if err != nil {
					return err
				}
				kk := be.keyKeys(ref)
				r, err := be.cli.Txn(ctx).If(absent(kk.rec)).Then(
					clientv3.OpPut(kk.rec, string(encodeKey(now, "fp", ""))),
					clientv3.OpPut(kk.tok, string(encodeToken(newToken(), stateClaimed, now.Add(ttl)))),
					clientv3.OpPut(kk.busy, "", clientv3.WithLease(lr.ID)),
					clientv3.OpDelete(kk.out),
				).Else(kk.readOps()...).Commit()
				return rawCheck(r, err)
			},
		},
		{
			name: "CompleteKey",
			setup: func(ctx context.Context, v *variant, clients, n int) error {
				v.tokens = make([][]string, clients)
				var wg sync.WaitGroup
				errs := make([]error, clients)
				for g := range clients {
					wg.Go(func() {
						for i := range n {
							c, err := be.ClaimKey(ctx, contract.ClaimRequest{KeyRef: contract.KeyRef{Key: v.id("key", g, i)}, Fingerprint: "fp", TTL: ttl})
							if err != nil {
								errs[g] = err
								return
							}
							v.tokens[g] = append(v.tokens[g], c.Token)
						}
					})
				}
				wg.Wait()
				for _, err := range errs {
					if err != nil {
						return err
					}
				}
				return nil
			},
			run: func(ctx context.Context, v *variant, g, i int) error {
				ref := contract.KeyRef{Key: v.id("key", g, i)}
				tok := v.tokens[g][i]
				out := contract.Outcome{Code: 200, Body: snap, Header: map[string][]string{"Content-Type": {"application/json"}}}
				if !v.raw {
					_, err := be.CompleteKey(ctx, contract.Completion{KeyRef: ref, Token: tok, Outcome: out, Retain: time.Hour})
					return err
				}
				now := be.clockNow()
				lr, err := be.cli.Grant(ctx, ceilSec(time.Hour))
				if err != nil {
					return err
				}
				kk := be.keyKeys(ref)
				r, err := be.cli.Txn(ctx).If(hasPrefix(kk.tok, tokenPrefix(tok, stateClaimed))...).Then(
					clientv3.OpPut(kk.tok, string(encodeToken(tok, stateCompleted, time.Time{}))),
					clientv3.OpPut(kk.out, string(encodeOutcome(now, now.Add(time.Hour), &out)), clientv3.WithLease(lr.ID)),
					clientv3.OpDelete(kk.busy),
					clientv3.OpGet(kk.rec),
				).Else(kk.readOps()...).Commit()
				return rawCheck(r, err)
			},
		},
		{
			name: "GetKey",
			setup: func(ctx context.Context, v *variant, clients, n int) error {
				for g := range clients {
					ref := contract.KeyRef{Key: v.id("key", g, 0)}
					c, err := be.ClaimKey(ctx, contract.ClaimRequest{KeyRef: ref, Fingerprint: "fp", TTL: ttl})
					if err != nil {
						return err
					}
					if _, err := be.CompleteKey(ctx, contract.Completion{KeyRef: ref, Token: c.Token, Outcome: contract.Outcome{Code: 200, Body: snap}, Retain: time.Hour}); err != nil {
						return err
					}
				}
				return nil
			},
			run: func(ctx context.Context, v *variant, g, i int) error {
				ref := contract.KeyRef{Key: v.id("key", g, 0)}
				if !v.raw {
					_, err := be.GetKey(ctx, ref)
					return err
				}
				r, err := be.cli.Txn(ctx).Then(be.keyKeys(ref).readOps()...).Commit()
				return rawCheck(r, err)
			},
		},
		{
			name: "AcquireLease",
			run: func(ctx context.Context, v *variant, g, i int) error {
				req := contract.LeaseRequest{Resource: v.id("res", g, i), Owner: "owner", TTL: ttl}
				if !v.raw {
					_, err := be.AcquireLease(ctx, req)
					return err
				}
				now := be.clockNow()
				hold, busy, err := rawGrant2(ctx, be, ttl)
				if err != nil {
					return err
				}
				lk := be.leaseKeys("", req.Resource)
				r, err := be.cli.Txn(ctx).If(absent(lk.rec)).Then(
					clientv3.OpPut(lk.rec, string(encodeLease(req.Owner, now, now.Add(ttl), req.Value))),
					clientv3.OpPut(lk.hold, req.Owner, clientv3.WithLease(hold)),
					clientv3.OpPut(lk.busy, "", clientv3.WithLease(busy)),
				).Else(clientv3.OpGet(lk.rec, clientv3.WithKeysOnly()), clientv3.OpGet(lk.busy, clientv3.WithKeysOnly())).Commit()
				return rawCheck(r, err)
			},
		},
		{
			// A whole lease cycle on a fresh resource: AcquireLease, then
			// ReleaseLease of the grant.
			name: "AcquireRelease",
			run: func(ctx context.Context, v *variant, g, i int) error {
				req := contract.LeaseRequest{Resource: v.id("cyc", g, i), Owner: "owner", TTL: ttl}
				if !v.raw {
					l, err := be.AcquireLease(ctx, req)
					if err != nil {
						return err
					}
					ok, err := be.ReleaseLease(ctx, l)
					if err == nil && !ok {
						err = fmt.Errorf("release failed")
					}
					return err
				}
				now := be.clockNow()
				hold, busy, err := rawGrant2(ctx, be, ttl)
				if err != nil {
					return err
				}
				lk := be.leaseKeys("", req.Resource)
				r, err := be.cli.Txn(ctx).If(absent(lk.rec)).Then(
					clientv3.OpPut(lk.rec, string(encodeLease(req.Owner, now, now.Add(ttl), req.Value))),
					clientv3.OpPut(lk.hold, req.Owner, clientv3.WithLease(hold)),
					clientv3.OpPut(lk.busy, "", clientv3.WithLease(busy)),
				).Else(clientv3.OpGet(lk.rec, clientv3.WithKeysOnly()), clientv3.OpGet(lk.busy, clientv3.WithKeysOnly())).Commit()
				if err := rawCheck(r, err); err != nil {
					return err
				}
				r, err = be.cli.Txn(ctx).If(append(hasPrefix(lk.rec, ownerPrefix(req.Owner)),
					clientv3.Compare(clientv3.CreateRevision(lk.rec), "=", r.Header.Revision))...).Then(
					clientv3.OpDelete(lk.rec), clientv3.OpDelete(lk.hold), clientv3.OpDelete(lk.busy),
				).Commit()
				if err != nil {
					return err
				}
				if !r.Succeeded {
					return fmt.Errorf("release failed")
				}
				return nil
			},
		},
		{
			// A permit's whole cycle on a semaphore of 8 whose first 3
			// permits are held: AcquirePermit (the grants and the read of
			// the permits together, then the transaction granting permit
			// 4 while 1–3 are held), then ReleaseLease.
			name: "AcquirePermitRelease",
			setup: func(ctx context.Context, v *variant, clients, n int) error {
				for g := range clients {
					for range 3 {
						if _, err := be.AcquirePermit(ctx, contract.PermitRequest{Resource: v.id("sem", g, 0), Owner: "holder", TTL: ttl, Permits: 8}); err != nil {
							return err
						}
					}
				}
				return nil
			},
			run: func(ctx context.Context, v *variant, g, i int) error {
				req := contract.PermitRequest{Resource: v.id("sem", g, 0), Owner: "owner", TTL: ttl, Permits: 8}
				if !v.raw {
					l, err := be.AcquirePermit(ctx, req)
					if err != nil {
						return err
					}
					if l.Resource != contract.PermitResource(req.Resource, 4) {
						return fmt.Errorf("granted %s", l.Resource)
					}
					ok, err := be.ReleaseLease(ctx, l)
					if err == nil && !ok {
						err = fmt.Errorf("release failed")
					}
					return err
				}
				now := be.clockNow()
				reads := be.permitReads("", req.Resource)
				var hold, busy clientv3.LeaseID
				var gerr error
				var wg sync.WaitGroup
				wg.Go(func() { hold, busy, gerr = rawGrant2(ctx, be, ttl) })
				r, err := be.cli.Txn(ctx).Then(reads...).Commit()
				wg.Wait()
				if err != nil {
					return err
				}
				if gerr != nil {
					return gerr
				}
				free, _ := be.permitStateOf("", req.Resource, r, 0, req.Permits).lowestFree()
				lk := be.leaseKeys("", contract.PermitResource(req.Resource, free))
				cmps := []clientv3.Cmp{absent(lk.rec)}
				for m := 1; m < free; m++ {
					cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(be.key(nsLeaseBusy, "", contract.PermitResource(req.Resource, m))), ">", 0))
				}
				r, err = be.cli.Txn(ctx).If(cmps...).Then(
					clientv3.OpPut(lk.rec, string(encodeLease(req.Owner, now, now.Add(ttl), req.Value))),
					clientv3.OpPut(lk.hold, req.Owner, clientv3.WithLease(hold)),
					clientv3.OpPut(lk.busy, "", clientv3.WithLease(busy)),
				).Else(reads...).Commit()
				if err := rawCheck(r, err); err != nil {
					return err
				}
				r, err = be.cli.Txn(ctx).If(append(hasPrefix(lk.rec, ownerPrefix(req.Owner)),
					clientv3.Compare(clientv3.CreateRevision(lk.rec), "=", r.Header.Revision))...).Then(
					clientv3.OpDelete(lk.rec), clientv3.OpDelete(lk.hold), clientv3.OpDelete(lk.busy),
				).Commit()
				if err != nil {
					return err
				}
				if !r.Succeeded {
					return fmt.Errorf("release failed")
				}
				return nil
			},
		},
		{
			name:  "RenewLease",
			setup: mkLeases,
			run: func(ctx context.Context, v *variant, g, i int) error {
				l := v.leases[g][0]
				if !v.raw {
					nl, err := be.RenewLease(ctx, l, ttl)
					v.leases[g][0] = nl
					return err
				}
				now := be.clockNow()
				hold, busy, err := rawGrant2(ctx, be, ttl)
				if err != nil {
					return err
				}
				lk := be.leaseKeys("", l.Resource)
				pfx := leasePrefix(l.Owner, l.AcquiredAt, l.Value)
				cmps := append(be.heldCmps(lk, l),
					clientv3.Compare(clientv3.Value(lk.rec), ">", pfx),
					clientv3.Compare(clientv3.Value(lk.rec), "<", pfx+"\x01"))
				r, err := be.cli.Txn(ctx).If(cmps...).Then(
					clientv3.OpGet(lk.hold, clientv3.WithKeysOnly()),
					clientv3.OpGet(lk.busy, clientv3.WithKeysOnly()),
					clientv3.OpPut(lk.rec, string(encodeLease(l.Owner, l.AcquiredAt, now.Add(ttl), l.Value))),
					clientv3.OpPut(lk.hold, l.Owner, clientv3.WithLease(hold)),
					clientv3.OpPut(lk.busy, "", clientv3.WithLease(busy)),
				).Else(clientv3.OpGet(lk.rec), clientv3.OpGet(lk.hold)).Commit()
				if err := rawCheck(r, err); err != nil {
					return err
				}
				var old []clientv3.LeaseID
				for i := 0; i < 2; i++ {
					if kv := rangeKV(r, i); kv != nil {
						old = append(old, clientv3.LeaseID(kv.Lease))
					}
				}
				be.revokeLater(old...) // the same background revocation the backend does
				return nil
			},
		},
	}
}

func rawCheck(r *clientv3.TxnResponse, err error) error {
	if err != nil {
		return err
	}
	if !r.Succeeded && len(r.Responses) > 0 && r.Responses[0].GetResponsePut() != nil {
		return fmt.Errorf("transaction failed")
	}
	return nil
}

func rawGrant2(ctx context.Context, be *Backend, ttl time.Duration) (clientv3.LeaseID, clientv3.LeaseID, error) {
	hs, bs := be.leaseTTLs(ttl)
	var hold, busy *clientv3.LeaseGrantResponse
	var err1, err2 error
	var wg sync.WaitGroup
	wg.Go(func() { busy, err2 = be.cli.Grant(ctx, bs) })
	hold, err1 = be.cli.Grant(ctx, hs)
	wg.Wait()
	if err1 != nil {
		return 0, 0, err1
	}
	if err2 != nil {
		return 0, 0, err2
	}
	return hold.ID, busy.ID, nil
}

func rawUpdate(ctx context.Context, be *Backend, id string, rev int64, f *contract.Fence, snap []byte) error {
	now := be.clockNow()
	wk, ck := be.key(nsWorkflow, "", id), be.key(nsCreated, "", id)
	els := []clientv3.Op{clientv3.OpGet(wk), clientv3.OpGet(ck)}
	cmps := append(hasPrefix(wk, statusPrefix(contract.StatusRunning)), clientv3.Compare(clientv3.Version(wk), "=", rev))
	if f != nil {
		els = append(els, clientv3.OpGet(be.key(nsLeaseHold, "", f.Resource)))
		cmps = append(cmps, be.fenceCmps("", f)...)
	}
	r, err := be.cli.Txn(ctx).If(cmps...).Then(
		clientv3.OpPut(wk, string(encodeWorkflow(contract.StatusRunning, "", now, snap))),
		clientv3.OpGet(ck),
		clientv3.OpGet(wk, clientv3.WithKeysOnly()),
	).Else(els...).Commit()
	if err != nil {
		return err
	}
	if !r.Succeeded {
		return fmt.Errorf("update failed")
	}
	return nil
}
