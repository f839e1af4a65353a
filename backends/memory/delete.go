package memory

import (
	"context"

	"github.com/durable-go/durable/contract"
)

var _ contract.RecordDeleter = (*Backend)(nil)

// DeleteRecord implements contract.RecordDeleter. Fencing tokens come from
// one counter for the whole Storage, so a lease deleted here never lets a
// later grant reuse a token.
func (b *Backend) DeleteRecord(ctx context.Context, kind contract.RecordKind, scope contract.Scope, id string) (bool, error) {
	switch kind {
	case contract.KindWorkflow, contract.KindKey, contract.KindLease:
	default:
		return false, &contract.Error{Code: contract.InvalidArgument, Msg: "unknown record kind"}
	}
	rk, err := b.lock(ctx, scope, id)
	if err != nil {
		return false, err
	}
	defer b.s.mu.Unlock()
	var found bool
	switch kind {
	case contract.KindWorkflow:
		_, found = b.s.workflows[rk]
		delete(b.s.workflows, rk)
	case contract.KindKey:
		_, found = b.s.keys[rk]
		delete(b.s.keys, rk)
		b.s.notify(rk)
	case contract.KindLease:
		_, found = b.s.leases[rk]
		delete(b.s.leases, rk)
	}
	return found, nil
}

var _ contract.InProcess = (*Backend)(nil)

// InProcess implements contract.InProcess: every call returns as soon as
// the store's lock allows, so the Store arms no timeout timer for it.
func (b *Backend) InProcess() bool { return true }
