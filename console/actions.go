package console

import (
	"net/http"
	"time"

	"github.com/durable-go/durable"
)

// deletePage is the data of the delete confirmation and its result.
type deletePage struct {
	Kind, ID string
	CSRF     string
	Done     bool
	Existed  bool
}

func recordKind(s string) (durable.RecordKind, bool) {
	switch k := durable.RecordKind(s); k {
	case durable.KindWorkflow, durable.KindKey, durable.KindLease:
		return k, true
	}
	return "", false
}

// confirmDelete is the confirmation page of a delete: what will be
// deleted, and the form that does it (read-only consoles say they cannot).
func (h *Handler) confirmDelete(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	kind, ok := recordKind(q.Get("kind"))
	if !ok {
		h.fail(w, r, http.StatusBadRequest, "kind must be workflow, key or lease")
		return
	}
	sc, id := scopeOf(r), q.Get("id")
	p := deletePage{Kind: string(kind), ID: id}
	if h.opts.AllowActions {
		p.CSRF = h.actionToken("delete", string(kind), string(sc), id)
	}
	h.render(w, r, http.StatusOK, "delete", page{Title: "Delete " + string(kind) + " " + id, Scope: sc, Data: p})
}

// doDelete deletes the record its confirmation page named.
func (h *Handler) doDelete(w http.ResponseWriter, r *http.Request) {
	kind, sc, id := r.PostFormValue("kind"), durable.Scope(r.PostFormValue("scope")), r.PostFormValue("id")
	if status, msg := h.checkAction(r, "delete", kind, string(sc), id); status != 0 {
		h.render(w, r, status, "error", page{Title: http.StatusText(status), Scope: sc, Error: msg})
		return
	}
	k, ok := recordKind(kind)
	if !ok {
		h.fail(w, r, http.StatusBadRequest, "kind must be workflow, key or lease")
		return
	}
	existed, err := h.store.DeleteRecord(r.Context(), k, sc, id)
	if err != nil {
		h.render(w, r, statusOf(err), "error", page{Title: "Not deleted", Scope: sc, Error: err.Error()})
		return
	}
	h.render(w, r, http.StatusOK, "delete", page{Title: "Deleted", Scope: sc, Data: deletePage{Kind: kind, ID: id, Done: true, Existed: existed}})
}

// cleanupPage is the data of the cleanup dry run and its result.
type cleanupPage struct {
	Age      string // the terminal age, as a Go duration
	Count    durable.CleanupResult
	CountErr string // the backend cannot count (the run is still offered)
	CSRF     string
	Done     bool
	Deleted  durable.CleanupResult // totals of a run
	Passes   int
}

// cleanupAge reads the terminal age (default 168h, the CLI's).
func cleanupAge(s string) (time.Duration, bool) {
	if s == "" {
		return 7 * 24 * time.Hour, true
	}
	d, err := time.ParseDuration(s)
	return d, err == nil && d >= 0
}

// cleanupDryRun counts what cleanup would delete now and, on a console
// that allows actions, offers to run it.
func (h *Handler) cleanupDryRun(w http.ResponseWriter, r *http.Request) {
	age, ok := cleanupAge(r.URL.Query().Get("terminal_age"))
	if !ok {
		h.fail(w, r, http.StatusBadRequest, "terminal_age must be a duration such as 168h, not negative")
		return
	}
	p := cleanupPage{Age: age.String()}
	c, err := h.store.CountCleanup(r.Context(), durable.CleanupRequest{TerminalAge: age, Limit: durable.MaxCleanupLimit})
	if err != nil {
		p.CountErr = err.Error()
	}
	p.Count = c
	if h.opts.AllowActions {
		p.CSRF = h.actionToken("cleanup", p.Age)
	}
	h.render(w, r, http.StatusOK, "cleanup", page{Title: "Cleanup", Scope: scopeOf(r), Data: p})
}

// maxCleanupPasses bounds one run from the console; the page says when it
// stopped with more to delete.
const maxCleanupPasses = 100

// doCleanup runs cleanup passes until nothing is left (or the request
// ends, or maxCleanupPasses), and shows the totals.
func (h *Handler) doCleanup(w http.ResponseWriter, r *http.Request) {
	ageText := r.PostFormValue("terminal_age")
	if status, msg := h.checkAction(r, "cleanup", ageText); status != 0 {
		h.render(w, r, status, "error", page{Title: http.StatusText(status), Error: msg})
		return
	}
	age, ok := cleanupAge(ageText)
	if !ok {
		h.fail(w, r, http.StatusBadRequest, "terminal_age must be a duration such as 168h, not negative")
		return
	}
	p := cleanupPage{Age: age.String(), Done: true}
	for p.Passes < maxCleanupPasses {
		res, err := h.store.Cleanup(r.Context(), durable.CleanupRequest{TerminalAge: age})
		p.Passes++
		p.Deleted.Workflows += res.Workflows
		p.Deleted.Keys += res.Keys
		p.Deleted.Outcomes += res.Outcomes
		p.Deleted.Leases += res.Leases
		p.Deleted.More = res.More
		if err != nil {
			p.CountErr = err.Error()
			break
		}
		if !res.More {
			break
		}
	}
	h.render(w, r, http.StatusOK, "cleanup", page{Title: "Cleanup done", Data: p})
}
