package postgres

import (
	"bytes"
	"context"
	"time"

	"github.com/durable-go/durable/contract"
)

// workflowRow is the scan target of workflowCols.
type workflowRow struct {
	scope, id, requestID, status string
	revision                     int64
	snapshot                     []byte
	created, updated             time.Time
}

func (r *workflowRow) dest() []any {
	return []any{&r.scope, &r.id, &r.requestID, &r.status, &r.revision, &r.snapshot, &r.created, &r.updated}
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
	var created time.Time
	var found bool
	err := b.do(ctx, write, func() (err error) {
		found, err = b.q.queryRow(ctx, write, b.st.createWorkflow,
			[]any{b.now(), string(w.Scope), w.ID, w.RequestID, string(w.Status), w.Snapshot}, &created)
		return err
	})
	if err != nil {
		return contract.Workflow{}, err
	}
	if !found {
		return contract.Workflow{}, &contract.Error{Code: contract.AlreadyExists, Msg: "workflow already exists"}
	}
	created = created.UTC()
	return contract.Workflow{
		Scope: w.Scope, ID: w.ID, RequestID: w.RequestID, Status: w.Status, Revision: 1,
		Snapshot: bytes.Clone(w.Snapshot), CreatedAt: created, UpdatedAt: created,
	}, nil
}

// GetWorkflow implements contract.StateStore. One statement.
func (b *Backend) GetWorkflow(ctx context.Context, scope contract.Scope, id string) (contract.Workflow, error) {
	var r workflowRow
	var found bool
	err := b.do(ctx, read, func() (err error) {
		found, err = b.q.queryRow(ctx, read, b.st.getWorkflow, []any{string(scope), id}, r.dest()...)
		return err
	})
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
	fr, fo, ft := fenceArgs(u.Fence)
	var r workflowRow
	var applied, fenceOK, found bool
	dest := append([]any{&applied, &fenceOK}, r.dest()...)
	err := b.do(ctx, write, func() (err error) {
		found, err = b.q.queryRow(ctx, write, b.st.updateWorkflow, []any{
			b.now(), b.tolSecs, string(u.Scope), u.ID, string(u.ExpectStatus), u.ExpectRevision,
			fr, fo, ft, string(u.Status), u.RequestID, u.Snapshot,
		}, dest...)
		return err
	})
	if err != nil {
		return contract.Workflow{}, err
	}
	if found && applied {
		return r.workflow(), nil
	}
	if out, err, ok := explainUpdate(u, found, fenceOK, &r); ok {
		return out, err
	}
	// The snapshot shows no reason: read once more.
	err = b.do(ctx, read, func() (err error) {
		found, err = b.q.queryRow(ctx, read, b.st.whyWorkflow, []any{
			b.now(), b.tolSecs, string(u.Scope), u.ID, fr, fo, ft,
		}, dest...)
		return err
	})
	if err != nil {
		return contract.Workflow{}, err
	}
	if out, err, ok := explainUpdate(u, found, fenceOK, &r); ok {
		return out, err
	}
	// The record changed and changed back between the two reads.
	return contract.Workflow{}, conflict(u, &r)
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

// ListWorkflows implements contract.StateStore. One statement.
func (b *Backend) ListWorkflows(ctx context.Context, q contract.ListQuery) ([]contract.Workflow, error) {
	var limit any // NULL: no limit
	if q.Limit > 0 {
		limit = q.Limit
	}
	sql, args := b.st.listWorkflows, []any{string(q.Scope), q.After, limit}
	if q.Status != "" {
		sql, args = b.st.listWorkflowsByStatus, append(args, string(q.Status))
	}
	out := make([]contract.Workflow, 0, min(max(q.Limit, 1), 128))
	// One scan target for every row: each scan allocates fresh strings and
	// snapshot bytes, so the values copied out never alias.
	var r workflowRow
	dest := r.dest()
	err := b.do(ctx, read, func() error {
		out = out[:0]
		return b.q.query(ctx, read, sql, args, func(scan func(dest ...any) error) error {
			if err := scan(dest...); err != nil {
				return err
			}
			out = append(out, r.workflow())
			return nil
		})
	})
	if err != nil || len(out) == 0 {
		return nil, err
	}
	return out, nil
}
