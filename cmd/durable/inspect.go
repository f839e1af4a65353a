package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/internal/listpage"
)

func runInspect(ctx context.Context, args []string, e *env) error {
	fs, dsn := newFlags(e, "inspect", "workflow|key|lease ID  |  workflows|keys|leases",
		"Print one record: a workflow by id, an idempotency key by key, or a lease by\n"+
			"resource. Snapshots and bodies are shown as text when they are valid UTF-8,\n"+
			"else as base64 (in JSON: base64 always, plus *_text when valid UTF-8).\n\n"+
			"'inspect workflows|keys|leases' lists the records of one scope in id order, a\n"+
			"page at a time: --limit sets the page size, --after ID continues after the last\n"+
			"id of the previous page (printed as the next cursor). Filters: workflows\n"+
			"--status S; keys --state claimed (in flight, or abandoned until cleanup) or\n"+
			"completed; leases --held (only those not expired).")
	target, scopeOf := recordFlags(fs)
	asJSON := jsonFlag(fs)
	var l lister
	fs.StringVar(&l.status, "status", "", "workflows: only this status (e.g. running, succeeded)")
	fs.StringVar(&l.state, "state", "", "keys: only this state (claimed, completed or expired)")
	fs.BoolVar(&l.held, "held", false, "leases: only leases that have not expired")
	fs.IntVar(&l.limit, "limit", 100, "lists: page size, 1-1000")
	fs.StringVar(&l.after, "after", "", "lists: list after this id (the cursor of the previous page)")
	if err := parse(fs, e, args); err != nil {
		return err
	}
	if fs.NArg() >= 1 {
		if list := lists[fs.Arg(0)]; list != nil {
			if fs.NArg() != 1 {
				return usagef("'inspect %s' takes no id", fs.Arg(0))
			}
			if err := l.check(fs.Arg(0)); err != nil {
				return err
			}
			sc, err := scopeOf()
			if err != nil {
				return err
			}
			store, err := openStore(ctx, *dsn)
			if err != nil {
				return err
			}
			defer store.Close()
			l.scope, l.json, l.e = sc, *asJSON, e
			return list(ctx, store, &l)
		}
	}
	kind, sc, id, err := target()
	if err != nil {
		return err
	}
	store, err := openStore(ctx, *dsn)
	if err != nil {
		return err
	}
	defer store.Close()

	var rec any
	var fields [][2]string
	switch kind {
	case "workflow":
		w, err := store.GetWorkflow(ctx, sc, id)
		if err != nil {
			return err
		}
		rec = workflowJSON(w)
		fields = [][2]string{
			{"scope", scopeText(w.Scope)}, {"id", w.ID}, {"status", string(w.Status)},
			{"terminal", fmt.Sprint(w.Status.Terminal())}, {"revision", fmt.Sprint(w.Revision)},
			{"request id", w.RequestID}, {"created", timeText(w.CreatedAt)}, {"updated", timeText(w.UpdatedAt)},
			{"snapshot", bytesText(w.Snapshot)},
		}
	case "key":
		k, err := store.GetKey(ctx, durable.KeyRef{Scope: sc, Key: id})
		if err != nil {
			return err
		}
		rec = keyJSON(k)
		fields = [][2]string{
			{"scope", scopeText(k.Scope)}, {"key", k.Key}, {"state", string(k.State)},
			{"fingerprint", k.Fingerprint}, {"workflow id", k.WorkflowID}, {"created", timeText(k.CreatedAt)},
		}
		if k.State == durable.KeyClaimed {
			fields = append(fields, [2]string{"claim until", timeText(k.LeaseUntil)})
		} else {
			fields = append(fields, [2]string{"completed", timeText(k.CompletedAt)}, [2]string{"expires", timeText(k.ExpiresAt)})
		}
		if o := k.Outcome; o != nil {
			fields = append(fields, [2]string{"code", fmt.Sprint(o.Code)}, [2]string{"ref", o.Ref})
			names := make([]string, 0, len(o.Header))
			for h := range o.Header {
				names = append(names, h)
			}
			sort.Strings(names)
			for _, h := range names {
				fields = append(fields, [2]string{"header " + h, strings.Join(o.Header[h], ", ")})
			}
			fields = append(fields, [2]string{"body", bytesText(o.Body)})
		}
	case "lease":
		l, err := store.GetLease(ctx, sc, id)
		if err != nil {
			return err
		}
		rec = leaseJSON(l)
		fields = [][2]string{
			{"scope", scopeText(l.Scope)}, {"resource", l.Resource}, {"owner", l.Owner},
			{"token", fmt.Sprint(l.Token)}, {"acquired", timeText(l.AcquiredAt)}, {"expires", timeText(l.ExpiresAt)},
		}
	}
	if *asJSON {
		return writeJSON(e, rec)
	}
	printFields(e.stdout, fields)
	return nil
}

func printFields(w io.Writer, fields [][2]string) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, f := range fields {
		if f[1] == "" {
			f[1] = "-"
		}
		fmt.Fprintf(tw, "%s:\t%s\n", f[0], f[1])
	}
	tw.Flush()
}

func scopeText(s durable.Scope) string {
	if s == "" {
		return "(unscoped)"
	}
	return string(s)
}

func timeText(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// bytesText shows UTF-8 payloads as quoted text and everything else as
// base64 with its size, so binary data never garbles a terminal.
func bytesText(b []byte) string {
	if len(b) == 0 {
		return "(empty)"
	}
	if utf8.Valid(b) {
		return fmt.Sprintf("%q", b)
	}
	return fmt.Sprintf("base64 %s (%d bytes)", base64.StdEncoding.EncodeToString(b), len(b))
}

// utf8Text returns b as a string when it is valid UTF-8, for the *_text
// fields of the JSON output.
func utf8Text(b []byte) *string {
	if len(b) == 0 || !utf8.Valid(b) {
		return nil
	}
	s := string(b)
	return &s
}

// lister is one listing command: its flags, and how it prints.
type lister struct {
	status, state, after string
	held                 bool
	limit                int

	scope durable.Scope
	json  bool
	e     *env
}

// lists are the listing commands of inspect.
var lists = map[string]func(context.Context, *durable.Store, *lister) error{
	"workflows": listWorkflows,
	"keys":      listKeys,
	"leases":    listLeases,
}

// check refuses flags that do not apply to what is listed.
func (l *lister) check(what string) error {
	if l.limit < 1 || l.limit > durable.MaxListLimit {
		return usagef("--limit must be within 1 and %d", durable.MaxListLimit)
	}
	for flag, set := range map[string]bool{"workflows --status": l.status != "", "keys --state": l.state != "", "leases --held": l.held} {
		if set && !strings.HasPrefix(flag, what+" ") {
			return usagef("--%s applies to 'inspect %s' only", strings.Fields(flag)[1][2:], strings.Fields(flag)[0])
		}
	}
	switch durable.KeyState(l.state) {
	case "", durable.KeyClaimed, durable.KeyCompleted, durable.KeyExpired:
	default:
		return usagef("--state must be claimed, completed or expired")
	}
	return nil
}

// table prints a listing: a header, one line per record, and the cursor.
func (l *lister) table(header string, rows [][]any, next string) {
	tw := tabwriter.NewWriter(l.e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	for _, r := range rows {
		for i, v := range r {
			if i > 0 {
				fmt.Fprint(tw, "\t")
			}
			if v == "" {
				v = "-"
			}
			fmt.Fprint(tw, v)
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	if next != "" {
		fmt.Fprintf(l.e.stdout, "next page: --after %s\n", next)
	}
}

// short cuts a payload's text for a table cell.
func short(b []byte) string {
	t := bytesText(b)
	if len(t) > 60 {
		t = t[:57] + "..."
	}
	return t
}

// listing is what one listing command prints of records of type T: a
// page fetched through listpage.Fetch, as JSON (the page's records as J, wrapped by
// out with the cursor of the next page) or as a table (header, one row per
// record).
type listing[T, J any] struct {
	fetch  func(limit int) ([]T, error)
	id     func(T) string // the cursor a record gives
	json   func(T) J
	out    func(records []J, next string) any
	header string
	row    func(rec T, now time.Time) []any
}

// print fetches one page of d and prints it as l asks.
func (d listing[T, J]) print(l *lister) error {
	list, next, err := listpage.Fetch(l.limit, durable.MaxListLimit, d.fetch, d.id)
	if err != nil {
		return err
	}
	if l.json {
		recs := make([]J, 0, len(list))
		for _, r := range list {
			recs = append(recs, d.json(r))
		}
		return writeJSON(l.e, d.out(recs, next))
	}
	now := time.Now()
	rows := make([][]any, 0, len(list))
	for _, r := range list {
		rows = append(rows, d.row(r, now))
	}
	l.table(d.header, rows, next)
	return nil
}

type workflowListOut struct {
	Scope     string        `json:"scope"`
	Status    string        `json:"status,omitempty"`
	Workflows []workflowOut `json:"workflows"`
	Next      string        `json:"next,omitempty"` // --after for the next page; "" on the last page
}

func listWorkflows(ctx context.Context, store *durable.Store, l *lister) error {
	return listing[durable.Workflow, workflowOut]{
		fetch: func(limit int) ([]durable.Workflow, error) {
			return store.ListWorkflows(ctx, durable.ListQuery{Scope: l.scope, Status: durable.Status(l.status), After: l.after, Limit: limit})
		},
		id:   func(w durable.Workflow) string { return w.ID },
		json: workflowJSON,
		out: func(ws []workflowOut, next string) any {
			return workflowListOut{Scope: string(l.scope), Status: l.status, Workflows: ws, Next: next}
		},
		header: "id\tstatus\trevision\tupdated\tsnapshot",
		row: func(w durable.Workflow, _ time.Time) []any {
			return []any{w.ID, w.Status, w.Revision, timeText(w.UpdatedAt), short(w.Snapshot)}
		},
	}.print(l)
}

type keyListOut struct {
	Scope string   `json:"scope"`
	State string   `json:"state,omitempty"`
	Keys  []keyOut `json:"keys"`
	Next  string   `json:"next,omitempty"`
}

func listKeys(ctx context.Context, store *durable.Store, l *lister) error {
	return listing[durable.KeyRecord, keyOut]{
		fetch: func(limit int) ([]durable.KeyRecord, error) {
			return store.ListKeys(ctx, durable.KeyListQuery{Scope: l.scope, State: durable.KeyState(l.state), After: l.after, Limit: limit})
		},
		id:   func(k durable.KeyRecord) string { return k.Key },
		json: keyJSON,
		out: func(ks []keyOut, next string) any {
			return keyListOut{Scope: string(l.scope), State: l.state, Keys: ks, Next: next}
		},
		header: "key\tstate\tclaim until / expires\tworkflow id\tcode\tbody",
		row: func(k durable.KeyRecord, now time.Time) []any {
			state, until, code, body := string(k.State), "", "", ""
			if k.State == durable.KeyClaimed {
				until = timeText(k.LeaseUntil)
				if !k.LeaseUntil.After(now) {
					state = "claimed (expired)"
				}
			} else {
				until = timeText(k.ExpiresAt)
			}
			if o := k.Outcome; o != nil {
				code, body = fmt.Sprint(o.Code), short(o.Body)
			}
			return []any{k.Key, state, until, k.WorkflowID, code, body}
		},
	}.print(l)
}

type leaseListOut struct {
	Scope  string     `json:"scope"`
	Held   bool       `json:"held,omitempty"`
	Leases []leaseOut `json:"leases"`
	Next   string     `json:"next,omitempty"`
}

func listLeases(ctx context.Context, store *durable.Store, l *lister) error {
	return listing[durable.Lease, leaseOut]{
		fetch: func(limit int) ([]durable.Lease, error) {
			return store.ListLeases(ctx, durable.LeaseListQuery{Scope: l.scope, Held: l.held, After: l.after, Limit: limit})
		},
		id:   func(x durable.Lease) string { return x.Resource },
		json: leaseJSON,
		out: func(ls []leaseOut, next string) any {
			return leaseListOut{Scope: string(l.scope), Held: l.held, Leases: ls, Next: next}
		},
		header: "resource\towner\ttoken\tacquired\texpires",
		row: func(x durable.Lease, now time.Time) []any {
			expires := timeText(x.ExpiresAt)
			if !x.ExpiresAt.After(now) {
				expires += " (expired)"
			}
			return []any{x.Resource, x.Owner, x.Token, timeText(x.AcquiredAt), expires}
		},
	}.print(l)
}

// JSON shapes: explicit field names, bytes as base64 (encoding/json's
// default for []byte), times in RFC 3339.

type workflowOut struct {
	Scope     string    `json:"scope"`
	ID        string    `json:"id"`
	RequestID string    `json:"request_id,omitempty"`
	Status    string    `json:"status"`
	Terminal  bool      `json:"terminal"`
	Revision  int64     `json:"revision"`
	Snapshot  []byte    `json:"snapshot"`
	Text      *string   `json:"snapshot_text,omitempty"` // the snapshot when it is valid UTF-8
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

func workflowJSON(w durable.Workflow) workflowOut {
	return workflowOut{string(w.Scope), w.ID, w.RequestID, string(w.Status), w.Status.Terminal(), w.Revision, w.Snapshot, utf8Text(w.Snapshot), w.CreatedAt, w.UpdatedAt}
}

type outcomeOut struct {
	Code   int                 `json:"code"`
	Header map[string][]string `json:"header,omitempty"`
	Body   []byte              `json:"body"`
	Text   *string             `json:"body_text,omitempty"` // the body when it is valid UTF-8
	Ref    string              `json:"ref,omitempty"`
}

type keyOut struct {
	Scope       string      `json:"scope"`
	Key         string      `json:"key"`
	Fingerprint string      `json:"fingerprint"`
	WorkflowID  string      `json:"workflow_id,omitempty"`
	State       string      `json:"state"`
	LeaseUntil  *time.Time  `json:"lease_until,omitempty"`
	Outcome     *outcomeOut `json:"outcome,omitempty"`
	CreatedAt   time.Time   `json:"created_at"`
	CompletedAt *time.Time  `json:"completed_at,omitempty"`
	ExpiresAt   *time.Time  `json:"expires_at,omitempty"`
}

func optTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func keyJSON(k durable.KeyRecord) keyOut {
	out := keyOut{Scope: string(k.Scope), Key: k.Key, Fingerprint: k.Fingerprint, WorkflowID: k.WorkflowID,
		State: string(k.State), LeaseUntil: optTime(k.LeaseUntil), CreatedAt: k.CreatedAt,
		CompletedAt: optTime(k.CompletedAt), ExpiresAt: optTime(k.ExpiresAt)}
	if o := k.Outcome; o != nil {
		out.Outcome = &outcomeOut{Code: o.Code, Header: o.Header, Body: o.Body, Text: utf8Text(o.Body), Ref: o.Ref}
	}
	return out
}

type leaseOut struct {
	Scope      string    `json:"scope"`
	Resource   string    `json:"resource"`
	Owner      string    `json:"owner"`
	Token      int64     `json:"token"`
	AcquiredAt time.Time `json:"acquired_at"`
	ExpiresAt  time.Time `json:"expires_at"`
}

func leaseJSON(l durable.Lease) leaseOut {
	return leaseOut{string(l.Scope), l.Resource, l.Owner, l.Token, l.AcquiredAt, l.ExpiresAt}
}
