package console

import (
	"context"
	"github.com/durable-go/durable/internal/listpage"
	"net/http"
	"slices"
	"time"

	"github.com/durable-go/durable"
)

// listPage is the data of a list: one page of rows and the cursor of the
// next ("" on the last), with the filter it was asked for.
type listPage[T any] struct {
	Rows   []T
	Next   string
	After  string
	Limit  int
	Filter string
	Now    time.Time
}

// listView renders one page of a list: the records after the request's
// cursor, fetched by fetch (limit is the page size plus one), filtered by
// filter (shown again in the page's form).
func listView[T any](h *Handler, w http.ResponseWriter, r *http.Request, name, title, filter string,
	fetch func(sc durable.Scope, after string, limit int) ([]T, error), id func(T) string) {
	limit, after, err := h.paging(r)
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	sc := scopeOf(r)
	list, next, err := listpage.Fetch(limit, durable.MaxListLimit, func(n int) ([]T, error) { return fetch(sc, after, n) }, id)
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	h.render(w, r, http.StatusOK, name, page{Title: title, Scope: sc,
		Data: listPage[T]{Rows: list, Next: next, After: after, Limit: limit, Filter: filter, Now: h.opts.Now()}})
}

// workflows lists the workflows of a scope in id order, optionally of one
// status, a page at a time (as "durable inspect workflows").
func (h *Handler) workflows(w http.ResponseWriter, r *http.Request) {
	status := durable.Status(r.URL.Query().Get("status"))
	listView(h, w, r, "workflows", "Workflows", string(status), func(sc durable.Scope, after string, n int) ([]durable.Workflow, error) {
		return h.store.ListWorkflows(r.Context(), durable.ListQuery{Scope: sc, Status: status, After: after, Limit: n})
	}, func(x durable.Workflow) string { return x.ID })
}

// oldestPage is the data of the oldest-first view.
type oldestPage struct {
	Status   string
	Rows     []durable.Workflow
	Scanned  int
	Complete bool // every workflow of the status was read
	Limit    int  // ScanLimit
	Now      time.Time
}

// oldest shows the workflows of one status (default running) least
// recently updated first. The backends list in id order only, so it reads
// up to ScanLimit of them and sorts what it read; the page says whether
// that was all of them.
func (h *Handler) oldest(w http.ResponseWriter, r *http.Request) {
	sc := scopeOf(r)
	status := durable.Status(r.URL.Query().Get("status"))
	if status == "" {
		status = durable.StatusRunning
	}
	limit, _, err := h.paging(r)
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	all, complete, err := h.oldestFirst(r.Context(), sc, status)
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	h.render(w, r, http.StatusOK, "oldest", page{Title: "Oldest " + string(status) + " workflows", Scope: sc,
		Data: oldestPage{Status: string(status), Rows: all[:min(len(all), limit)], Scanned: len(all), Complete: complete, Limit: h.opts.ScanLimit, Now: h.opts.Now()}})
}

// oldestFirst reads up to ScanLimit workflows of sc with status and
// returns them least recently updated first; complete is false when there
// were more.
func (h *Handler) oldestFirst(ctx context.Context, sc durable.Scope, status durable.Status) (ws []durable.Workflow, complete bool, err error) {
	ws, complete, err = scan(h.opts.ScanLimit, func(after string, n int) ([]durable.Workflow, error) {
		return h.store.ListWorkflows(ctx, durable.ListQuery{Scope: sc, Status: status, After: after, Limit: n})
	}, func(x durable.Workflow) string { return x.ID })
	slices.SortStableFunc(ws, func(a, b durable.Workflow) int { return a.UpdatedAt.Compare(b.UpdatedAt) })
	return ws, complete, err
}

// keys lists the idempotency keys of a scope in key order, optionally of
// one state, a page at a time (as "durable inspect keys").
func (h *Handler) keys(w http.ResponseWriter, r *http.Request) {
	state := durable.KeyState(r.URL.Query().Get("state"))
	listView(h, w, r, "keys", "Idempotency keys", string(state), func(sc durable.Scope, after string, n int) ([]durable.KeyRecord, error) {
		return h.store.ListKeys(r.Context(), durable.KeyListQuery{Scope: sc, State: state, After: after, Limit: n})
	}, func(x durable.KeyRecord) string { return x.Key })
}

// leases lists the leases of a scope in resource order, optionally only
// those held, a page at a time (as "durable inspect leases").
func (h *Handler) leases(w http.ResponseWriter, r *http.Request) {
	held := r.URL.Query().Get("held") == "1"
	filter := ""
	if held {
		filter = "1"
	}
	listView(h, w, r, "leases", "Leases", filter, func(sc durable.Scope, after string, n int) ([]durable.Lease, error) {
		return h.store.ListLeases(r.Context(), durable.LeaseListQuery{Scope: sc, Held: held, After: after, Limit: n})
	}, func(x durable.Lease) string { return x.Resource })
}
