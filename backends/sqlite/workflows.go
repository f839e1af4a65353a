package sqlite

import (
	"context"
	"database/sql"

	"github.com/durable-go/durable/contract"
)

const workflowCols = `scope, id, request_id, status, revision, snapshot, created_at, updated_at`

const (
	sqlCreateWorkflow = `INSERT INTO workflows (` + workflowCols + `) VALUES (?, ?, ?, ?, 1, ?, ?, ?) ON CONFLICT (scope, id) DO NOTHING`
	sqlGetWorkflow    = `SELECT ` + workflowCols + ` FROM workflows WHERE scope = ? AND id = ?`
	// sqlUpdateWorkflow is the compare-and-set: it applies only when every
	// precondition holds. When it changes nothing, the transaction reads
	// the record (and the lease) once to say why, under the same write
	// lock, so the reason is the one that made it fail.
	sqlUpdateWorkflow = `UPDATE workflows SET request_id = ?, status = ?, revision = revision + 1, snapshot = ?, updated_at = ?
WHERE scope = ? AND id = ? AND status = ? AND (? = 0 OR revision = ?) AND status NOT IN ('succeeded', 'failed', 'closed')
AND (? = 0 OR EXISTS (SELECT 1 FROM leases l WHERE l.scope = ? AND l.resource = ? AND l.owner = ? AND l.token = ? AND l.expires_at > ?))
RETURNING revision, created_at`
	sqlLeaseValid          = `SELECT EXISTS (SELECT 1 FROM leases WHERE scope = ? AND resource = ? AND owner = ? AND token = ? AND expires_at > ?)`
	sqlListWorkflows       = `SELECT ` + workflowCols + ` FROM workflows WHERE scope = ? AND id > ? ORDER BY id LIMIT ?`
	sqlListWorkflowsStatus = `SELECT ` + workflowCols + ` FROM workflows WHERE scope = ? AND status = ? AND id > ? ORDER BY id LIMIT ?`
)

func scanWorkflow(sc interface{ Scan(...any) error }) (contract.Workflow, error) {
	var w contract.Workflow
	var scope, status string
	var created, updated int64
	err := sc.Scan(&scope, &w.ID, &w.RequestID, &status, &w.Revision, &w.Snapshot, &created, &updated)
	w.Scope, w.Status = contract.Scope(scope), contract.Status(status)
	w.CreatedAt, w.UpdatedAt = fromMicros(created), fromMicros(updated)
	return w, err
}

func workflowDest(w *contract.Workflow, scope, status *string, created, updated *int64) []any {
	return []any{scope, &w.ID, &w.RequestID, status, &w.Revision, &w.Snapshot, created, updated}
}

// CreateWorkflow implements contract.StateStore.
func (b *Backend) CreateWorkflow(ctx context.Context, w contract.Workflow) (contract.Workflow, error) {
	var out contract.Workflow
	gone, err := b.write(ctx, func(ctx context.Context) error {
		now := b.now()
		res, err := b.ws.exec(ctx, sqlCreateWorkflow, string(w.Scope), w.ID, w.RequestID, string(w.Status), blob(w.Snapshot), now, now)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return &contract.Error{Code: contract.AlreadyExists, Msg: "workflow already exists"}
		}
		out = contract.Workflow{Scope: w.Scope, ID: w.ID, RequestID: w.RequestID, Status: w.Status, Revision: 1,
			Snapshot: w.Snapshot, CreatedAt: fromMicros(now), UpdatedAt: fromMicros(now)}
		return nil
	}, nil)
	if gone {
		return contract.Workflow{}, err
	}
	return out, err
}

// blob passes a byte slice to SQLite: nil as NULL.
func blob(p []byte) any {
	if p == nil {
		return nil
	}
	return p
}

// GetWorkflow implements contract.StateStore.
func (b *Backend) GetWorkflow(ctx context.Context, scope contract.Scope, id string) (contract.Workflow, error) {
	var w contract.Workflow
	err := b.read(ctx, func(ctx context.Context) error {
		var found bool
		var err error
		found, w, err = b.getWorkflow(ctx, b.rs, scope, id)
		if err == nil && !found {
			return errWorkflowNotFound()
		}
		return err
	})
	return w, err
}

func errWorkflowNotFound() error {
	return &contract.Error{Code: contract.NotFound, Msg: "workflow not found"}
}

func (b *Backend) getWorkflow(ctx context.Context, s *stmts, scope contract.Scope, id string) (bool, contract.Workflow, error) {
	var w contract.Workflow
	var sc, status string
	var created, updated int64
	found, err := s.queryRow(ctx, sqlGetWorkflow, []any{string(scope), id}, workflowDest(&w, &sc, &status, &created, &updated)...)
	w.Scope, w.Status = contract.Scope(sc), contract.Status(status)
	w.CreatedAt, w.UpdatedAt = fromMicros(created), fromMicros(updated)
	return found, w, err
}

// fenceArgs returns the fence's arguments of sqlUpdateWorkflow and
// sqlCompleteKey: has-fence, scope, resource, owner, token, now+tolerance.
func (b *Backend) fenceArgs(scope contract.Scope, f *contract.Fence, now int64) []any {
	if f == nil {
		return []any{0, "", "", "", 0, 0}
	}
	return []any{1, string(scope), f.Resource, f.Owner, f.Token, now + micros(b.tol)}
}

func (b *Backend) fenceValid(ctx context.Context, scope contract.Scope, f *contract.Fence, now int64) (bool, error) {
	var ok bool
	_, err := b.ws.queryRow(ctx, sqlLeaseValid, []any{string(scope), f.Resource, f.Owner, f.Token, now + micros(b.tol)}, &ok)
	return ok, err
}

// UpdateWorkflow implements contract.StateStore.
func (b *Backend) UpdateWorkflow(ctx context.Context, u contract.Update) (contract.Workflow, error) {
	var out contract.Workflow
	gone, err := b.write(ctx, func(ctx context.Context) error {
		out = contract.Workflow{}
		now := b.now()
		args := []any{u.RequestID, string(u.Status), blob(u.Snapshot), now,
			string(u.Scope), u.ID, string(u.ExpectStatus), u.ExpectRevision, u.ExpectRevision}
		args = append(args, b.fenceArgs(u.Scope, u.Fence, now)...)
		var rev, created int64
		found, err := b.ws.queryRow(ctx, sqlUpdateWorkflow, args, &rev, &created)
		if err != nil {
			return err
		}
		if found {
			out = contract.Workflow{Scope: u.Scope, ID: u.ID, RequestID: u.RequestID, Status: u.Status, Revision: rev,
				Snapshot: u.Snapshot, CreatedAt: fromMicros(created), UpdatedAt: fromMicros(now)}
			return nil
		}
		// Why did it not apply? In the contract's order.
		found, cur, err := b.getWorkflow(ctx, b.ws, u.Scope, u.ID)
		switch {
		case err != nil:
			return err
		case !found:
			return errWorkflowNotFound()
		case cur.Status.Terminal():
			if u.Status == cur.Status {
				out = cur
				return errNoop
			}
			return &contract.Error{Code: contract.Terminal, Msg: "workflow is in a terminal status"}
		}
		if u.Fence != nil {
			ok, err := b.fenceValid(ctx, u.Scope, u.Fence, now)
			if err != nil {
				return err
			}
			if !ok {
				return &contract.Error{Code: contract.Fenced, Msg: "fence is not valid"}
			}
		}
		return &contract.Error{
			Code: contract.Conflict, Msg: "workflow changed",
			Details: &contract.Details{
				ExpectedStatus: u.ExpectStatus, ActualStatus: cur.Status,
				ExpectedRevision: u.ExpectRevision, ActualRevision: cur.Revision,
			},
		}
	}, nil)
	if gone {
		return contract.Workflow{}, err
	}
	if err == errNoop {
		return out, nil
	}
	return out, err
}

// errNoop ends a write transaction that changed nothing and succeeds: it
// rolls back (there is nothing to commit) and the operation returns what
// it read.
var errNoop = &contract.Error{Code: contract.Unknown, Msg: "no-op"}

// ListWorkflows implements contract.StateStore.
func (b *Backend) ListWorkflows(ctx context.Context, q contract.ListQuery) ([]contract.Workflow, error) {
	var out []contract.Workflow
	err := b.read(ctx, func(ctx context.Context) error {
		out = out[:0]
		query, args := sqlListWorkflows, []any{string(q.Scope), q.After, q.Limit}
		if q.Status != "" {
			query, args = sqlListWorkflowsStatus, []any{string(q.Scope), string(q.Status), q.After, q.Limit}
		}
		return b.rs.query(ctx, query, args, func(r *sql.Rows) error {
			w, err := scanWorkflow(r)
			if err != nil {
				return err
			}
			out = append(out, w)
			return nil
		})
	})
	return out, err
}
