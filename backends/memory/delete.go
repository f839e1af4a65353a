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
	var k int
	switch kind {
	case contract.KindWorkflow:
		k = kindWorkflow
	case contract.KindKey:
		k = kindKey
	case contract.KindLease:
		k = kindLease
	default:
		return false, &contract.Error{Code: contract.InvalidArgument, Msg: "unknown record kind"}
	}
	sh, rk, err := b.lock(ctx, k, scope, id)
	if err != nil {
		return false, err
	}
	defer sh.mu.Unlock()
	var found bool
	switch kind {
	case contract.KindWorkflow:
		_, found = sh.workflows[rk]
		delete(sh.workflows, rk)
	case contract.KindKey:
		_, found = sh.keys[rk]
		delete(sh.keys, rk)
		sh.notify(rk)
	case contract.KindLease:
		_, found = sh.leases[rk]
		delete(sh.leases, rk)
	}
	return found, nil
}

var _ contract.InProcess = (*Backend)(nil)

// InProcess implements contract.InProcess: every call returns as soon as
// its shard lock allows, so the Store arms no timeout timer for it.
func (b *Backend) InProcess() bool { return true }
