// Command election shows leader election on a durable lease
// (package github.com/durable-go/durable/election):
//
//   - three candidates campaign for one name; one of them is elected and
//     the others wait;
//   - the leader does its work with writes fenced by its term, then resigns,
//     and a waiting candidate is elected with a greater token;
//   - a resigned leader's late write, still carrying its old fence, is
//     rejected;
//   - an observer prints every change of leader it sees, with the leader's
//     published address.
//
// It runs on the memory backend by default, and on SQLite, Postgres or
// Redis with -dsn, and finishes by itself in a few seconds:
//
//	go run ./examples/election
//	go run ./examples/election -dsn sqlite://./election.db
//	go run ./examples/election -dsn 'postgres://localhost/app?sslmode=disable'
//	go run ./examples/election -dsn redis://127.0.0.1:6379/0
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
	"github.com/durable-go/durable/election"
)

const (
	// name is what the candidates campaign for.
	name = "scheduler"
	// steps is how many fenced writes each leader makes before resigning.
	steps = 4
	// stepWork is how long one step takes: a leader leads for about
	// steps × stepWork, longer than election.PollInterval, so that an
	// observer sees every term even on a backend it has to poll.
	stepWork = 200 * time.Millisecond
)

func main() {
	dsn := flag.String("dsn", "memory://election", "store DSN (memory://, sqlite://PATH, postgres://… or redis://…)")
	candidates := flag.Int("candidates", 3, "candidates")
	flag.Parse()
	if err := run(context.Background(), os.Stdout, *dsn, *candidates); err != nil {
		fmt.Fprintln(os.Stderr, "election:", err)
		os.Exit(1)
	}
}

// logger serializes the trace lines of concurrent candidates.
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

func run(ctx context.Context, out io.Writer, dsn string, n int) error {
	if n < 1 {
		return errors.New("need at least one candidate")
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	store, err := durable.Open(ctx, dsn)
	if err != nil {
		return err
	}
	defer store.Close()
	log := &logger{w: out, start: time.Now()}
	// Every run works in a scope of its own, so runs against one database
	// do not see each other.
	scope := durable.TenantScope(fmt.Sprintf("election-%d", time.Now().UnixNano()))
	// The leaders' work: a log that only the current leader may append to.
	if _, err := store.CreateWorkflow(ctx, durable.Workflow{Scope: scope, ID: "log", Status: durable.StatusRunning}); err != nil {
		return err
	}

	// The observer prints every change of leader until told to stop.
	octx, stopObserving := context.WithCancel(ctx)
	defer stopObserving()
	changes, err := election.Observe(octx, store, scope, name)
	if err != nil {
		return err
	}
	var (
		seen       []election.Leader
		observerMu sync.Mutex
		observed   = make(chan struct{})
	)
	go func() {
		defer close(observed)
		for l := range changes {
			if l.IsZero() {
				log.printf("observer  no leader")
			} else {
				log.printf("observer  leader is %s (token %d) at %s", l.Owner, l.Token, l.Value)
			}
			observerMu.Lock()
			seen = append(seen, l)
			observerMu.Unlock()
		}
	}()

	// The candidates: each campaigns, leads once, and resigns.
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 1; i <= n; i++ {
		c := election.Config{
			Scope: scope, Name: name,
			Candidate: fmt.Sprintf("node-%d", i),
			Value:     fmt.Sprintf("10.0.0.%d:8080", i),
			// The shortest lease the store accepts: a leader that dies
			// without resigning is replaced after TTL plus the tolerance.
			TTL:        store.MinTTL(),
			MaxBackoff: 100 * time.Millisecond,
		}
		wg.Go(func() {
			if err := candidate(ctx, store, c, log); err != nil {
				errs <- fmt.Errorf("%s: %w", c.Candidate, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return err
	}

	// Every candidate has resigned: wait for the observer to report no
	// leader, then stop it.
	for {
		observerMu.Lock()
		last := len(seen) > 0 && seen[len(seen)-1].IsZero()
		observerMu.Unlock()
		if last {
			break
		}
		select {
		case <-ctx.Done():
			return errors.New("the observer did not see the last resignation")
		case <-time.After(20 * time.Millisecond):
		}
	}
	stopObserving()
	<-observed

	// Each term's writes form one block in the log, in election order.
	w, err := store.GetWorkflow(ctx, scope, "log")
	if err != nil {
		return err
	}
	entries := strings.Split(strings.TrimSuffix(string(w.Snapshot), ";"), ";")
	fmt.Fprintln(out)
	fmt.Fprintln(out, "log:", strings.Join(entries, " "))
	if len(entries) != n*steps {
		return fmt.Errorf("%d log entries, want %d", len(entries), n*steps)
	}
	for i := 0; i < len(entries); i += steps {
		owner, _, _ := strings.Cut(entries[i], "/")
		for _, e := range entries[i : i+steps] {
			if !strings.HasPrefix(e, owner+"/") {
				return fmt.Errorf("two leaders wrote at once: %s", w.Snapshot)
			}
		}
	}
	fmt.Fprintf(out, "%d terms, one leader at a time: each term's %d writes in one block\n", n, steps)
	return nil
}

// candidate campaigns, leads (appending to the log with fenced writes),
// resigns, and then shows that its old fence no longer works.
func candidate(ctx context.Context, store *durable.Store, c election.Config, log *logger) error {
	term, err := election.Campaign(ctx, store, c)
	if err != nil {
		return err
	}
	l := term.Lease()
	log.printf("%s    elected (token %d)", c.Candidate, l.Token)
	for i := 1; i <= steps; i++ {
		// Stop at once if the term ends (a lost lease); the fence would
		// reject the write anyway.
		if err := appendLog(term.Context(), store, c.Scope, term.Fence(), fmt.Sprintf("%s/%d", c.Candidate, i)); err != nil {
			return fmt.Errorf("write while leading: %w (term: %v)", err, term.Err())
		}
		time.Sleep(stepWork)
	}
	if err := term.Resign(ctx); err != nil {
		return err
	}
	log.printf("%s    resigned", c.Candidate)

	// A late write with the old term's fence, as from a leader that
	// missed the end of its term: rejected.
	err = appendLog(ctx, store, c.Scope, term.Fence(), c.Candidate+"/late")
	if !errors.Is(err, durable.ErrFenced) {
		return fmt.Errorf("a write with a resigned term's fence was not rejected: %v", err)
	}
	log.printf("%s    its late write with token %d was rejected (%s)", c.Candidate, l.Token, durable.CodeOf(err))
	return nil
}

// appendLog appends entry to the log with a write fenced by fence.
func appendLog(ctx context.Context, store *durable.Store, scope durable.Scope, fence *durable.Fence, entry string) error {
	_, err := store.Step(ctx, scope, "log", durable.StepOptions{Fence: fence}, func(cur durable.Workflow) (durable.Change, error) {
		return durable.Change{Status: durable.StatusRunning, Snapshot: append(cur.Snapshot, entry+";"...)}, nil
	})
	return err
}
