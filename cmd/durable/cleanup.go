package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/durable-go/durable"
)

func runCleanup(ctx context.Context, args []string, e *env) error {
	fs, dsn := newFlags(e, "cleanup", "",
		"Delete terminal workflows older than --terminal-age, completed idempotency keys past\n"+
			"their retention, and claims and leases expired beyond the clock tolerance, in\n"+
			"batches of --batch, until nothing is left. Progress goes to stderr: a live line\n"+
			"on a terminal (deleted so far by kind, rate, and an ETA when the up-front count\n"+
			"is exact), otherwise a plain line every --progress. The result goes to stdout:\n"+
			"the totals, the duration and the rate.")
	age := fs.Duration("terminal-age", 7*24*time.Hour, "delete terminal workflows not updated for this long")
	batch := fs.Int("batch", durable.DefaultCleanupLimit, "records of each kind deleted per batch")
	dry := fs.Bool("dry-run", false, "count what would be deleted now, delete nothing")
	quiet := fs.Bool("quiet", false, "no progress on stderr (the result still goes to stdout)")
	every := fs.Duration("progress", 5*time.Second, "when stderr is not a terminal, a progress line this often (0 = every batch)")
	asJSON := jsonFlag(fs)
	if err := parse(fs, e, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return usagef("unexpected arguments: %v", fs.Args())
	}
	if *batch <= 0 || *batch > durable.MaxCleanupLimit {
		return usagef("--batch must be within 1 and %d", durable.MaxCleanupLimit)
	}
	if *age < 0 {
		return usagef("--terminal-age must not be negative")
	}
	if *every < 0 {
		return usagef("--progress must not be negative")
	}
	store, err := openStore(ctx, *dsn)
	if err != nil {
		return err
	}
	defer store.Close()

	// Count in full up to the largest limit: the limit bounds each count,
	// so More says there are even more.
	count := func() (durable.CleanupResult, error) {
		return store.CountCleanup(ctx, durable.CleanupRequest{TerminalAge: *age, Limit: durable.MaxCleanupLimit})
	}
	if *dry {
		res, err := count()
		if err != nil {
			return err
		}
		if *asJSON {
			return writeJSON(e, cleanupOut{DryRun: true, Workflows: res.Workflows, Keys: res.Keys, Leases: res.Leases,
				Total: res.Workflows + res.Keys + res.Leases, AtLeast: res.More})
		}
		more := ""
		if res.More {
			more = fmt.Sprintf(" (at least; counting stops at %d per kind)", durable.MaxCleanupLimit)
		}
		fmt.Fprintf(e.stdout, "would delete: %d workflows, %d keys, %d leases%s\n", res.Workflows, res.Keys, res.Leases, more)
		return nil
	}

	p := &cleanupProgress{w: e.stderr, tty: isTerminal(e.stderr), every: *every, start: time.Now()}
	if *quiet {
		p.w = io.Discard
	}
	// The up-front count gives an ETA when it is exact; it is skipped when
	// progress is not shown.
	if !*quiet {
		if c, err := count(); err == nil {
			p.expected = c.Workflows + c.Keys + c.Leases
			p.exact = !c.More
		}
	}
	var total durable.CleanupResult
	batches := 0
	for n := 1; ; n++ {
		res, err := store.Cleanup(ctx, durable.CleanupRequest{TerminalAge: *age, Limit: *batch})
		if err != nil {
			p.done()
			return fmt.Errorf("batch %d: %w (deleted so far: %d workflows, %d keys, %d leases)", n, err, total.Workflows, total.Keys, total.Leases)
		}
		batches = n
		total.Workflows += res.Workflows
		total.Keys += res.Keys
		total.Leases += res.Leases
		p.update(n, total, res.More)
		if !res.More {
			break
		}
	}
	p.done()
	elapsed := time.Since(p.start)
	sum := total.Workflows + total.Keys + total.Leases
	rate := float64(sum) / max(elapsed.Seconds(), 1e-9)
	if *asJSON {
		return writeJSON(e, cleanupOut{Workflows: total.Workflows, Keys: total.Keys, Leases: total.Leases, Total: sum,
			Batches: batches, Seconds: elapsed.Seconds(), PerSecond: rate})
	}
	fmt.Fprintf(e.stdout, "deleted: %d workflows, %d keys, %d leases (%d records) in %s, %.0f records/s\n",
		total.Workflows, total.Keys, total.Leases, sum, elapsed.Round(time.Millisecond), rate)
	return nil
}

type cleanupOut struct {
	DryRun    bool    `json:"dry_run,omitempty"`
	Workflows int     `json:"workflows"`
	Keys      int     `json:"keys"`
	Leases    int     `json:"leases"`
	Total     int     `json:"total"`
	AtLeast   bool    `json:"at_least,omitempty"` // dry run: counting stopped at the limit
	Batches   int     `json:"batches,omitempty"`
	Seconds   float64 `json:"seconds,omitempty"`
	PerSecond float64 `json:"records_per_second,omitempty"`
}

// cleanupProgress reports cleanup's progress on stderr: one line rewritten
// in place on a terminal (at most 10 times a second), plain lines every
// `every` otherwise.
type cleanupProgress struct {
	w        io.Writer
	tty      bool
	every    time.Duration
	start    time.Time
	last     time.Time
	expected int  // the up-front count, 0 when unknown
	exact    bool // expected is exact, not a lower bound
	live     bool // a live line is on the terminal
}

func (p *cleanupProgress) update(batch int, total durable.CleanupResult, more bool) {
	now := time.Now()
	interval := p.every
	if p.tty {
		interval = 100 * time.Millisecond
	}
	if more && now.Sub(p.last) < interval {
		return
	}
	if !more && !p.tty {
		// The last batch: the summary on stdout says the rest.
		if p.every > 0 {
			return
		}
	}
	p.last = now
	elapsed := now.Sub(p.start)
	sum := total.Workflows + total.Keys + total.Leases
	rate := float64(sum) / max(elapsed.Seconds(), 1e-9)
	line := fmt.Sprintf("batch %d: deleted %d workflows, %d keys, %d leases; %.0f records/s", batch, total.Workflows, total.Keys, total.Leases, rate)
	if p.expected > 0 {
		if p.exact && sum <= p.expected && rate > 0 {
			eta := time.Duration(float64(p.expected-sum) / rate * float64(time.Second))
			line += fmt.Sprintf(", %d%% of %d, ETA %s", 100*sum/p.expected, p.expected, eta.Round(time.Second))
		} else if !p.exact {
			line += fmt.Sprintf(" (at least %d per kind were due at the start)", durable.MaxCleanupLimit)
		}
	}
	if p.tty {
		fmt.Fprintf(p.w, "\r\x1b[K%s", line)
		p.live = true
		return
	}
	fmt.Fprintln(p.w, line)
}

// done ends the live line.
func (p *cleanupProgress) done() {
	if p.live {
		fmt.Fprintln(p.w)
		p.live = false
	}
}

// isTerminal reports whether w is a terminal (a character device).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
