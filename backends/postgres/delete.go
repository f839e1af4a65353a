package postgres

import (
	"context"

	"github.com/durable-go/durable/contract"
)

var _ contract.RecordDeleter = (*Backend)(nil)

// DeleteRecord implements contract.RecordDeleter in one statement. Lease
// tokens come from a sequence, so deleting a lease row never lets a later
// grant reuse a token; deleting a key notifies its waiters as ReleaseKey
// does, and deleting a watched lease notifies its watchers and leaves a
// released row holding the watch's mark (see WatchLease).
func (b *Backend) DeleteRecord(ctx context.Context, kind contract.RecordKind, scope contract.Scope, id string) (bool, error) {
	switch kind {
	case contract.KindWorkflow, contract.KindKey, contract.KindLease:
	default:
		return false, &contract.Error{Code: contract.InvalidArgument, Msg: "unknown record kind"}
	}
	var r deleteRecordRow
	_, err := qDeleteRecord.one(ctx, b, b.deleteRecordParams(kind, scope, id), &r)
	return r.found, err
}

// deleteRecordParams: the parameters of DeleteRecord's statement (see
// workflows.go).
func (b *Backend) deleteRecordParams(kind contract.RecordKind, scope contract.Scope, id string) deleteRecordParams {
	return deleteRecordParams{Kind: kind, Scope: scope, ID: id, Channel: b.channel}
}
