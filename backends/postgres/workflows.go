package postgres

import (
	"bytes"
	"context"
	"database/sql"
	"time"

	"github.com/durable-go/durable/contract"
)

// workflowColumns are the columns of a workflow record, as workflowRow
// scans them.
var workflowColumns = []string{"scope", "id", "request_id", "status", "revision", "snapshot", "created_at", "updated_at"}

// workflowRow is the scan target of workflowColumns.
type workflowRow struct {
	scope, id, requestID, status string
	revision                     int64
	snapshot                     []byte
	created, updated             time.Time
}

func (r *workflowRow) dest() []any { return r.destAfter() }

// destAfter returns the scan targets of a row that has the columns of
// prefix first.
func (r *workflowRow) destAfter(prefix ...any) []any {
	return append(append(make([]any, 0, len(prefix)+len(workflowColumns)), prefix...),
		&r.scope, &r.id, &r.requestID, &r.status, &r.revision, &r.snapshot, &r.created, &r.updated)
}

func (r *workflowRow) workflow() contract.Workflow {
	return contract.Workflow{
		Scope: contract.Scope(r.scope), ID: r.id, RequestID: r.requestID, Status: contract.Status(r.status),
		Revision: r.revision, Snapshot: r.snapshot, CreatedAt: utc(r.created), UpdatedAt: utc(r.updated),
	}
}

func errWorkflowNotFound() error {
	return &contract.Error{Code: contract.NotFound, Msg: "workflow not found"}
}

// CreateWorkflow implements contract.StateStore. One statement.
func (b *Backend) CreateWorkflow(ctx context.Context, w contract.Workflow) (contract.Workflow, error) {
	var r createdRow
	found, err := qCreateWorkflow.one(ctx, b, b.createWorkflowParams(w), &r)
	if err != nil {
		return contract.Workflow{}, err
	}
	if !found {
		return contract.Workflow{}, &contract.Error{Code: contract.AlreadyExists, Msg: "workflow already exists"}
	}
	created := r.created.UTC()
	return contract.Workflow{
		Scope: w.Scope, ID: w.ID, RequestID: w.RequestID, Status: w.Status, Revision: 1,
		Snapshot: bytes.Clone(w.Snapshot), CreatedAt: created, UpdatedAt: created,
	}, nil
}

// GetWorkflow implements contract.StateStore. One statement.
func (b *Backend) GetWorkflow(ctx context.Context, scope contract.Scope, id string) (contract.Workflow, error) {
	var r workflowRow
	found, err := qGetWorkflow.one(ctx, b, getWorkflowParams(scope, id), &r)
	if err != nil {
		return contract.Workflow{}, err
	}
	if !found {
		return contract.Workflow{}, errWorkflowNotFound()
	}
	return r.workflow(), nil
}

// UpdateWorkflow implements contract.StateStore. One statement applies the
// compare-and-set or returns the current record and the fence check, from
// which the failure is explained in the memory backend's order: existence,
// terminal status (the same terminal status is a no-op), fence, expected
// status and revision. Only when that snapshot shows no reason (the record
// changed after the statement's snapshot was taken) does a second statement
// read the record again.
func (b *Backend) UpdateWorkflow(ctx context.Context, u contract.Update) (contract.Workflow, error) {
	var r updateWorkflowRow
	found, err := qUpdateWorkflow.one(ctx, b, b.updateWorkflowParams(u), &r)
	if err != nil {
		return contract.Workflow{}, err
	}
	if found && r.applied {
		return r.workflow(), nil
	}
	if out, err, ok := explainUpdate(u, found, r.fenceOK, &r.workflowRow); ok {
		return out, err
	}
	// The snapshot shows no reason: read once more.
	found, err = qWhyWorkflow.one(ctx, b, b.whyWorkflowParams(u), &r)
	if err != nil {
		return contract.Workflow{}, err
	}
	if out, err, ok := explainUpdate(u, found, r.fenceOK, &r.workflowRow); ok {
		return out, err
	}
	// The record changed and changed back between the two reads.
	return contract.Workflow{}, conflict(u, &r.workflowRow)
}

// explainUpdate says why u did not apply to the record r, in the memory
// backend's order. ok is false when r shows no reason.
func explainUpdate(u contract.Update, found, fenceOK bool, r *workflowRow) (contract.Workflow, error, bool) {
	if !found {
		return contract.Workflow{}, errWorkflowNotFound(), true
	}
	cur := contract.Status(r.status)
	if cur.Terminal() {
		if u.Status == cur {
			return r.workflow(), nil, true
		}
		return contract.Workflow{}, &contract.Error{Code: contract.Terminal, Msg: "workflow is in a terminal status"}, true
	}
	if u.Fence != nil && !fenceOK {
		return contract.Workflow{}, &contract.Error{Code: contract.Fenced, Msg: "fence is not valid"}, true
	}
	if cur != u.ExpectStatus || (u.ExpectRevision != 0 && r.revision != u.ExpectRevision) {
		return contract.Workflow{}, conflict(u, r), true
	}
	return contract.Workflow{}, nil, false
}

func conflict(u contract.Update, r *workflowRow) error {
	return &contract.Error{
		Code: contract.Conflict, Msg: "workflow changed",
		Details: &contract.Details{
			ExpectedStatus: u.ExpectStatus, ActualStatus: contract.Status(r.status),
			ExpectedRevision: u.ExpectRevision, ActualRevision: r.revision,
		},
	}
}

// ListWorkflows implements contract.StateStore. One statement (see
// listWorkflowsStatement).
func (b *Backend) ListWorkflows(ctx context.Context, q contract.ListQuery) ([]contract.Workflow, error) {
	out := make([]contract.Workflow, 0, min(max(q.Limit, 1), 128))
	// One scan target for every row: each scan allocates fresh strings and
	// snapshot bytes, so the values copied out never alias.
	var r workflowRow
	reset := func() { out = out[:0] }
	row := func() error {
		out = append(out, r.workflow())
		return nil
	}
	s, args := listWorkflowsStatement(q)
	if err := s.each(ctx, b, args, r.dest(), reset, row); err != nil || len(out) == 0 {
		return nil, err
	}
	return out, nil
}

// --- the parameters of each statement, from the request: the one place
// where an operation's arguments are built, for the methods above and for
// the expectations of pgmock (see mockspec.go) ---

func (b *Backend) createWorkflowParams(w contract.Workflow) createWorkflowParams {
	return createWorkflowParams{
		Now: b.nowParam(), Scope: w.Scope, ID: w.ID, RequestID: w.RequestID, Status: w.Status, Snapshot: w.Snapshot,
	}
}

func getWorkflowParams(scope contract.Scope, id string) workflowIDParams {
	return workflowIDParams{Scope: scope, ID: id}
}

func (b *Backend) updateWorkflowParams(u contract.Update) updateWorkflowParams {
	return updateWorkflowParams{
		Now: b.nowParam(), Tol: b.tol, Scope: u.Scope, ID: u.ID, ExpectStatus: u.ExpectStatus, ExpectRevision: u.ExpectRevision,
		fenceParams: fenceOf(u.Fence), Status: u.Status, RequestID: u.RequestID, Snapshot: u.Snapshot,
	}
}

func (b *Backend) whyWorkflowParams(u contract.Update) whyWorkflowParams {
	return whyWorkflowParams{Now: b.nowParam(), Tol: b.tol, Scope: u.Scope, ID: u.ID, fenceParams: fenceOf(u.Fence)}
}

// listWorkflowsStatement returns the statement ListWorkflows sends for q
// (with or without the status filter) and its arguments. A limit of 0 is
// NULL: no limit.
func listWorkflowsStatement(q contract.ListQuery) (*statement, []any) {
	limit := sql.Null[int]{V: q.Limit, Valid: q.Limit > 0}
	if q.Status == "" {
		return qListWorkflows.statement, qListWorkflows.args(listWorkflowsParams{Scope: q.Scope, After: q.After, Limit: limit})
	}
	return qListWorkflowsByStatus.statement, qListWorkflowsByStatus.args(listWorkflowsByStatusParams{
		Scope: q.Scope, After: q.After, Limit: limit, Status: q.Status,
	})
}
