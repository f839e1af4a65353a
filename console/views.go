package console

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/durable-go/durable"
)

// page is what every template gets.
type page struct {
	Title    string
	Scope    durable.Scope
	ReadOnly bool
	Error    string
	Data     any
}

func (h *Handler) render(w http.ResponseWriter, r *http.Request, status int, name string, p page) {
	p.ReadOnly = !h.opts.AllowActions
	var buf bytes.Buffer
	if err := h.tmpl.ExecuteTemplate(&buf, name, p); err != nil {
		slog.Error("console: rendering a page failed", "page", name, "error", err)
		http.Error(w, "console: the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = buf.WriteTo(w)
}

// fail renders the error page.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, status int, msg string) {
	h.render(w, r, status, "error", page{Title: http.StatusText(status), Scope: scopeOf(r), Error: msg})
}

// failErr renders err from the store with the status its code calls for.
// The store's errors never hold a DSN, SQL or record contents.
// A list whose page holds a record that cannot be decoded fails whole; when
// the error names that record, the page links to it (and its delete).
func (h *Handler) failErr(w http.ResponseWriter, r *http.Request, err error) {
	p := page{Title: http.StatusText(statusOf(err)), Scope: scopeOf(r), Error: err.Error()}
	if ref, ok := durable.CorruptRecord(err); ok {
		p.Data = ref
	}
	h.render(w, r, statusOf(err), "error", p)
}

func statusOf(err error) int {
	switch {
	case errors.Is(err, durable.ErrInvalidArgument):
		return http.StatusBadRequest
	case errors.Is(err, durable.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, durable.ErrUnimplemented):
		return http.StatusNotImplemented
	case errors.Is(err, durable.ErrCorrupt):
		return http.StatusInternalServerError
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout
	}
	return http.StatusBadGateway
}

// scopeOf reads the scope of a request: scope, or tenant (the scope
// durable.TenantScope derives). The Store validates it.
func scopeOf(r *http.Request) durable.Scope {
	q := r.URL.Query()
	if t := q.Get("tenant"); t != "" {
		return durable.TenantScope(t)
	}
	return durable.Scope(q.Get("scope"))
}

// paging reads limit (default PageSize, 1 to durable.MaxListLimit) and
// after (the cursor), as the CLI's --limit and --after.
func (h *Handler) paging(r *http.Request) (limit int, after string, err error) {
	q := r.URL.Query()
	limit = h.opts.PageSize
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > durable.MaxListLimit {
			return 0, "", fmt.Errorf("limit must be within 1 and %d", durable.MaxListLimit)
		}
		limit = n
	}
	return limit, q.Get("after"), nil
}

// scan reads up to max records through fetch, page after page from the
// first; complete is false when it stopped at max with more to read.
func scan[T any](max int, fetch func(after string, limit int) ([]T, error), id func(T) string) (all []T, complete bool, err error) {
	after := ""
	for len(all) < max {
		limit := min(durable.MaxListLimit, max-len(all))
		list, err := fetch(after, limit)
		if err != nil {
			return nil, false, err
		}
		all = append(all, list...)
		if len(list) < limit {
			return all, true, nil
		}
		after = id(list[len(list)-1])
	}
	// Stopped at max: one more record says whether the scan was complete.
	more, err := fetch(after, 1)
	if err != nil {
		return nil, false, err
	}
	return all, len(more) == 0, nil
}
