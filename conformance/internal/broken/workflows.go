package broken

import (
	"bytes"
	"context"
	"net/textproto"

	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/exactmem"
)

// Workflows and stored values.
func init() {
	register("cas-ignores-revision", variant{
		doc:  "UpdateWorkflow checks the status but ignores ExpectRevision",
		wrap: func(b *exactmem.Backend, _ *state) contract.Backend { return casIgnoresRevision{b} },
	})
	register("conflict-without-details", variant{
		doc:  "UpdateWorkflow's Conflict errors carry no Details",
		wrap: func(b *exactmem.Backend, _ *state) contract.Backend { return conflictWithoutDetails{b} },
	})
	register("snapshot-truncated", variant{
		doc:  "snapshots are stored up to 64 KiB (the write still returns what the caller sent)",
		wrap: func(b *exactmem.Backend, _ *state) contract.Backend { return snapshotTruncated{b} },
	})
	register("body-truncated", variant{
		doc:  "outcome bodies are stored up to 512 KiB (the completion still returns what the caller sent)",
		wrap: func(b *exactmem.Backend, _ *state) contract.Backend { return bodyTruncated{b} },
	})
	register("ref-truncated", variant{
		doc:  "Outcome.Ref is stored in a varchar(255): longer refs lose their end",
		wrap: func(b *exactmem.Backend, _ *state) contract.Backend { return refTruncated{b} },
	})
	register("fingerprint-truncated", variant{
		doc:  "fingerprints are stored and compared on their first 255 bytes",
		wrap: func(b *exactmem.Backend, _ *state) contract.Backend { return fingerprintTruncated{b} },
	})
	register("header-names-canonicalized", variant{
		doc:  "outcome header names are stored in canonical MIME form (content-type becomes Content-Type; names differing in case merge)",
		wrap: func(b *exactmem.Backend, _ *state) contract.Backend { return headerNamesCanonicalized{b} },
	})
	register("empty-header-values-kept-empty", variant{
		doc:  "a header name with a nil or empty value list reads back with an empty, non-nil list (not nil)",
		wrap: func(b *exactmem.Backend, _ *state) contract.Backend { return emptyHeaderValuesKept{b} },
	})
	register("keeps-caller-snapshot", variant{
		doc:  "the stored snapshot is the caller's slice, not a copy: the caller changing it changes storage",
		wrap: func(b *exactmem.Backend, st *state) contract.Backend { return &keepsCallerSnapshot{b, st} },
	})
	register("returns-shared-snapshot", variant{
		doc:  "GetWorkflow and ListWorkflows return the stored snapshot slice, not a copy: a caller changing it changes storage",
		wrap: func(b *exactmem.Backend, st *state) contract.Backend { return &returnsSharedSnapshot{b, st} },
	})
	register("keeps-caller-outcome", variant{
		doc:  "the stored outcome is the caller's body and header map, not copies",
		wrap: func(b *exactmem.Backend, st *state) contract.Backend { return &keepsCallerOutcome{b, st} },
	})
	register("returns-shared-outcome", variant{
		doc:  "reads of a completed key return the stored outcome (body and header map), not copies",
		wrap: func(b *exactmem.Backend, st *state) contract.Backend { return &returnsSharedOutcome{b, st} },
	})
}

type casIgnoresRevision struct{ *exactmem.Backend }

func (b casIgnoresRevision) UpdateWorkflow(ctx context.Context, u contract.Update) (contract.Workflow, error) {
	u.ExpectRevision = 0
	return b.Backend.UpdateWorkflow(ctx, u)
}

type conflictWithoutDetails struct{ *exactmem.Backend }

func (b conflictWithoutDetails) UpdateWorkflow(ctx context.Context, u contract.Update) (contract.Workflow, error) {
	w, err := b.Backend.UpdateWorkflow(ctx, u)
	if contract.CodeOf(err) == contract.Conflict {
		return w, &contract.Error{Code: contract.Conflict, Msg: "workflow changed"}
	}
	return w, err
}

// --- sizes ---

type snapshotTruncated struct{ *exactmem.Backend }

const snapshotColumn = 64 << 10

func (b snapshotTruncated) CreateWorkflow(ctx context.Context, w contract.Workflow) (contract.Workflow, error) {
	orig := w.Snapshot
	if len(orig) > snapshotColumn {
		w.Snapshot = orig[:snapshotColumn]
	}
	out, err := b.Backend.CreateWorkflow(ctx, w)
	if err == nil {
		out.Snapshot = orig
	}
	return out, err
}

func (b snapshotTruncated) UpdateWorkflow(ctx context.Context, u contract.Update) (contract.Workflow, error) {
	orig := u.Snapshot
	if len(orig) > snapshotColumn {
		u.Snapshot = orig[:snapshotColumn]
	}
	out, err := b.Backend.UpdateWorkflow(ctx, u)
	if err == nil && bytes.Equal(out.Snapshot, u.Snapshot) {
		out.Snapshot = orig
	}
	return out, err
}

type bodyTruncated struct{ *exactmem.Backend }

func (b bodyTruncated) CompleteKey(ctx context.Context, c contract.Completion) (contract.KeyRecord, error) {
	orig := c.Outcome.Body
	if len(orig) > 512<<10 {
		c.Outcome.Body = orig[:512<<10]
	}
	rec, err := b.Backend.CompleteKey(ctx, c)
	if err == nil && rec.Outcome != nil && len(rec.Outcome.Body) == len(c.Outcome.Body) {
		rec.Outcome.Body = bytes.Clone(orig)
	}
	return rec, err
}

type refTruncated struct{ *exactmem.Backend }

func (b refTruncated) CompleteKey(ctx context.Context, c contract.Completion) (contract.KeyRecord, error) {
	if len(c.Outcome.Ref) > 255 {
		c.Outcome.Ref = c.Outcome.Ref[:255]
	}
	return b.Backend.CompleteKey(ctx, c)
}

type fingerprintTruncated struct{ *exactmem.Backend }

func (b fingerprintTruncated) ClaimKey(ctx context.Context, req contract.ClaimRequest) (contract.Claim, error) {
	if len(req.Fingerprint) > 255 {
		req.Fingerprint = req.Fingerprint[:255]
	}
	return b.Backend.ClaimKey(ctx, req)
}

type headerNamesCanonicalized struct{ *exactmem.Backend }

func (b headerNamesCanonicalized) CompleteKey(ctx context.Context, c contract.Completion) (contract.KeyRecord, error) {
	if c.Outcome.Header != nil {
		h := map[string][]string{}
		for k, vs := range c.Outcome.Header {
			ck := textproto.CanonicalMIMEHeaderKey(k)
			h[ck] = append(h[ck], vs...)
		}
		c.Outcome.Header = h
	}
	return b.Backend.CompleteKey(ctx, c)
}

// emptyHeaderValuesKept returns every header name without values with an
// empty, non-nil list, as a codec that keeps "no values" apart from "nil"
// would.
type emptyHeaderValuesKept struct{ *exactmem.Backend }

func (emptyHeaderValuesKept) fix(r contract.KeyRecord, err error) (contract.KeyRecord, error) {
	if r.Outcome != nil && r.Outcome.Header != nil {
		o := *r.Outcome
		o.Header = make(map[string][]string, len(r.Outcome.Header))
		for k, vs := range r.Outcome.Header {
			if len(vs) == 0 {
				vs = []string{}
			}
			o.Header[k] = vs
		}
		r.Outcome = &o
	}
	return r, err
}

func (b emptyHeaderValuesKept) CompleteKey(ctx context.Context, c contract.Completion) (contract.KeyRecord, error) {
	return b.fix(b.Backend.CompleteKey(ctx, c))
}

func (b emptyHeaderValuesKept) GetKey(ctx context.Context, k contract.KeyRef) (contract.KeyRecord, error) {
	return b.fix(b.Backend.GetKey(ctx, k))
}

func (b emptyHeaderValuesKept) WaitKey(ctx context.Context, k contract.KeyRef) (contract.KeyRecord, error) {
	return b.fix(b.Backend.WaitKey(ctx, k))
}

func (b emptyHeaderValuesKept) ClaimKey(ctx context.Context, req contract.ClaimRequest) (contract.Claim, error) {
	c, err := b.Backend.ClaimKey(ctx, req)
	c.Record, _ = b.fix(c.Record, nil)
	return c, err
}

func (b emptyHeaderValuesKept) ListKeys(ctx context.Context, q contract.KeyListQuery) ([]contract.KeyRecord, error) {
	recs, err := b.Backend.ListKeys(ctx, q)
	for i := range recs {
		recs[i], _ = b.fix(recs[i], nil)
	}
	return recs, err
}

// --- aliasing ---

// keepsCallerSnapshot remembers the caller's snapshot slice and serves
// reads from it, as a backend that stored the slice itself would.
type keepsCallerSnapshot struct {
	*exactmem.Backend
	st *state
}

func (b *keepsCallerSnapshot) keep(scope contract.Scope, id string, snap []byte) {
	b.st.mu.Lock()
	b.st.snapAlias[recKey{scope, id}] = snap
	b.st.mu.Unlock()
}

func (b *keepsCallerSnapshot) serve(w contract.Workflow) contract.Workflow {
	b.st.mu.Lock()
	defer b.st.mu.Unlock()
	if snap, ok := b.st.snapAlias[recKey{w.Scope, w.ID}]; ok {
		w.Snapshot = bytes.Clone(snap)
	}
	return w
}

func (b *keepsCallerSnapshot) CreateWorkflow(ctx context.Context, w contract.Workflow) (contract.Workflow, error) {
	out, err := b.Backend.CreateWorkflow(ctx, w)
	if err == nil {
		b.keep(w.Scope, w.ID, w.Snapshot)
	}
	return out, err
}

func (b *keepsCallerSnapshot) UpdateWorkflow(ctx context.Context, u contract.Update) (contract.Workflow, error) {
	out, err := b.Backend.UpdateWorkflow(ctx, u)
	if err == nil && bytes.Equal(out.Snapshot, u.Snapshot) {
		b.keep(u.Scope, u.ID, u.Snapshot)
	}
	return out, err
}

func (b *keepsCallerSnapshot) GetWorkflow(ctx context.Context, scope contract.Scope, id string) (contract.Workflow, error) {
	w, err := b.Backend.GetWorkflow(ctx, scope, id)
	if err != nil {
		return w, err
	}
	return b.serve(w), nil
}

func (b *keepsCallerSnapshot) ListWorkflows(ctx context.Context, q contract.ListQuery) ([]contract.Workflow, error) {
	ws, err := b.Backend.ListWorkflows(ctx, q)
	for i := range ws {
		ws[i] = b.serve(ws[i])
	}
	return ws, err
}

// returnsSharedSnapshot hands every reader of one revision the same slice.
type returnsSharedSnapshot struct {
	*exactmem.Backend
	st *state
}

func (b *returnsSharedSnapshot) share(w contract.Workflow) contract.Workflow {
	b.st.mu.Lock()
	defer b.st.mu.Unlock()
	k := recKey{w.Scope, w.ID}
	if c, ok := b.st.snapCache[k]; ok && c.rev == w.Revision {
		w.Snapshot = c.snap
	} else {
		b.st.snapCache[k] = cachedSnap{w.Revision, w.Snapshot}
	}
	return w
}

func (b *returnsSharedSnapshot) GetWorkflow(ctx context.Context, scope contract.Scope, id string) (contract.Workflow, error) {
	w, err := b.Backend.GetWorkflow(ctx, scope, id)
	if err != nil {
		return w, err
	}
	return b.share(w), nil
}

func (b *returnsSharedSnapshot) ListWorkflows(ctx context.Context, q contract.ListQuery) ([]contract.Workflow, error) {
	ws, err := b.Backend.ListWorkflows(ctx, q)
	for i := range ws {
		ws[i] = b.share(ws[i])
	}
	return ws, err
}

// keepsCallerOutcome serves completed keys' outcomes from the caller's
// body and header map.
type keepsCallerOutcome struct {
	*exactmem.Backend
	st *state
}

func (b *keepsCallerOutcome) serve(r contract.KeyRecord) contract.KeyRecord {
	b.st.mu.Lock()
	defer b.st.mu.Unlock()
	if o, ok := b.st.outAlias[r.KeyRef]; ok && r.Outcome != nil {
		cp := o
		cp.Body = bytes.Clone(o.Body)
		cp.Header = map[string][]string{}
		for k, vs := range o.Header {
			cp.Header[k] = append([]string(nil), vs...)
		}
		r.Outcome = &cp
	}
	return r
}

func (b *keepsCallerOutcome) CompleteKey(ctx context.Context, c contract.Completion) (contract.KeyRecord, error) {
	rec, err := b.Backend.CompleteKey(ctx, c)
	if err == nil && rec.Outcome != nil && rec.Outcome.Code == c.Outcome.Code && rec.Outcome.Ref == c.Outcome.Ref && bytes.Equal(rec.Outcome.Body, c.Outcome.Body) {
		b.st.mu.Lock()
		b.st.outAlias[c.KeyRef] = c.Outcome // this completion's outcome is the stored one
		b.st.mu.Unlock()
	}
	return b.serve(rec), err
}

func (b *keepsCallerOutcome) GetKey(ctx context.Context, k contract.KeyRef) (contract.KeyRecord, error) {
	rec, err := b.Backend.GetKey(ctx, k)
	return b.serve(rec), err
}

func (b *keepsCallerOutcome) ClaimKey(ctx context.Context, req contract.ClaimRequest) (contract.Claim, error) {
	c, err := b.Backend.ClaimKey(ctx, req)
	c.Record = b.serve(c.Record)
	return c, err
}

func (b *keepsCallerOutcome) WaitKey(ctx context.Context, k contract.KeyRef) (contract.KeyRecord, error) {
	rec, err := b.Backend.WaitKey(ctx, k)
	return b.serve(rec), err
}

// returnsSharedOutcome hands every reader of a completed key the same
// outcome: the same body slice and header map.
type returnsSharedOutcome struct {
	*exactmem.Backend
	st *state
}

func (b *returnsSharedOutcome) share(r contract.KeyRecord) contract.KeyRecord {
	if r.Outcome == nil {
		return r
	}
	b.st.mu.Lock()
	defer b.st.mu.Unlock()
	k := outKey{r.KeyRef, r.CompletedAt}
	if o, ok := b.st.outCache[k]; ok {
		r.Outcome = o
	} else {
		b.st.outCache[k] = r.Outcome
	}
	return r
}

func (b *returnsSharedOutcome) CompleteKey(ctx context.Context, c contract.Completion) (contract.KeyRecord, error) {
	rec, err := b.Backend.CompleteKey(ctx, c)
	return b.share(rec), err
}

func (b *returnsSharedOutcome) GetKey(ctx context.Context, k contract.KeyRef) (contract.KeyRecord, error) {
	rec, err := b.Backend.GetKey(ctx, k)
	return b.share(rec), err
}

func (b *returnsSharedOutcome) ClaimKey(ctx context.Context, req contract.ClaimRequest) (contract.Claim, error) {
	c, err := b.Backend.ClaimKey(ctx, req)
	c.Record = b.share(c.Record)
	return c, err
}

func (b *returnsSharedOutcome) WaitKey(ctx context.Context, k contract.KeyRef) (contract.KeyRecord, error) {
	rec, err := b.Backend.WaitKey(ctx, k)
	return b.share(rec), err
}
