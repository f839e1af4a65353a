package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"math/bits"
	"strconv"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/durable-go/durable"
)

// The operations of the mixed workload, in report order.
var benchOps = []string{"UpdateWorkflow", "ClaimKey+CompleteKey", "AcquireLease+ReleaseLease", "GetWorkflow"}

func runBench(ctx context.Context, args []string, e *env) error {
	fs, dsn := newFlags(e, "bench", "",
		"Run a mixed workload against the store: each worker cycles through a\n"+
			"compare-and-set of its own workflow (1 KiB snapshot), a read, a new idempotency\n"+
			"key claimed and completed, and a lease acquired and released. Live progress\n"+
			"goes to stderr; the report gives ops/s and p50/p95/p99 latency per operation.\n"+
			"Records go to a scope of their own (bench:<random>); at the end the workflows\n"+
			"are closed and keys are retained for an hour, so 'durable cleanup' removes them.")
	conc := fs.Int("concurrency", 8, "concurrent workers")
	dur := fs.Duration("duration", 10*time.Second, "how long to run")
	progress := fs.Duration("progress", time.Second, "progress interval on stderr (0 = none)")
	asJSON := jsonFlag(fs)
	if err := parse(fs, e, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return usagef("unexpected arguments: %v", fs.Args())
	}
	if *conc < 1 || *conc > 1024 {
		return usagef("--concurrency must be within 1 and 1024")
	}
	if *dur <= 0 {
		return usagef("--duration must be positive")
	}
	store, err := openStore(ctx, *dsn)
	if err != nil {
		return err
	}
	defer store.Close()
	rep, err := bench(ctx, store, *conc, *dur, *progress, e.stderr)
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(e, rep.json())
	}
	rep.print(e.stdout)
	return nil
}

type benchOpOut struct {
	Operation string  `json:"operation"`
	Ops       int64   `json:"ops"`
	OpsPerSec float64 `json:"ops_per_sec"`
	P50Ms     float64 `json:"p50_ms"`
	P95Ms     float64 `json:"p95_ms"`
	P99Ms     float64 `json:"p99_ms"`
	Errors    int64   `json:"errors"`
}

type benchOut struct {
	Workers    int          `json:"workers"`
	Seconds    float64      `json:"seconds"`
	Operations []benchOpOut `json:"operations"`
	TotalOps   int64        `json:"total_ops"`
	OpsPerSec  float64      `json:"ops_per_sec"`
}

func (r *benchReport) json() benchOut {
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	out := benchOut{Workers: r.workers, Seconds: r.elapsed.Seconds(), Operations: []benchOpOut{}}
	for _, op := range benchOps {
		h := r.hists[op]
		out.TotalOps += h.n
		out.Operations = append(out.Operations, benchOpOut{op, h.n, float64(h.n) / r.elapsed.Seconds(),
			ms(h.quantile(0.50)), ms(h.quantile(0.95)), ms(h.quantile(0.99)), r.errors[op]})
	}
	out.OpsPerSec = float64(out.TotalOps) / r.elapsed.Seconds()
	return out
}

type benchReport struct {
	elapsed time.Duration
	workers int
	hists   map[string]*histogram
	errors  map[string]int64
}

func bench(ctx context.Context, store *durable.Store, workers int, d time.Duration, every time.Duration, progress io.Writer) (*benchReport, error) {
	var rb [6]byte
	_, _ = rand.Read(rb[:])
	scope := durable.Scope("bench:" + hex.EncodeToString(rb[:]))
	snap := make([]byte, 1024)

	runCtx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	end, _ := runCtx.Deadline()
	var total atomic.Int64
	type result struct {
		hists  map[string]*histogram
		errors map[string]int64
		err    error
	}
	results := make([]result, workers)
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			r := result{hists: map[string]*histogram{}, errors: map[string]int64{}}
			for _, op := range benchOps {
				r.hists[op] = &histogram{}
			}
			defer func() { results[w] = r }()
			id := "wf-" + strconv.Itoa(w)
			wf, err := store.CreateWorkflow(runCtx, durable.Workflow{Scope: scope, ID: id, Status: durable.StatusRunning})
			if err != nil {
				r.err = err
				return
			}
			res := "lease-" + strconv.Itoa(w)
			owner := "bench-" + strconv.Itoa(w)
			for i := 0; runCtx.Err() == nil; i++ {
				op := benchOps[i%len(benchOps)]
				t0 := time.Now()
				var err error
				switch op {
				case "UpdateWorkflow":
					var next durable.Workflow
					next, err = store.UpdateWorkflow(runCtx, durable.Update{Scope: scope, ID: id, ExpectStatus: durable.StatusRunning,
						ExpectRevision: wf.Revision, Status: durable.StatusRunning, Snapshot: snap})
					if err == nil {
						wf = next
					}
				case "GetWorkflow":
					_, err = store.GetWorkflow(runCtx, scope, id)
				case "ClaimKey+CompleteKey":
					ref := durable.KeyRef{Scope: scope, Key: "k-" + strconv.Itoa(w) + "-" + strconv.Itoa(i)}
					var c durable.Claim
					c, err = store.ClaimKey(runCtx, durable.ClaimRequest{KeyRef: ref, Fingerprint: "sha256:bench", TTL: time.Minute})
					if err == nil {
						_, err = store.CompleteKey(runCtx, durable.Completion{KeyRef: ref, Token: c.Token,
							Outcome: durable.Outcome{Code: 201, Body: snap[:256]}, Retain: time.Hour})
					}
				case "AcquireLease+ReleaseLease":
					var l durable.Lease
					l, err = store.AcquireLease(runCtx, durable.LeaseRequest{Scope: scope, Resource: res, Owner: owner, TTL: 30 * time.Second})
					if err == nil {
						_, err = store.ReleaseLease(runCtx, l)
					}
				}
				// The run ended mid-operation: neither a sample nor an error.
				// The deadline is checked too: a client that sets its socket
				// deadline from the context (go-redis) can fail an operation
				// a moment before the context's own timer marks it done.
				if runCtx.Err() != nil || !time.Now().Before(end) {
					break
				}
				if err != nil {
					r.errors[op]++
					if durable.CodeOf(err) == durable.ErrUnavailable.Code {
						time.Sleep(10 * time.Millisecond)
					}
					continue
				}
				r.hists[op].record(time.Since(t0))
				total.Add(1)
			}
			// Close the workflow so that cleanup can remove it later.
			cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer ccancel()
			if cur, err := store.GetWorkflow(cctx, scope, id); err == nil {
				_, _ = store.UpdateWorkflow(cctx, durable.Update{Scope: scope, ID: id, ExpectStatus: cur.Status,
					ExpectRevision: cur.Revision, Status: durable.StatusClosed})
			}
		}(w)
	}

	done := make(chan struct{})
	var progressDone sync.WaitGroup
	if every > 0 {
		progressDone.Add(1)
		go func() {
			defer progressDone.Done()
			t := time.NewTicker(every)
			defer t.Stop()
			var last int64
			for {
				select {
				case <-done:
					return
				case <-t.C:
					n := total.Load()
					fmt.Fprintf(progress, "%5.1fs  %d ops  %.0f ops/s\n", time.Since(start).Seconds(), n, float64(n-last)/every.Seconds())
					last = n
				}
			}
		}()
	}
	wg.Wait()
	close(done)
	progressDone.Wait() // no progress line after the report
	rep := &benchReport{elapsed: time.Since(start), workers: workers, hists: map[string]*histogram{}, errors: map[string]int64{}}
	for _, op := range benchOps {
		rep.hists[op] = &histogram{}
	}
	for _, r := range results {
		if r.err != nil && ctx.Err() == nil {
			return nil, fmt.Errorf("setting up a worker: %w", r.err)
		}
		for op, h := range r.hists {
			rep.hists[op].merge(h)
		}
		for op, n := range r.errors {
			rep.errors[op] += n
		}
	}
	return rep, nil
}

func (r *benchReport) print(w io.Writer) {
	fmt.Fprintf(w, "%d workers, %.1fs\n", r.workers, r.elapsed.Seconds())
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "operation\tops\tops/s\tp50\tp95\tp99\terrors\t")
	var all int64
	for _, op := range benchOps {
		h := r.hists[op]
		all += h.n
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%s\t%s\t%s\t%d\t\n", op, h.n, float64(h.n)/r.elapsed.Seconds(),
			fmtDur(h.quantile(0.50)), fmtDur(h.quantile(0.95)), fmtDur(h.quantile(0.99)), r.errors[op])
	}
	fmt.Fprintf(tw, "total\t%d\t%.0f\t\t\t\t\t\n", all, float64(all)/r.elapsed.Seconds())
	tw.Flush()
}

func fmtDur(d time.Duration) string {
	switch {
	case d < time.Microsecond:
		return fmt.Sprintf("%dns", d.Nanoseconds())
	case d < time.Millisecond:
		return fmt.Sprintf("%.1fµs", float64(d)/float64(time.Microsecond))
	default:
		return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
	}
}

// histogram is a log-linear latency histogram: exact below 64 ns, then 32
// buckets per power of two (about 3% relative error), constant memory.
type histogram struct {
	counts [2048]int64
	n      int64
}

func bucketOf(v uint64) int {
	if v < 64 {
		return int(v)
	}
	e := bits.Len64(v) - 6 // v>>e is in [32, 64)
	return e*32 + int(v>>e)
}

// bucketLow is the smallest value that falls in bucket i.
func bucketLow(i int) uint64 {
	if i < 64 {
		return uint64(i)
	}
	e := i/32 - 1
	return uint64(i%32+32) << e
}

func (h *histogram) record(d time.Duration) {
	if d < 0 {
		d = 0
	}
	h.counts[bucketOf(uint64(d))]++
	h.n++
}

func (h *histogram) merge(o *histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
}

// quantile returns the lower bound of the bucket holding quantile q.
func (h *histogram) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := int64(q*float64(h.n-1)) + 1
	var seen int64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return time.Duration(bucketLow(i))
		}
	}
	return 0
}
