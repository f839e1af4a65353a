package console

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"time"

	"github.com/durable-go/durable"
)

// counts is one sample of a scope's records, read by listing. A kind's
// Complete is false when the scan stopped at ScanLimit (its counts are
// then lower bounds); its Err is set when it could not be listed (a
// backend without the listing capability, say).
type counts struct {
	At             time.Time
	Workflows      map[string]int // by status
	WorkflowsTotal int
	WorkflowsAll   bool
	WorkflowsErr   string
	Keys           map[string]int // by state, "claimed (expired)" apart
	KeysTotal      int
	KeysAll        bool
	KeysErr        string
	KeysBad        *durable.RecordRef // the corrupt record that stopped the count, if known
	Held, Expired  int                // leases
	LeasesAll      bool
	LeasesErr      string
	LeasesBad      *durable.RecordRef
}

// history is the samples of one scope, oldest first.
type history struct{ samples []counts }

// Limits of the samples kept in memory.
const (
	maxSamples       = 60
	maxSampledScopes = 20
)

// overviewPage is the data of the overview.
type overviewPage struct {
	Now     counts
	History []counts // newest first, the current one included
	Oldest  []durable.Workflow
	Limit   int // ScanLimit
	Clock   time.Time
}

// overview shows a scope at a glance: counts by status and state, the
// oldest running workflows, and the counts this console sampled before.
func (h *Handler) overview(w http.ResponseWriter, r *http.Request) {
	sc := scopeOf(r)
	c, err := h.sample(r.Context(), sc)
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	running, _, err := h.oldestFirst(r.Context(), sc, durable.StatusRunning)
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	hist := h.history(sc)
	slices.Reverse(hist)
	h.render(w, r, http.StatusOK, "overview", page{Title: "Overview", Scope: sc, Data: overviewPage{
		Now: c, History: hist, Oldest: running[:min(len(running), 10)], Limit: h.opts.ScanLimit, Clock: h.opts.Now(),
	}})
}

// sample returns the counts of sc: the last sample when it is younger
// than SampleEvery, else a new one, which it keeps.
func (h *Handler) sample(ctx context.Context, sc durable.Scope) (counts, error) {
	now := h.opts.Now()
	h.mu.Lock()
	if hs := h.samples[sc]; hs != nil && len(hs.samples) > 0 {
		if last := hs.samples[len(hs.samples)-1]; now.Sub(last.At) < h.opts.SampleEvery {
			h.mu.Unlock()
			return last, nil
		}
	}
	h.mu.Unlock()
	c, err := h.count(ctx, sc, now)
	if err != nil {
		return counts{}, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	hs := h.samples[sc]
	if hs == nil {
		hs = &history{}
		h.samples[sc] = hs
	}
	hs.samples = append(hs.samples, c)
	if len(hs.samples) > maxSamples {
		hs.samples = slices.Delete(hs.samples, 0, len(hs.samples)-maxSamples)
	}
	h.scopes = append(slices.DeleteFunc(h.scopes, func(s durable.Scope) bool { return s == sc }), sc)
	if len(h.scopes) > maxSampledScopes {
		delete(h.samples, h.scopes[0])
		h.scopes = h.scopes[1:]
	}
	return c, nil
}

// history returns a copy of sc's samples, oldest first.
func (h *Handler) history(sc durable.Scope) []counts {
	h.mu.Lock()
	defer h.mu.Unlock()
	if hs := h.samples[sc]; hs != nil {
		return slices.Clone(hs.samples)
	}
	return nil
}

// count lists up to ScanLimit records of each kind of sc and counts them.
// A kind the backend cannot list is reported in its Err; an invalid scope
// or an unreachable store fails the count.
func (h *Handler) count(ctx context.Context, sc durable.Scope, now time.Time) (counts, error) {
	c := counts{At: now, Workflows: map[string]int{}, Keys: map[string]int{}}
	ws, all, err := scan(h.opts.ScanLimit, func(after string, n int) ([]durable.Workflow, error) {
		return h.store.ListWorkflows(ctx, durable.ListQuery{Scope: sc, After: after, Limit: n})
	}, func(x durable.Workflow) string { return x.ID })
	if err != nil {
		return counts{}, err
	}
	c.WorkflowsAll, c.WorkflowsTotal = all, len(ws)
	for _, x := range ws {
		c.Workflows[string(x.Status)]++
	}
	ks, all, err := scan(h.opts.ScanLimit, func(after string, n int) ([]durable.KeyRecord, error) {
		return h.store.ListKeys(ctx, durable.KeyListQuery{Scope: sc, After: after, Limit: n})
	}, func(x durable.KeyRecord) string { return x.Key })
	if c.KeysErr, c.KeysBad, err = cardErr(err); err != nil {
		return counts{}, err
	}
	c.KeysAll, c.KeysTotal = all, len(ks)
	for _, x := range ks {
		state := string(x.State)
		if x.State == durable.KeyClaimed && !x.LeaseUntil.After(now) {
			state = "claimed (expired)"
		}
		c.Keys[state]++
	}
	ls, all, err := scan(h.opts.ScanLimit, func(after string, n int) ([]durable.Lease, error) {
		return h.store.ListLeases(ctx, durable.LeaseListQuery{Scope: sc, After: after, Limit: n})
	}, func(x durable.Lease) string { return x.Resource })
	if c.LeasesErr, c.LeasesBad, err = cardErr(err); err != nil {
		return counts{}, err
	}
	c.LeasesAll = all
	for _, x := range ls {
		if x.ExpiresAt.After(now) {
			c.Held++
		} else {
			c.Expired++
		}
	}
	return c, nil
}

// cardErr sorts an error of counting keys or leases: one the overview
// shows in that kind's card (a backend that cannot list it, or a record
// that cannot be decoded, with that record when the error names it), or
// one that fails the page (fatal: the store unreachable, say).
func cardErr(err error) (msg string, bad *durable.RecordRef, fatal error) {
	switch {
	case err == nil:
		return "", nil, nil
	case errors.Is(err, durable.ErrUnimplemented):
		return err.Error(), nil, nil
	case errors.Is(err, durable.ErrCorrupt):
		if ref, ok := durable.CorruptRecord(err); ok {
			bad = &ref
		}
		return err.Error(), bad, nil
	}
	return "", nil, err
}
