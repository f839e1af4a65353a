package main

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/durable-go/durable/backends/postgres"
)

// migrateProgress shows what a running migration does on stderr: a live
// line on a terminal (the phase and the time spent in it, refreshed ten
// times a second), otherwise a line when a phase begins and again every
// `every` while it lasts. Nothing is printed for a migration that has
// nothing to do.
type migrateProgress struct {
	w     io.Writer
	tty   bool
	every time.Duration
	sub   string // up, down or force

	mu      sync.Mutex
	step    postgres.MigrateStep
	since   time.Time // when the current phase began
	printed time.Time // the last line, off a terminal
	live    bool      // a live line is on the terminal
	stop    chan struct{}
	stopped chan struct{}
}

func newMigrateProgress(w io.Writer, tty bool, every time.Duration, sub string) *migrateProgress {
	return &migrateProgress{w: w, tty: tty, every: every, sub: sub}
}

// start returns ctx carrying the progress function, and starts the
// refresher.
func (p *migrateProgress) start(ctx context.Context) context.Context {
	p.stop, p.stopped = make(chan struct{}), make(chan struct{})
	interval := p.every
	if p.tty {
		interval = 100 * time.Millisecond
	}
	go func() {
		defer close(p.stopped)
		if interval <= 0 {
			<-p.stop
			return
		}
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-t.C:
				p.refresh(false)
			}
		}
	}()
	return postgres.WithMigrateProgress(ctx, p.report)
}

// report is the postgres backend's callback: a phase begins.
func (p *migrateProgress) report(s postgres.MigrateStep) {
	p.mu.Lock()
	p.step, p.since = s, time.Now()
	p.mu.Unlock()
	p.refresh(true)
}

// refresh prints the current phase: always when it just began, else on a
// terminal, or when `every` passed since the last line.
func (p *migrateProgress) refresh(began bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.step.Phase == "" {
		return
	}
	now := time.Now()
	if !p.tty && !began && now.Sub(p.printed) < p.every {
		return
	}
	what := string(p.step.Phase)
	if p.step.Phase == postgres.PhaseApplying {
		what = fmt.Sprintf("applying migration %d", p.step.Version)
	}
	line := fmt.Sprintf("migrate %s: schema %s: %s", p.sub, p.step.Schema, what)
	if d := now.Sub(p.since); !began || p.tty {
		line += fmt.Sprintf(" (%s)", d.Round(100*time.Millisecond))
	}
	if p.tty {
		fmt.Fprintf(p.w, "\r\x1b[K%s", line)
		p.live = true
		return
	}
	p.printed = now
	fmt.Fprintln(p.w, line)
}

// done stops the refresher and ends the live line.
func (p *migrateProgress) done() {
	close(p.stop)
	<-p.stopped
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.live {
		fmt.Fprintln(p.w)
		p.live = false
	}
}
