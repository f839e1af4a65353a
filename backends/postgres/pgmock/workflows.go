package pgmock

import (
	"bytes"
	"context"
	"fmt"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/backends/postgres"
	"github.com/durable-go/durable/backends/postgres/internal/mockspec"
)

// --- opening ---

// Open is the expectation of building the backend (postgres.New or
// postgres.NewBackend): see [Mock.ExpectOpen].
type Open struct{ expectation }

// ExpectOpen expects what building the backend sends for the migrate mode
// of the backend's options: nothing with MigrateOff; with MigrateVerify,
// or MigrateAuto on a current schema, the read of the schema version and,
// when it is current, the list of the schema's objects. Choose the schema
// the server has with Current or Version.
func (m *Mock) ExpectOpen() *Open {
	e := &Open{m.begin("Open", func() mockspec.Statement {
		stmts, err := m.gen.Open(int64(postgres.LatestVersion()), false)
		if err != nil || len(stmts) == 0 {
			panic("pgmock: with migrate=off opening sends nothing that could fail")
		}
		return stmts[0]
	})}
	m.track(&e.expectation)
	return e
}

// Current: the schema is at the version this code needs, with its tables
// and sequence. Building the backend succeeds.
func (e *Open) Current() { e.Version(postgres.LatestVersion(), false) }

// Version: the schema records version (dirty: a migration failed
// halfway). Anything but the current version fails with
// ErrSchemaMismatch under MigrateVerify; MigrateAuto would migrate, which
// pgmock does not mock (it panics).
func (e *Open) Version(version uint, dirty bool) {
	stmts, err := e.m.gen.Open(int64(version), dirty)
	if err != nil {
		panic("pgmock: " + err.Error())
	}
	e.finish(stmts)
}

// --- workflows ---

// CreateWorkflow is the expectation of Store.CreateWorkflow.
type CreateWorkflow struct {
	expectation
	w durable.Workflow
}

// ExpectCreateWorkflow expects Store.CreateWorkflow(ctx, w).
func (m *Mock) ExpectCreateWorkflow(w durable.Workflow) *CreateWorkflow {
	w = capture[durable.Workflow](m, "CreateWorkflow", func(ctx context.Context, s *durable.Store) error {
		_, err := s.CreateWorkflow(ctx, w)
		return err
	})
	e := &CreateWorkflow{w: w}
	e.expectation = m.begin("CreateWorkflow", func() mockspec.Statement { return m.gen.CreateWorkflow(w, nil)[0] })
	m.track(&e.expectation)
	return e
}

// Created: the workflow is new. It returns what the Store returns:
// revision 1, created and updated at the server's time.
func (e *CreateWorkflow) Created() durable.Workflow {
	at := e.m.now()
	e.finish(e.m.gen.CreateWorkflow(e.w, &at))
	w := e.w
	w.Revision, w.Snapshot, w.CreatedAt, w.UpdatedAt = 1, bytes.Clone(w.Snapshot), at, at
	return w
}

// Exists: the workflow exists (ErrAlreadyExists).
func (e *CreateWorkflow) Exists() { e.finish(e.m.gen.CreateWorkflow(e.w, nil)) }

// GetWorkflow is the expectation of Store.GetWorkflow.
type GetWorkflow struct {
	expectation
	scope durable.Scope
	id    string
}

// ExpectGetWorkflow expects Store.GetWorkflow(ctx, scope, id). Store.Step
// starts with it.
func (m *Mock) ExpectGetWorkflow(scope durable.Scope, id string) *GetWorkflow {
	r := capture[scopedIDReq](m, "GetWorkflow", func(ctx context.Context, s *durable.Store) error {
		_, err := s.GetWorkflow(ctx, scope, id)
		return err
	})
	e := &GetWorkflow{scope: r.scope, id: r.id}
	e.expectation = m.begin("GetWorkflow", func() mockspec.Statement { return m.gen.GetWorkflow(r.scope, r.id, nil)[0] })
	m.track(&e.expectation)
	return e
}

// Returns: the workflow is wf (its Scope and ID are the request's; a zero
// Status is StatusPending, a zero Revision 1, zero times the server's
// time). It returns what the Store returns.
func (e *GetWorkflow) Returns(wf durable.Workflow) durable.Workflow {
	wf = e.m.stored(e.scope, e.id, wf)
	e.finish(e.m.gen.GetWorkflow(e.scope, e.id, &wf))
	return wf
}

// NotFound: there is no such workflow (ErrNotFound).
func (e *GetWorkflow) NotFound() { e.finish(e.m.gen.GetWorkflow(e.scope, e.id, nil)) }

// stored is wf as the server stores it in scope under id, with defaults.
func (m *Mock) stored(scope durable.Scope, id string, wf durable.Workflow) durable.Workflow {
	wf.Scope, wf.ID = scope, id
	if wf.Status == "" {
		wf.Status = durable.StatusPending
	}
	if wf.Revision == 0 {
		wf.Revision = 1
	}
	wf.CreatedAt = m.orNow(wf.CreatedAt)
	wf.UpdatedAt = m.orNow(wf.UpdatedAt)
	return wf
}

// UpdateWorkflow is the expectation of Store.UpdateWorkflow.
type UpdateWorkflow struct {
	expectation
	u durable.Update
}

// ExpectUpdateWorkflow expects Store.UpdateWorkflow(ctx, u). Store.Step
// ends with it.
func (m *Mock) ExpectUpdateWorkflow(u durable.Update) *UpdateWorkflow {
	u = capture[durable.Update](m, "UpdateWorkflow", func(ctx context.Context, s *durable.Store) error {
		_, err := s.UpdateWorkflow(ctx, u)
		return err
	})
	e := &UpdateWorkflow{u: u}
	e.expectation = m.begin("UpdateWorkflow", func() mockspec.Statement {
		return m.gen.UpdateWorkflow(u, mockspec.UpdateSeen{})[0]
	})
	m.track(&e.expectation)
	return e
}

// current is the record the update finds, from cur with defaults: the
// expected status and revision (1 when any revision is expected).
func (e *UpdateWorkflow) current(cur durable.Workflow) durable.Workflow {
	if cur.Status == "" {
		cur.Status = e.u.ExpectStatus
	}
	if cur.Revision == 0 {
		cur.Revision = max(e.u.ExpectRevision, 1)
	}
	return e.m.stored(e.u.Scope, e.u.ID, cur)
}

// Applies: the update applies to cur, the stored record (zero fields
// default to what the update expects: its status and revision; zero times
// to the server's time). It returns what the Store returns: cur with the
// update's status, request id and snapshot, the next revision, updated at
// the server's time.
func (e *UpdateWorkflow) Applies(cur durable.Workflow) durable.Workflow {
	cur = e.current(cur)
	u := e.u
	if cur.Status != u.ExpectStatus || u.ExpectRevision != 0 && cur.Revision != u.ExpectRevision || cur.Status.Terminal() {
		panic(fmt.Sprintf("pgmock: an update expecting status %q revision %d does not apply to a record at status %q revision %d",
			u.ExpectStatus, u.ExpectRevision, cur.Status, cur.Revision))
	}
	next := cur
	next.Status, next.RequestID, next.Snapshot = u.Status, u.RequestID, u.Snapshot
	next.Revision, next.UpdatedAt = cur.Revision+1, e.m.now()
	e.finish(e.m.gen.UpdateWorkflow(u, mockspec.UpdateSeen{Applied: true, Record: next}))
	return next
}

// Conflict: the stored record is actual, which is not what the update
// expects (ErrConflict, whose Details give actual's status and revision).
// A terminal actual is Terminal's.
func (e *UpdateWorkflow) Conflict(actual durable.Workflow) {
	actual = e.current(actual)
	if actual.Status.Terminal() {
		panic("pgmock: a terminal record makes the update fail with ErrTerminal: use Terminal")
	}
	e.finish(e.m.gen.UpdateWorkflow(e.u, mockspec.UpdateSeen{Found: true, FenceOK: true, Record: actual}))
}

// Terminal: the stored record is actual, in a terminal status. The Store
// returns ErrTerminal, or actual itself when the update writes that same
// status.
func (e *UpdateWorkflow) Terminal(actual durable.Workflow) durable.Workflow {
	actual = e.current(actual)
	if !actual.Status.Terminal() {
		panic(fmt.Sprintf("pgmock: status %q is not terminal", actual.Status))
	}
	e.finish(e.m.gen.UpdateWorkflow(e.u, mockspec.UpdateSeen{Found: true, FenceOK: true, Record: actual}))
	return actual
}

// Fenced: the update's fence is not valid (ErrFenced). The update must
// have a fence.
func (e *UpdateWorkflow) Fenced() {
	if e.u.Fence == nil {
		panic("pgmock: an update without a fence is never fenced")
	}
	e.finish(e.m.gen.UpdateWorkflow(e.u, mockspec.UpdateSeen{Found: true, Record: e.current(durable.Workflow{})}))
}

// NotFound: there is no such workflow (ErrNotFound).
func (e *UpdateWorkflow) NotFound() {
	e.finish(e.m.gen.UpdateWorkflow(e.u, mockspec.UpdateSeen{}))
}

// ListWorkflows is the expectation of Store.ListWorkflows.
type ListWorkflows struct {
	expectation
	q durable.ListQuery
}

// ExpectListWorkflows expects Store.ListWorkflows(ctx, q).
func (m *Mock) ExpectListWorkflows(q durable.ListQuery) *ListWorkflows {
	q = capture[durable.ListQuery](m, "ListWorkflows", func(ctx context.Context, s *durable.Store) error {
		_, err := s.ListWorkflows(ctx, q)
		return err
	})
	e := &ListWorkflows{q: q}
	e.expectation = m.begin("ListWorkflows", func() mockspec.Statement { return m.gen.ListWorkflows(q, nil)[0] })
	m.track(&e.expectation)
	return e
}

// Returns: the page is page (each in the query's scope, with the
// defaults of GetWorkflow's Returns). It returns what the Store returns
// (nil for an empty page).
func (e *ListWorkflows) Returns(page ...durable.Workflow) []durable.Workflow {
	var out []durable.Workflow
	for _, wf := range page {
		out = append(out, e.m.stored(e.q.Scope, wf.ID, wf))
	}
	e.finish(e.m.gen.ListWorkflows(e.q, out))
	return out
}
