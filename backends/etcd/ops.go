package etcd

import (
	"context"
	"errors"

	"github.com/durable-go/durable/contract"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/multierr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// hasPrefix compares key's value with a prefix p: p < value < p with its
// last byte incremented, which holds exactly when the value starts with p
// and is longer (every value compared this way has bytes after p). p's
// last byte is never 0xff.
func hasPrefix(key, p string) []clientv3.Cmp {
	end := p[:len(p)-1] + string([]byte{p[len(p)-1] + 1})
	return []clientv3.Cmp{
		clientv3.Compare(clientv3.Value(key), ">", p),
		clientv3.Compare(clientv3.Value(key), "<", end),
	}
}

// absent compares key with "no such key".
func absent(key string) clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
}

// fenceCmps holds when the fence is valid: the lease's holder key (alive
// while the lease has more than the tolerance left, on etcd's lease timer)
// was created by that grant and names that owner.
func (b *Backend) fenceCmps(scope contract.Scope, f *contract.Fence) []clientv3.Cmp {
	hk := b.key(nsLeaseHold, scope, f.Resource)
	return []clientv3.Cmp{
		clientv3.Compare(clientv3.CreateRevision(hk), "=", f.Token),
		clientv3.Compare(clientv3.Value(hk), "=", f.Owner),
	}
}

// fenceHeld reports whether kv (the holder key, or nil) proves f.
func fenceHeld(kv *mvccpb.KeyValue, f *contract.Fence) bool {
	return kv != nil && kv.CreateRevision == f.Token && string(kv.Value) == f.Owner
}

// rangeKV returns the first key of the i-th response of a transaction, or
// nil.
func rangeKV(r *clientv3.TxnResponse, i int) *mvccpb.KeyValue {
	if i >= len(r.Responses) {
		return nil
	}
	rr := r.Responses[i].GetResponseRange()
	if rr == nil || len(rr.Kvs) == 0 {
		return nil
	}
	return rr.Kvs[0]
}

// txn runs one transaction. write says whether it may change anything (for
// how a failure is reported).
func (b *Backend) txn(ctx context.Context, write bool, cmps []clientv3.Cmp, then, els []clientv3.Op) (*clientv3.TxnResponse, error) {
	if err := b.check(); err != nil {
		return nil, err
	}
	r, err := b.cli.Txn(ctx).If(cmps...).Then(then...).Else(els...).Commit()
	if err != nil {
		return nil, b.fail(ctx, err, write)
	}
	return r, nil
}

// get reads keys at one revision, in one transaction.
func (b *Backend) get(ctx context.Context, ops ...clientv3.Op) (*clientv3.TxnResponse, error) {
	return b.txn(ctx, false, nil, ops, nil)
}

// fail maps an etcd client error. Nothing in the message comes from the
// server or the caller: the cause stays reachable with errors.As.
func (b *Backend) fail(ctx context.Context, err error, write bool) error {
	if b.closed.Load() {
		return &contract.Error{Code: contract.Closed, Msg: "backend is closed", Err: err}
	}
	if cerr := ctx.Err(); cerr != nil {
		if write {
			return &contract.Error{Code: contract.OutcomeUnknown, Msg: "context ended while the request was in flight", Err: multierr.Combine(cerr, err)}
		}
		return &contract.Error{Code: contract.Canceled, Msg: "context ended", Err: multierr.Combine(cerr, err)}
	}
	switch {
	case errors.Is(err, rpctypes.ErrAuthFailed), errors.Is(err, rpctypes.ErrInvalidAuthToken),
		errors.Is(err, rpctypes.ErrPermissionDenied), errors.Is(err, rpctypes.ErrUserEmpty),
		errors.Is(err, rpctypes.ErrAuthNotEnabled), errors.Is(err, rpctypes.ErrAuthOldRevision):
		return &contract.Error{Code: contract.PermissionDenied, Msg: "etcd refused the credentials or the user lacks a permission on the prefix (check username, password and role grants)", Err: err}
	case errors.Is(err, rpctypes.ErrRequestTooLarge), errors.Is(err, rpctypes.ErrTooManyOps):
		return &contract.Error{Code: contract.Misconfigured, Msg: "etcd refused the request as too large (raise the server's --max-request-bytes above the Store's size limits, or lower them)", Err: err}
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		// A lease granted for this call expired before the call used it:
		// the write did not happen.
		return &contract.Error{Code: contract.Unavailable, Msg: "etcd lease expired before use; the write was not applied", Err: err}
	}
	if s, ok := status.FromError(err); ok && s.Code() == codes.Unauthenticated {
		return &contract.Error{Code: contract.PermissionDenied, Msg: "etcd refused the credentials", Err: err}
	}
	if write {
		return &contract.Error{Code: contract.OutcomeUnknown, Msg: "etcd request failed after it may have been sent", Err: err}
	}
	return &contract.Error{Code: contract.Unavailable, Msg: "etcd request failed", Err: err}
}

func notFound(what string) error {
	return &contract.Error{Code: contract.NotFound, Msg: what + " not found"}
}
