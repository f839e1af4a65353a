package postgres

import (
	"context"

	"github.com/durable-go/durable/contract"
)

var _ contract.RecordDeleter = (*Backend)(nil)

// DeleteRecord implements contract.RecordDeleter in one statement. Lease
// tokens come from a sequence, so deleting a lease row never lets a later
// grant reuse a token; deleting a key notifies its waiters as ReleaseKey
// does.
func (b *Backend) DeleteRecord(ctx context.Context, kind contract.RecordKind, scope contract.Scope, id string) (bool, error) {
	switch kind {
	case contract.KindWorkflow, contract.KindKey, contract.KindLease:
	default:
		return false, &contract.Error{Code: contract.InvalidArgument, Msg: "unknown record kind"}
	}
	var found bool
	var notified int64
	err := b.do(ctx, write, func() error {
		_, err := b.q.queryRow(ctx, write, b.st.deleteRecord, []any{string(kind), string(scope), id, b.channel}, &found, &notified)
		return err
	})
	return found, err
}
