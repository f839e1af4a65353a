// Command workerpool shows durable's primitives working together in a small
// worker pool:
//
//   - clients submit orders idempotently: a retried submission replays the
//     first one's answer instead of creating a second order;
//   - workers compete for orders through leases, and advance each one step
//     by step with compare-and-set writes fenced by their lease;
//   - one worker freezes past its lease (a stand-in for a GC pause or a
//     stopped VM); another worker takes the order over, and the frozen
//     worker's late write is rejected when it wakes up.
//
// It runs on the memory backend by default, and on SQLite, Postgres or
// Redis with -dsn:
//
//	go run ./examples/workerpool
//	go run ./examples/workerpool -dsn sqlite://./workerpool.db
//	go run ./examples/workerpool -dsn 'postgres://localhost/app?sslmode=disable'
//	go run ./examples/workerpool -dsn redis://127.0.0.1:6379/0
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/durable-go/durable"
	_ "github.com/durable-go/durable/backends/memory"
	_ "github.com/durable-go/durable/backends/postgres"
	_ "github.com/durable-go/durable/backends/redis"
	_ "github.com/durable-go/durable/backends/sqlite"
)

// The steps every order goes through, in order.
var steps = []string{"validated", "charged", "packed", "shipped"}

// stepWork is how long one step of an order takes.
const stepWork = 100 * time.Millisecond

// leaseTTL is the shortest lease the store accepts (1 s plus its clock
// tolerance: 1.25 s on the default memory DSN, 2 s on SQLite, Postgres and Redis
// with their default tolerance), so that the frozen worker's lease expires
// quickly.
func leaseTTL(s *durable.Store) time.Duration { return s.MinTTL() }

func main() {
	dsn := flag.String("dsn", "memory://workerpool?tolerance=250ms", "store DSN (memory://, sqlite://PATH, postgres://… or redis://…)")
	orders := flag.Int("orders", 6, "orders to submit")
	workers := flag.Int("workers", 3, "workers")
	flag.Parse()
	if err := run(context.Background(), os.Stdout, *dsn, *orders, *workers); err != nil {
		fmt.Fprintln(os.Stderr, "workerpool:", err)
		os.Exit(1)
	}
}

// logger serializes the trace lines of concurrent workers.
type logger struct {
	mu    sync.Mutex
	w     io.Writer
	start time.Time
}

func (l *logger) printf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.w, "%6.3fs  "+format+"\n", append([]any{time.Since(l.start).Seconds()}, args...)...)
}

func run(ctx context.Context, out io.Writer, dsn string, nOrders, nWorkers int) error {
	if nOrders < 1 || nWorkers < 1 {
		return errors.New("need at least one order and one worker")
	}
	store, err := durable.Open(ctx, dsn)
	if err != nil {
		return err
	}
	defer store.Close()
	log := &logger{w: out, start: time.Now()}
	// Every run works in a scope of its own, so runs against one database
	// do not see each other's orders.
	scope := durable.TenantScope(fmt.Sprintf("workerpool-%d", time.Now().UnixNano()))

	// 1. Clients submit orders; each submission is retried once, as a client
	// would after a timeout, and the retry replays the first answer.
	for i := 1; i <= nOrders; i++ {
		id := fmt.Sprintf("order-%d", i)
		for attempt := 1; attempt <= 2; attempt++ {
			res, err := submit(ctx, store, scope, id)
			if err != nil {
				return err
			}
			if i == 1 {
				log.printf("client    submit %s (attempt %d): %d %s replayed=%v", id, attempt, res.Outcome.Code, res.Outcome.Ref, res.Replayed)
			} else if attempt == 2 && !res.Replayed {
				return fmt.Errorf("the retried submission of %s ran again", id)
			}
		}
	}
	if nOrders > 1 {
		log.printf("client    submitted order-2 … order-%d the same way: every retry replayed", nOrders)
	}

	// 2. A worker that will freeze takes order-1's lease first and does one
	// step, then stops renewing: its process is frozen.
	frozen, err := store.AcquireLease(ctx, durable.LeaseRequest{Scope: scope, Resource: "order-1", Owner: "worker-frozen", TTL: leaseTTL(store)})
	if err != nil {
		return err
	}
	if _, err := advance(ctx, store, scope, "order-1", frozen, "worker-frozen"); err != nil {
		return err
	}
	log.printf("worker-frozen  leased order-1 (token %d), did one step, then froze", frozen.Token)

	// 3. The pool works until every order is done. The frozen worker's
	// lease on order-1 expires and another worker takes the order over.
	var wg sync.WaitGroup
	errs := make(chan error, nWorkers)
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for w := 1; w <= nWorkers; w++ {
		wg.Add(1)
		go func(name string) {
			defer wg.Done()
			if err := work(pctx, store, scope, name, log); err != nil {
				errs <- fmt.Errorf("%s: %w", name, err)
			}
		}(fmt.Sprintf("worker-%d", w))
	}

	// 4. The frozen worker wakes up once another worker has taken order-1
	// over and, unaware, writes with its old fence. The write is rejected.
	for {
		l, err := store.GetLease(ctx, scope, "order-1")
		if err == nil && l.Token > frozen.Token {
			break
		}
		if time.Since(log.start) > 20*time.Second {
			return errors.New("nobody took order-1 over")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cur, err := store.GetWorkflow(ctx, scope, "order-1")
	if err != nil {
		return err
	}
	_, err = store.UpdateWorkflow(ctx, durable.Update{Scope: scope, ID: "order-1", Fence: frozen.Fence(),
		ExpectStatus: cur.Status, ExpectRevision: cur.Revision,
		Status: durable.StatusRunning, Snapshot: append(cur.Snapshot, []byte(",stale-write-by-worker-frozen")...)})
	if !errors.Is(err, durable.ErrFenced) && !errors.Is(err, durable.ErrTerminal) {
		return fmt.Errorf("the frozen worker's stale write was not rejected: %v", err)
	}
	log.printf("worker-frozen  woke up; its stale write to order-1 was rejected: %v", err)

	wg.Wait()
	close(errs)
	for err := range errs {
		return err
	}

	// 5. Every order went through every step exactly once.
	list, err := store.ListWorkflows(ctx, durable.ListQuery{Scope: scope})
	if err != nil {
		return err
	}
	fmt.Fprintln(out)
	fmt.Fprintln(out, "final state:")
	for _, w := range list {
		fmt.Fprintf(out, "  %-8s %-9s rev %d  %s\n", w.ID, w.Status, w.Revision, w.Snapshot)
		if w.Status != durable.StatusSucceeded || w.Revision != int64(1+len(steps)) {
			return fmt.Errorf("%s ended %s at revision %d", w.ID, w.Status, w.Revision)
		}
	}
	if len(list) != nOrders {
		return fmt.Errorf("%d orders stored, want %d", len(list), nOrders)
	}
	fmt.Fprintf(out, "%d orders, each submitted twice and stored once, each step applied exactly once\n", nOrders)
	return nil
}

// submit creates an order at most once per idempotency key.
func submit(ctx context.Context, store *durable.Store, scope durable.Scope, id string) (durable.DoResult, error) {
	req := durable.ClaimRequest{KeyRef: durable.KeyRef{Scope: scope, Key: "submit-" + id},
		Fingerprint: "order:" + id, WorkflowID: id, TTL: 10 * time.Second}
	return store.Do(ctx, req, durable.DoOptions{}, func(ctx context.Context) (durable.Outcome, error) {
		if _, err := store.CreateWorkflow(ctx, durable.Workflow{Scope: scope, ID: id}); err != nil {
			return durable.Outcome{}, err
		}
		return durable.Outcome{Code: 201, Ref: id}, nil
	})
}

// advance applies the next step of an order, fenced by lease. It reports
// whether the order is now finished.
func advance(ctx context.Context, store *durable.Store, scope durable.Scope, id string, lease durable.Lease, worker string) (bool, error) {
	w, err := store.Step(ctx, scope, id, durable.StepOptions{Fence: lease.Fence()}, func(cur durable.Workflow) (durable.Change, error) {
		done := 0
		if len(cur.Snapshot) > 0 {
			done = strings.Count(string(cur.Snapshot), ",") + 1
		}
		if done >= len(steps) {
			return durable.Change{}, errors.New("no step left")
		}
		snap := string(cur.Snapshot)
		if snap != "" {
			snap += ","
		}
		snap += steps[done] + "@" + worker
		status := durable.StatusRunning
		if done+1 == len(steps) {
			status = durable.StatusSucceeded
		}
		return durable.Change{Status: status, Snapshot: []byte(snap)}, nil
	})
	if err != nil {
		return false, err
	}
	return w.Status.Terminal(), nil
}

// work is one worker's loop: find an unfinished order, lease it, and
// advance it to the end; stop when every order is finished.
func work(ctx context.Context, store *durable.Store, scope durable.Scope, name string, log *logger) error {
	for {
		open := 0
		for _, status := range []durable.Status{durable.StatusPending, durable.StatusRunning} {
			list, err := store.ListWorkflows(ctx, durable.ListQuery{Scope: scope, Status: status})
			if err != nil {
				return err
			}
			for _, w := range list {
				open++
				err := store.RunWithLease(ctx, durable.LeaseRequest{Scope: scope, Resource: w.ID, Owner: name, TTL: leaseTTL(store)},
					durable.LeaseOptions{}, func(ctx context.Context, l durable.Lease) error {
						// The list may be stale: another worker may have
						// finished the order since.
						if cur, err := store.GetWorkflow(ctx, scope, w.ID); err != nil || cur.Status.Terminal() {
							return err
						}
						log.printf("%s  leased %s (token %d)", name, w.ID, l.Token)
						for {
							done, err := advance(ctx, store, scope, w.ID, l, name)
							if err != nil || done {
								if done {
									log.printf("%s  finished %s", name, w.ID)
								}
								return err
							}
							time.Sleep(stepWork) // the work of one step
						}
					})
				switch {
				case err == nil, errors.Is(err, durable.ErrLeaseBusy), errors.Is(err, durable.ErrTerminal):
					// done, someone else has it, or someone else finished it
				default:
					return err
				}
			}
		}
		if open == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
