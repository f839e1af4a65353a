package postgres

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/pgtest"
)

// BenchmarkCoalesce compares writes with coalescing off and on (issue 31),
// on a private cluster with fsync on (as a user's server runs), at 1 and
// 16 clients of one backend, in interleaved rounds: each round runs every
// route (coalesce=off, then coalesce=on with each in-flight limit) for one
// leg of every operation. The operations, each on rows of its own client:
//
//	claim+complete  ClaimKey of a fresh key then CompleteKey (pairs/s)
//	RenewLease      renewal of the client's own lease
//	UpdateWorkflow  an update of the client's own workflow
//
// It prints, per operation and number of clients, the median ops/s of
// each route, the ratio on ÷ off and the average batch of the on routes
// (writes per batch sent; 1.00 means every write went alone).
//
//	DURABLE_REQUIRE_POSTGRES=1 go test -run '^$' -bench BenchmarkCoalesce -benchtime 1x ./backends/postgres/
//
// Knobs: DURABLE_COALESCE_SECONDS (a leg, default 3),
// DURABLE_COALESCE_ROUNDS (default 3), DURABLE_COALESCE_CLIENTS (default
// "1,16"), DURABLE_COALESCE_INFLIGHT (the in-flight limits of the on
// routes, default "2"; "1,2,4" compares them), DURABLE_COALESCE_OPS (a
// comma-separated subset of the operations), DURABLE_COALESCE_SINGLE=1 (a
// route single/N beside each on/N, sending every write as its own
// statement: coalescing without many-rows statements).
func BenchmarkCoalesce(b *testing.B) {
	leg := time.Duration(coalesceEnvInts(b, "DURABLE_COALESCE_SECONDS", "3")[0]) * time.Second
	rounds := coalesceEnvInts(b, "DURABLE_COALESCE_ROUNDS", "3")[0]
	clientCounts := coalesceEnvInts(b, "DURABLE_COALESCE_CLIENTS", "1,16")
	inflights := coalesceEnvInts(b, "DURABLE_COALESCE_INFLIGHT", strconv.Itoa(DefaultCoalesceInFlight))
	srv := pgtest.StartPrivate(b)
	ctx := context.Background()
	// DURABLE_COALESCE_FSYNC=off measures with commits that cost no
	// flush: what the statements alone allow on this machine.
	fsync := "on"
	if os.Getenv("DURABLE_COALESCE_FSYNC") == "off" {
		fsync = "off"
	}
	for _, sql := range []string{`ALTER SYSTEM SET fsync = ` + fsync, `ALTER SYSTEM SET full_page_writes = ` + fsync, `ALTER SYSTEM SET synchronous_commit = ` + fsync, `SELECT pg_reload_conf()`} {
		if err := srv.Exec(ctx, sql); err != nil {
			b.Fatal(err)
		}
	}
	schema := srv.Schema(b)
	type route struct {
		name     string
		inflight int // 0: coalesce=off
		single   bool
		b        *Backend
	}
	routes := []route{{name: "off"}}
	for _, n := range inflights {
		routes = append(routes, route{name: fmt.Sprintf("on/%d", n), inflight: n})
		if os.Getenv("DURABLE_COALESCE_SINGLE") == "1" {
			routes = append(routes, route{name: fmt.Sprintf("single/%d", n), inflight: n, single: true})
		}
	}
	for i, r := range routes {
		param := "&coalesce=off"
		if r.inflight > 0 {
			param = "&coalesce=on&coalesce_inflight=" + strconv.Itoa(r.inflight)
		}
		be, err := openDSN(ctx, srv.DSN()+"&pool_max_conns=20&listen=off&schema="+schema+param)
		if err != nil {
			b.Fatal(err)
		}
		defer be.Close()
		if be.Coalescing() != (r.inflight > 0) {
			b.Fatalf("%s: Coalescing() = %v", r.name, be.Coalescing())
		}
		be.singleOnly = r.single
		routes[i].b = be
	}
	maxClients := slices.Max(clientCounts)
	// The rows of each route and client: a lease and a workflow.
	type rows struct {
		leases    []contract.Lease
		workflows []string
	}
	rs := make([]rows, len(routes))
	for i, r := range routes {
		for c := range maxClients {
			l, err := r.b.AcquireLease(ctx, contract.LeaseRequest{Resource: fmt.Sprintf("r%d-%d", i, c), Owner: "o", TTL: time.Hour})
			if err != nil {
				b.Fatal(err)
			}
			rs[i].leases = append(rs[i].leases, l)
			id := fmt.Sprintf("w%d-%d", i, c)
			if _, err := r.b.CreateWorkflow(ctx, contract.Workflow{ID: id, Status: "s"}); err != nil {
				b.Fatal(err)
			}
			rs[i].workflows = append(rs[i].workflows, id)
		}
	}
	var seq atomic.Int64
	type op struct {
		name string
		run  func(be *Backend, rw *rows, client int) error
	}
	ops := []op{
		{"claim+complete", func(be *Backend, _ *rows, client int) error {
			k := contract.KeyRef{Key: fmt.Sprintf("k%d-%d", client, seq.Add(1))}
			c, err := be.ClaimKey(ctx, contract.ClaimRequest{KeyRef: k, Fingerprint: "f", TTL: time.Minute})
			if err != nil {
				return err
			}
			if c.Kind != contract.ClaimNew {
				return fmt.Errorf("ClaimKey: %v", c.Kind)
			}
			_, err = be.CompleteKey(ctx, contract.Completion{KeyRef: k, Token: c.Token, Outcome: contract.Outcome{Code: 200}, Retain: time.Hour})
			return err
		}},
		{"RenewLease", func(be *Backend, rw *rows, client int) error {
			_, err := be.RenewLease(ctx, rw.leases[client], time.Hour)
			return err
		}},
		{"UpdateWorkflow", func(be *Backend, rw *rows, client int) error {
			_, err := be.UpdateWorkflow(ctx, contract.Update{ID: rw.workflows[client], ExpectStatus: "s", Status: "s"})
			return err
		}},
	}
	if only := os.Getenv("DURABLE_COALESCE_OPS"); only != "" {
		ops = slices.DeleteFunc(ops, func(o op) bool { return !slices.Contains(strings.Split(only, ","), o.name) })
	}
	type cell struct {
		tps            []float64
		batches, calls int64
	}
	results := map[string]*cell{} // op/clients/route
	for round := range rounds {
		for _, o := range ops {
			for _, n := range clientCounts {
				for i, r := range routes {
					before := r.b.CoalesceStats()
					tps := coalesceRun(b, n, leg, func(client int) error { return o.run(r.b, &rs[i], client) })
					after := r.b.CoalesceStats()
					key := fmt.Sprintf("%s/%d/%s", o.name, n, r.name)
					c := results[key]
					if c == nil {
						c = &cell{}
						results[key] = c
					}
					c.tps = append(c.tps, tps)
					if n := after.RolledBack - before.RolledBack; n > 0 {
						// Nothing here fails: a batch rolled back is a broken
						// statement, and the leg measured every write twice.
						b.Errorf("%s: %d batches rolled back", key, n)
					}
					c.batches += after.Batches - before.Batches
					c.calls += after.Calls - before.Calls
				}
			}
		}
		b.Logf("round %d of %d done", round+1, rounds)
	}
	var out strings.Builder
	fmt.Fprintf(&out, "\nCoalesced writes: median ops/s of %d rounds of %v legs, fsync %s\n", rounds, leg, fsync)
	fmt.Fprintf(&out, "%-16s %7s %10s", "operation", "clients", "off")
	for _, r := range routes[1:] {
		fmt.Fprintf(&out, " %10s %6s %6s", r.name, "ratio", "batch")
	}
	out.WriteString("\n")
	for _, o := range ops {
		for _, n := range clientCounts {
			off := coalesceMedian(results[fmt.Sprintf("%s/%d/off", o.name, n)].tps)
			fmt.Fprintf(&out, "%-16s %7d %10.0f", o.name, n, off)
			for _, r := range routes[1:] {
				c := results[fmt.Sprintf("%s/%d/%s", o.name, n, r.name)]
				on := coalesceMedian(c.tps)
				batch := 0.0
				if c.batches > 0 {
					batch = float64(c.calls) / float64(c.batches)
				}
				fmt.Fprintf(&out, " %10.0f %6.2f %6.2f", on, on/off, batch)
			}
			out.WriteString("\n")
		}
	}
	fmt.Print(out.String())
	b.Log(out.String())
}

// coalesceRun runs work from clients goroutines for d and returns the
// calls per second; the first error fails tb.
func coalesceRun(tb testing.TB, clients int, d time.Duration, work func(client int) error) float64 {
	tb.Helper()
	return runClients(tb, "coalesce", clients, d, func(client int, stop time.Time, n *atomic.Int64) error {
		for time.Now().Before(stop) {
			if err := work(client); err != nil {
				return err
			}
			n.Add(1)
		}
		return nil
	})
}

func coalesceMedian(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// coalesceEnvInts reads a comma-separated list of positive integers from
// the environment variable name, def when it is unset.
func coalesceEnvInts(tb testing.TB, name, def string) []int {
	v := os.Getenv(name)
	if v == "" {
		v = def
	}
	var out []int
	for f := range strings.SplitSeq(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			tb.Fatalf("%s: %q is not a list of positive integers", name, v)
		}
		out = append(out, n)
	}
	return out
}
