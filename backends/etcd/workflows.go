package etcd

import (
	"context"
	"strings"

	"github.com/durable-go/durable/contract"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// CreateWorkflow implements contract.StateStore: one transaction that puts
// the record and its creation time when the id is free. The revision is
// the etcd version of the record's key (1 on create, +1 per put).
func (b *Backend) CreateWorkflow(ctx context.Context, w contract.Workflow) (contract.Workflow, error) {
	now := b.clockNow()
	wk := b.key(nsWorkflow, w.Scope, w.ID)
	then := []clientv3.Op{
		clientv3.OpPut(wk, string(encodeWorkflow(w.Status, w.RequestID, now, w.Snapshot))),
		clientv3.OpPut(b.key(nsCreated, w.Scope, w.ID), string(putTime(nil, now))),
	}
	if w.Status.Terminal() {
		then = append(then, clientv3.OpPut(b.terminalKey(now, w.Scope, w.ID), ""))
	}
	r, err := b.txn(ctx, true, []clientv3.Cmp{absent(wk)}, then, nil)
	if err != nil {
		return contract.Workflow{}, err
	}
	if !r.Succeeded {
		return contract.Workflow{}, &contract.Error{Code: contract.AlreadyExists, Msg: "workflow already exists"}
	}
	out := w
	out.Revision, out.CreatedAt, out.UpdatedAt = 1, now, now
	return out, nil
}

// GetWorkflow implements contract.StateStore.
func (b *Backend) GetWorkflow(ctx context.Context, scope contract.Scope, id string) (contract.Workflow, error) {
	r, err := b.get(ctx, clientv3.OpGet(b.key(nsWorkflow, scope, id)), clientv3.OpGet(b.key(nsCreated, scope, id)))
	if err != nil {
		return contract.Workflow{}, err
	}
	wkv, ckv := rangeKV(r, 0), rangeKV(r, 1)
	if wkv == nil {
		return contract.Workflow{}, notFound("workflow")
	}
	return workflowOf(scope, id, wkv, ckv)
}

func workflowOf(scope contract.Scope, id string, wkv, ckv *mvccpb.KeyValue) (contract.Workflow, error) {
	if ckv == nil {
		return contract.Workflow{}, corrupt("workflow")
	}
	return decodeWorkflow(scope, id, wkv.Value, ckv.Value, wkv.Version)
}

// UpdateWorkflow implements contract.StateStore: one transaction that
// compares the status (the value's prefix), the revision (the key's
// version) and the fence (the holder key) and puts the new record; when a
// comparison fails, the same transaction reads what is needed to say
// which.
func (b *Backend) UpdateWorkflow(ctx context.Context, u contract.Update) (contract.Workflow, error) {
	now := b.clockNow()
	wk, ck := b.key(nsWorkflow, u.Scope, u.ID), b.key(nsCreated, u.Scope, u.ID)
	els := []clientv3.Op{clientv3.OpGet(wk), clientv3.OpGet(ck)}
	if u.Fence != nil {
		els = append(els, clientv3.OpGet(b.key(nsLeaseHold, u.Scope, u.Fence.Resource)))
	}
	var r *clientv3.TxnResponse
	var err error
	if u.ExpectStatus.Terminal() {
		// A terminal status never matches: only read, to say why.
		r, err = b.get(ctx, els...)
	} else {
		cmps := hasPrefix(wk, statusPrefix(u.ExpectStatus))
		if u.ExpectRevision != 0 {
			cmps = append(cmps, clientv3.Compare(clientv3.Version(wk), "=", u.ExpectRevision))
		}
		if u.Fence != nil {
			cmps = append(cmps, b.fenceCmps(u.Scope, u.Fence)...)
		}
		then := []clientv3.Op{
			clientv3.OpPut(wk, string(encodeWorkflow(u.Status, u.RequestID, now, u.Snapshot))),
			clientv3.OpGet(ck),
			clientv3.OpGet(wk, clientv3.WithKeysOnly()),
		}
		if u.Status.Terminal() {
			then = append(then, clientv3.OpPut(b.terminalKey(now, u.Scope, u.ID), ""))
		}
		r, err = b.txn(ctx, true, cmps, then, els)
		if err == nil && r.Succeeded {
			ckv, wkv := rangeKV(r, 1), rangeKV(r, 2)
			if ckv == nil || wkv == nil || len(ckv.Value) != 8 {
				return contract.Workflow{}, corrupt("workflow")
			}
			return contract.Workflow{
				Scope: u.Scope, ID: u.ID, RequestID: u.RequestID, Status: u.Status,
				Revision: wkv.Version, Snapshot: u.Snapshot, CreatedAt: timeAt(ckv.Value), UpdatedAt: now,
			}, nil
		}
	}
	if err != nil {
		return contract.Workflow{}, err
	}
	wkv := rangeKV(r, 0)
	if wkv == nil {
		return contract.Workflow{}, notFound("workflow")
	}
	cur, err := workflowOf(u.Scope, u.ID, wkv, rangeKV(r, 1))
	if err != nil {
		return contract.Workflow{}, err
	}
	if cur.Status.Terminal() {
		if u.Status == cur.Status {
			return cur, nil
		}
		return contract.Workflow{}, &contract.Error{Code: contract.Terminal, Msg: "workflow is in a terminal status"}
	}
	if u.Fence != nil && !fenceHeld(rangeKV(r, 2), u.Fence) {
		return contract.Workflow{}, &contract.Error{Code: contract.Fenced, Msg: "fence is not valid"}
	}
	return contract.Workflow{}, &contract.Error{
		Code: contract.Conflict, Msg: "workflow changed",
		Details: &contract.Details{
			ExpectedStatus: u.ExpectStatus, ActualStatus: cur.Status,
			ExpectedRevision: u.ExpectRevision, ActualRevision: cur.Revision,
		},
	}
}

// ListWorkflows implements contract.StateStore: a range read over the
// scope's records and their creation times at one revision, in key (byte)
// order, repeated while a status filter leaves the page short.
func (b *Backend) ListWorkflows(ctx context.Context, q contract.ListQuery) ([]contract.Workflow, error) {
	wp, cp := b.scopePrefix(nsWorkflow, q.Scope), b.scopePrefix(nsCreated, q.Scope)
	end := clientv3.GetPrefixRangeEnd(wp)
	cend := clientv3.GetPrefixRangeEnd(cp)
	after := q.After
	var out []contract.Workflow
	for {
		batch := int64(q.Limit)
		if q.Status != "" {
			batch = max(batch, 100)
		}
		from, cfrom := wp, cp
		if after != "" {
			from, cfrom = wp+after+"\x00", cp+after+"\x00"
		}
		r, err := b.get(ctx,
			clientv3.OpGet(from, clientv3.WithRange(end), clientv3.WithLimit(batch)),
			clientv3.OpGet(cfrom, clientv3.WithRange(cend), clientv3.WithLimit(batch)))
		if err != nil {
			return nil, err
		}
		wkvs := r.Responses[0].GetResponseRange().Kvs
		created := map[string][]byte{}
		for _, kv := range r.Responses[1].GetResponseRange().Kvs {
			created[strings.TrimPrefix(string(kv.Key), cp)] = kv.Value
		}
		for _, kv := range wkvs {
			id := strings.TrimPrefix(string(kv.Key), wp)
			after = id
			if q.Status != "" && !strings.HasPrefix(string(kv.Value), statusPrefix(q.Status)) {
				continue
			}
			c, ok := created[id]
			if !ok {
				return nil, corrupt("workflow")
			}
			w, err := decodeWorkflow(q.Scope, id, kv.Value, c, kv.Version)
			if err != nil {
				return nil, err
			}
			out = append(out, w)
			if len(out) == q.Limit {
				return out, nil
			}
		}
		if !r.Responses[0].GetResponseRange().More {
			return out, nil
		}
	}
}
