package console

import (
	"errors"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/durable-go/durable"
)

// recordPage is the data of a record's page. Err is set (and the record
// zero) when the record could not be read, a corrupt one say: the page
// still offers to delete it.
type recordPage struct {
	Kind    string
	Scope   durable.Scope
	ID      string
	Err     string
	Rec     any
	Headers []header // a key's outcome headers, sorted by name
	Now     time.Time
}

type header struct{ Name, Value string }

// workflow shows one workflow.
func (h *Handler) workflow(w http.ResponseWriter, r *http.Request) {
	sc, id := scopeOf(r), r.URL.Query().Get("id")
	x, err := h.store.GetWorkflow(r.Context(), sc, id)
	h.record(w, r, "workflow", sc, id, x, err, nil)
}

// key_ shows one idempotency key.
func (h *Handler) key_(w http.ResponseWriter, r *http.Request) {
	sc, id := scopeOf(r), r.URL.Query().Get("id")
	x, err := h.store.GetKey(r.Context(), durable.KeyRef{Scope: sc, Key: id})
	var hs []header
	if err == nil && x.Outcome != nil {
		for name, vs := range x.Outcome.Header {
			hs = append(hs, header{name, strings.Join(vs, ", ")})
		}
		sort.Slice(hs, func(i, j int) bool { return hs[i].Name < hs[j].Name })
	}
	h.record(w, r, "key", sc, id, x, err, hs)
}

// lease shows one lease.
func (h *Handler) lease(w http.ResponseWriter, r *http.Request) {
	sc, id := scopeOf(r), r.URL.Query().Get("id")
	x, err := h.store.GetLease(r.Context(), sc, id)
	h.record(w, r, "lease", sc, id, x, err, nil)
}

// record renders a record's page: the record, or why it could not be read.
// A missing record is a 404; a corrupt one is shown as such, with the way
// out (delete).
func (h *Handler) record(w http.ResponseWriter, r *http.Request, kind string, sc durable.Scope, id string, rec any, err error, hs []header) {
	p := recordPage{Kind: kind, Scope: sc, ID: id, Rec: rec, Headers: hs, Now: h.opts.Now()}
	if err != nil {
		if !errors.Is(err, durable.ErrCorrupt) {
			h.failErr(w, r, err)
			return
		}
		p.Rec, p.Err = nil, err.Error()
	}
	h.render(w, r, http.StatusOK, kind, page{Title: kind + " " + id, Scope: sc, Data: p})
}

// find is the search box: an id goes to its record's page.
func (h *Handler) find(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	kind := q.Get("kind")
	switch kind {
	case "workflow", "key", "lease":
	default:
		h.fail(w, r, http.StatusBadRequest, "kind must be workflow, key or lease")
		return
	}
	seeOther(w, kind+"?"+recordQuery(scopeOf(r), strings.TrimSpace(q.Get("id"))))
}

// download sends a workflow's snapshot or a key's outcome body, whole, as
// an attachment that no browser renders.
func (h *Handler) download(w http.ResponseWriter, r *http.Request) {
	sc, id := scopeOf(r), r.URL.Query().Get("id")
	var body []byte
	switch kind := r.URL.Query().Get("kind"); kind {
	case "workflow":
		x, err := h.store.GetWorkflow(r.Context(), sc, id)
		if err != nil {
			h.failErr(w, r, err)
			return
		}
		body = x.Snapshot
	case "key":
		x, err := h.store.GetKey(r.Context(), durable.KeyRef{Scope: sc, Key: id})
		if err != nil {
			h.failErr(w, r, err)
			return
		}
		if x.Outcome != nil {
			body = x.Outcome.Body
		}
	default:
		h.fail(w, r, http.StatusBadRequest, "kind must be workflow or key")
		return
	}
	hd := w.Header()
	hd.Set("Content-Type", "application/octet-stream")
	hd.Set("Content-Disposition", `attachment; filename="`+fileName(r.URL.Query().Get("kind"), id)+`"`)
	_, _ = w.Write(body)
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

// fileName is a download's file name: only characters safe in a header and
// on every file system.
func fileName(kind, id string) string {
	n := unsafeName.ReplaceAllString(id, "_")
	if len(n) > 100 {
		n = n[:100]
	}
	return kind + "-" + n + ".bin"
}
