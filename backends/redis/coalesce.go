package redis

import (
	"context"
	"errors"
	"strconv"
	"sync"

	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/coalesce"
	goredis "github.com/redis/go-redis/v9"
)

// CoalesceMode says how a backend sends the scripts its callers send at
// the same time (see the package documentation, "Shared connections").
type CoalesceMode int

const (
	// CoalesceOn (the default) sends the scripts a node gets while
	// others of the backend are in flight there on one connection of the
	// backend's own, many in flight at once: the scripts that arrive
	// while a write is in the kernel go out together in the next one. A
	// script alone goes on a pooled connection, as with CoalesceOff.
	// Each script stays its own atomic step. With
	// Options.Wait, or a client whose options the backend's connection
	// cannot reproduce (credential providers, OnConnect), it is
	// CoalescePipeline.
	CoalesceOn CoalesceMode = iota
	// CoalesceOff sends every script alone on a pooled connection.
	CoalesceOff
	// CoalescePipeline sends the scripts that wait while
	// Options.CoalesceInFlight pipelines are in flight to the same node
	// together, as one pipeline on one pooled connection.
	CoalescePipeline
)

// DefaultCoalesceInFlight is how many pipelines a backend keeps in flight
// at once per node, with CoalescePipeline, when Options.CoalesceInFlight
// is 0 (the DSN's coalesce_inflight). See BENCHMARKS.md.
const DefaultCoalesceInFlight = 4

// maxCoalesceInFlight bounds Options.CoalesceInFlight (and the DSN's
// coalesce_inflight): each pipeline in flight holds a pooled connection.
const maxCoalesceInFlight = 64

// CoalesceStats counts a backend's coalesced scripts: the writes of the
// shared connections and the pipelines that sent them (a pipeline may
// hold one script; a script alone under CoalesceOn takes a pooled
// connection and is not counted), the scripts they held, and the
// largest. All are zero when the backend does not coalesce.
type CoalesceStats struct{ Batches, Calls, Largest int64 }

// CoalesceStats returns the counts of b's coalesced scripts so far, over
// every node and both paths (shared connections and pipelines).
func (b *Backend) CoalesceStats() CoalesceStats {
	var out CoalesceStats
	add := func(batches, calls, largest int64) {
		out.Batches += batches
		out.Calls += calls
		out.Largest = max(out.Largest, largest)
	}
	b.batchers.Range(func(_, v any) bool {
		s := v.(*coalesce.Batcher[runItem, any]).Stats()
		add(s.Batches, s.Calls, s.Largest)
		return true
	})
	b.muxes.Range(func(_, v any) bool {
		if m := v.(*mux); m != nil {
			add(m.batches.Load(), m.calls.Load(), m.largest.Load())
		}
		return true
	})
	return out
}

// runItem is one script for a node's batcher.
type runItem struct {
	node  *goredis.Client
	s     *goredis.Script
	write bool
	keys  []string
	args  []any
}

// batcher returns the batcher of node (made on first use).
func (b *Backend) batcher(node *goredis.Client) *coalesce.Batcher[runItem, any] {
	addr := node.Options().Addr
	if v, ok := b.batchers.Load(addr); ok {
		return v.(*coalesce.Batcher[runItem, any])
	}
	n := b.opts.CoalesceInFlight
	if n == 0 {
		n = DefaultCoalesceInFlight
	}
	v, _ := b.batchers.LoadOrStore(addr, coalesce.New(b.flushRuns, coalesce.Options{MaxInFlight: n}))
	return v.(*coalesce.Batcher[runItem, any])
}

// runCoalesced runs it through its node's batcher.
func (b *Backend) runCoalesced(ctx context.Context, bt *coalesce.Batcher[runItem, any], it runItem) (any, error) {
	v, err := bt.Do(ctx, it)
	var left *coalesce.LeftError
	if errors.As(err, &left) {
		if left.Sent && it.write {
			return nil, &contract.Error{Code: contract.OutcomeUnknown, Msg: "context ended while the request was in flight", Err: left.Err}
		}
		return nil, &contract.Error{Code: contract.Canceled, Msg: "context ended", Err: left.Err}
	}
	return v, err
}

// flushRuns sends a batch of scripts for one node. One script runs as it
// would without a batcher (runDirect). Several go in one pipeline on one
// connection, followed (with Options.Wait, when any may write) by one
// WAIT that covers them all; each reply is its script's own. A script
// the node did not run — NOSCRIPT after a restart or SCRIPT FLUSH, a
// cluster's MOVED or ASK — runs again alone, where those are handled.
// A failure of the connection is each script's failure, classified as it
// would be alone: OutcomeUnknown for a write once it may have been sent.
func (b *Backend) flushRuns(ctx context.Context, items []runItem) []coalesce.Result[any] {
	out := make([]coalesce.Result[any], len(items))
	if len(items) == 1 {
		it := items[0]
		out[0].Val, out[0].Err = b.runDirect(ctx, it.s, it.write, it.keys, it.args)
		return out
	}
	pipe := items[0].node.Pipeline()
	cmds := make([]*goredis.Cmd, len(items))
	writes := false
	for i, it := range items {
		cmds[i] = pipe.EvalSha(ctx, it.s.Hash(), it.keys, it.args...)
		writes = writes || it.write
	}
	var wait *goredis.Cmd
	if writes && b.opts.Wait > 0 {
		wait = pipe.Do(ctx, "WAIT", b.opts.Wait, b.opts.WaitTimeout.Milliseconds())
	}
	_, _ = pipe.Exec(ctx)
	waitErr := error(nil)
	if wait != nil {
		waitErr = b.waitResult(wait)
	}
	var again sync.WaitGroup
	for i, c := range cmds {
		it := items[i]
		err := c.Err()
		switch {
		case err == nil && it.write && waitErr != nil:
			out[i].Err = waitErr
		case err == nil:
			out[i].Val = c.Val()
		case goredis.HasErrorPrefix(err, "NOSCRIPT") || redirected(err):
			// Not run: run it again alone, where reloading the script
			// and following the cluster's redirection are handled.
			again.Add(1)
			go func() {
				defer again.Done()
				out[i].Val, out[i].Err = b.runDirect(ctx, it.s, it.write, it.keys, it.args)
			}()
		default:
			out[i].Err = b.fail(ctx, err, it.write)
		}
	}
	again.Wait()
	return out
}

// waitResult judges a WAIT that followed writes: nil when enough replicas
// acknowledged them, else the OutcomeUnknown every write it covered gets.
func (b *Backend) waitResult(w *goredis.Cmd) error {
	if err := w.Err(); err != nil {
		return &contract.Error{Code: contract.OutcomeUnknown, Msg: "the write applied on the primary but WAIT failed: replicas may not have it", Err: err}
	}
	if n, err := w.Int64(); err != nil || n < int64(b.opts.Wait) {
		return &contract.Error{Code: contract.OutcomeUnknown,
			Msg: "the write applied on the primary but fewer replicas than wait acknowledged it within wait_timeout; a failover may lose it"}
	}
	return nil
}

func parseCoalesce(v string) (CoalesceMode, bool) {
	switch v {
	case "on":
		return CoalesceOn, true
	case "off":
		return CoalesceOff, true
	case "pipeline":
		return CoalescePipeline, true
	}
	return 0, false
}

func parseCoalesceInFlight(v string) (int, bool) {
	n, err := strconv.Atoi(v)
	return n, err == nil && n >= 1 && n <= maxCoalesceInFlight
}
