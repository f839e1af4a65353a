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
)

func runInspect(ctx context.Context, args []string, e *env) error {
	fs, dsn := newFlags(e, "inspect", "workflow|key|lease ID  |  workflows",
		"Print one record: a workflow by id, an idempotency key by key, or a lease by\n"+
			"resource. Snapshots and bodies are shown as text when they are valid UTF-8,\n"+
			"else as base64 (in JSON: base64 always, plus *_text when valid UTF-8).\n\n"+
			"'inspect workflows' lists the workflows of one scope in id order, a page at a\n"+
			"time: --status filters, --limit sets the page size, --after ID continues after\n"+
			"the last id of the previous page (printed as the next cursor). The Store offers\n"+
			"no listing of idempotency keys or leases yet.")
	target, scopeOf := recordFlags(fs)
	asJSON := jsonFlag(fs)
	status := fs.String("status", "", "workflows: only this status (e.g. running, succeeded)")
	limit := fs.Int("limit", 100, "workflows: page size, 1-1000")
	after := fs.String("after", "", "workflows: list after this id (the cursor of the previous page)")
	if err := parse(fs, e, args); err != nil {
		return err
	}
	if fs.NArg() >= 1 {
		switch fs.Arg(0) {
		case "workflows":
			return listWorkflows(ctx, e, fs.Args(), *dsn, scopeOf, *status, *limit, *after, *asJSON)
		case "keys", "leases":
			return usagef("listing %s is not supported: the Store offers no listing of them (inspect one with 'durable inspect %s ID')", fs.Arg(0), strings.TrimSuffix(fs.Arg(0), "s"))
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

type workflowListOut struct {
	Scope     string        `json:"scope"`
	Status    string        `json:"status,omitempty"`
	Workflows []workflowOut `json:"workflows"`
	Next      string        `json:"next,omitempty"` // --after for the next page; "" on the last page
}

func listWorkflows(ctx context.Context, e *env, args []string, dsn string, scopeOf func() (durable.Scope, error), status string, limit int, after string, asJSON bool) error {
	if len(args) != 1 {
		return usagef("'inspect workflows' takes no id")
	}
	sc, err := scopeOf()
	if err != nil {
		return err
	}
	if limit < 1 || limit > 1000 {
		return usagef("--limit must be within 1 and 1000")
	}
	store, err := openStore(ctx, dsn)
	if err != nil {
		return err
	}
	defer store.Close()
	// One more than the page tells whether there is a next page.
	q := durable.ListQuery{Scope: sc, Status: durable.Status(status), After: after, Limit: min(limit+1, 1000)}
	list, err := store.ListWorkflows(ctx, q)
	if err != nil {
		return err
	}
	out := workflowListOut{Scope: string(sc), Status: status, Workflows: []workflowOut{}}
	more := len(list) > limit || (limit == 1000 && len(list) == 1000)
	if len(list) > limit {
		list = list[:limit]
	}
	for _, w := range list {
		out.Workflows = append(out.Workflows, workflowJSON(w))
	}
	if more && len(list) > 0 {
		out.Next = list[len(list)-1].ID
	}
	if asJSON {
		return writeJSON(e, out)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "id\tstatus\trevision\tupdated\tsnapshot")
	for _, w := range list {
		snap := bytesText(w.Snapshot)
		if len(snap) > 60 {
			snap = snap[:57] + "..."
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", w.ID, w.Status, w.Revision, timeText(w.UpdatedAt), snap)
	}
	tw.Flush()
	if out.Next != "" {
		fmt.Fprintf(e.stdout, "next page: --after %s\n", out.Next)
	}
	return nil
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
