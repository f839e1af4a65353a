package etcd

import (
	"context"
	"fmt"
	"strings"

	"github.com/durable-go/durable/contract"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// scanPage is how many records one range read of Cleanup's scans returns.
const scanPage = 500

// deleteBatch is how many conditional deletions one transaction carries
// (each a nested transaction; etcd's default --max-txn-ops is 128).
const deleteBatch = 24

// candidate is a record Cleanup may delete: its deletion, conditional on
// it not having changed since it was read.
type candidate struct {
	cmps []clientv3.Cmp
	dels []clientv3.Op
}

// Cleanup implements contract.Backend. Claims, leases, outcomes and
// tombstones expire on etcd's lease timers (their records disappear);
// Cleanup removes what they leave behind — abandoned claims, records of
// expired leases, completed keys past their tombstone — and terminal
// workflows not updated for TerminalAge, each kind bounded by req.Limit,
// in transactions of a few conditional deletions. An outcome's payload
// disappears by itself at ExpiresAt (its record's etcd lease), leaving the
// tombstone: Cleanup has none to drop, so CleanupResult.Outcomes is
// always 0 here.
func (b *Backend) Cleanup(ctx context.Context, req contract.CleanupRequest) (contract.CleanupResult, error) {
	return b.cleanup(ctx, req, true)
}

// CountCleanup implements contract.CleanupCounter.
func (b *Backend) CountCleanup(ctx context.Context, req contract.CleanupRequest) (contract.CleanupResult, error) {
	return b.cleanup(ctx, req, false)
}

func (b *Backend) cleanup(ctx context.Context, req contract.CleanupRequest, del bool) (contract.CleanupResult, error) {
	if err := b.check(); err != nil {
		return contract.CleanupResult{}, err
	}
	var res contract.CleanupResult
	kinds := []struct {
		n    *int
		scan func(context.Context, int) ([]candidate, error)
	}{
		{&res.Workflows, func(ctx context.Context, n int) ([]candidate, error) { return b.oldWorkflows(ctx, req, n) }},
		{&res.Keys, b.expiredKeys},
		{&res.Leases, b.expiredLeases},
	}
	for _, k := range kinds {
		cs, err := k.scan(ctx, req.Limit+1)
		if err != nil {
			return res, err
		}
		if len(cs) > req.Limit {
			res.More = true
			cs = cs[:req.Limit]
		}
		if !del {
			*k.n = len(cs)
			continue
		}
		n, err := b.deleteAll(ctx, cs)
		*k.n = n
		if err != nil {
			return res, err
		}
	}
	return res, nil
}

// deleteAll runs the candidates' deletions, a batch per transaction, and
// counts those whose condition held.
func (b *Backend) deleteAll(ctx context.Context, cs []candidate) (int, error) {
	n := 0
	for len(cs) > 0 {
		batch := cs[:min(len(cs), deleteBatch)]
		cs = cs[len(batch):]
		ops := make([]clientv3.Op, len(batch))
		for i, c := range batch {
			ops[i] = clientv3.OpTxn(c.cmps, c.dels, nil)
		}
		r, err := b.txn(ctx, true, nil, ops, nil)
		if err != nil {
			return n, err
		}
		for _, resp := range r.Responses {
			if t := resp.GetResponseTxn(); t != nil && t.Succeeded {
				n++
			}
		}
	}
	return n, nil
}

// oldWorkflows finds terminal workflows not updated for TerminalAge with
// one range read of the terminal index, which is ordered by time.
func (b *Backend) oldWorkflows(ctx context.Context, req contract.CleanupRequest, limit int) ([]candidate, error) {
	cutoff := b.clockNow().Add(-req.TerminalAge)
	from := b.prefix + nsTerminal
	end := fmt.Sprintf("%s%s%016x", b.prefix, nsTerminal, uint64(cutoff.UnixMicro()+1))
	r, err := b.get(ctx, clientv3.OpGet(from, clientv3.WithRange(end), clientv3.WithLimit(int64(limit)), clientv3.WithKeysOnly()))
	if err != nil {
		return nil, err
	}
	var out []candidate
	for _, kv := range r.Responses[0].GetResponseRange().Kvs {
		rest := strings.TrimPrefix(string(kv.Key), from)
		_, sid, ok1 := strings.Cut(rest, "/")
		scope, id, ok2 := strings.Cut(sid, "/")
		if !ok1 || !ok2 {
			continue // not ours
		}
		out = append(out, candidate{
			cmps: []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(string(kv.Key)), "=", kv.ModRevision)},
			dels: []clientv3.Op{
				clientv3.OpDelete(string(kv.Key)),
				clientv3.OpDelete(b.key(nsWorkflow, contract.Scope(scope), id)),
				clientv3.OpDelete(b.key(nsCreated, contract.Scope(scope), id)),
			},
		})
	}
	return out, nil
}

// scanWithMarkers pages through the records under ns (all scopes) and, at
// the same revision, the keys of the marker namespaces over the same
// names; found is called with each record and which markers exist, until
// it returns false.
func (b *Backend) scanWithMarkers(ctx context.Context, ns string, markers []string, found func(kv *mvccpb.KeyValue, name string, has []bool) bool) error {
	base := b.prefix + ns
	end := clientv3.GetPrefixRangeEnd(base)
	from := base
	for {
		r, err := b.get(ctx, clientv3.OpGet(from, clientv3.WithRange(end), clientv3.WithLimit(scanPage)))
		if err != nil {
			return err
		}
		rr := r.Responses[0].GetResponseRange()
		if len(rr.Kvs) == 0 {
			return nil
		}
		first := strings.TrimPrefix(string(rr.Kvs[0].Key), base)
		last := strings.TrimPrefix(string(rr.Kvs[len(rr.Kvs)-1].Key), base)
		ops := make([]clientv3.Op, len(markers))
		for i, m := range markers {
			ops[i] = clientv3.OpGet(b.prefix+m+first, clientv3.WithRange(b.prefix+m+last+"\x00"), clientv3.WithKeysOnly(), clientv3.WithRev(r.Header.Revision))
		}
		mr, err := b.get(ctx, ops...)
		if err != nil {
			return err
		}
		sets := make([]map[string]bool, len(markers))
		for i, m := range markers {
			sets[i] = map[string]bool{}
			for _, kv := range mr.Responses[i].GetResponseRange().Kvs {
				sets[i][strings.TrimPrefix(string(kv.Key), b.prefix+m)] = true
			}
		}
		for _, kv := range rr.Kvs {
			name := strings.TrimPrefix(string(kv.Key), base)
			has := make([]bool, len(markers))
			for i := range markers {
				has[i] = sets[i][name]
			}
			if !found(kv, name, has) {
				return nil
			}
		}
		if !rr.More {
			return nil
		}
		from = string(rr.Kvs[len(rr.Kvs)-1].Key) + "\x00"
	}
}

// expiredKeys finds claims whose busy marker expired (more than the
// tolerance past LeaseUntil) and completed keys whose outcome's retention
// lease and tombstone lease both expired.
func (b *Backend) expiredKeys(ctx context.Context, limit int) ([]candidate, error) {
	var out []candidate
	err := b.scanWithMarkers(ctx, nsKeyToken, []string{nsKeyBusy, nsKeyOut, nsKeyTomb}, func(kv *mvccpb.KeyValue, name string, has []bool) bool {
		t, err := decodeToken(kv.Value)
		if err != nil {
			return true // left for an operator (DeleteRecord)
		}
		var markers []string
		switch {
		case t.state == stateClaimed && !has[0]:
			markers = []string{b.prefix + nsKeyBusy + name}
		case t.state == stateCompleted && !has[1] && !has[2]:
			markers = []string{b.prefix + nsKeyOut + name, b.prefix + nsKeyTomb + name}
		default:
			return true
		}
		cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(string(kv.Key)), "=", kv.ModRevision)}
		for _, m := range markers {
			cmps = append(cmps, absent(m))
		}
		out = append(out, candidate{
			cmps: cmps,
			dels: []clientv3.Op{
				clientv3.OpDelete(string(kv.Key)),
				clientv3.OpDelete(b.prefix + nsKey + name),
				clientv3.OpDelete(b.prefix + nsKeyOut + name),
				clientv3.OpDelete(b.prefix + nsKeyBusy + name),
				clientv3.OpDelete(b.prefix + nsKeyTomb + name),
			},
		})
		return len(out) < limit
	})
	return out, err
}

// expiredLeases finds lease records whose busy marker expired (more than
// the tolerance past ExpiresAt).
func (b *Backend) expiredLeases(ctx context.Context, limit int) ([]candidate, error) {
	var out []candidate
	err := b.scanWithMarkers(ctx, nsLease, []string{nsLeaseBusy}, func(kv *mvccpb.KeyValue, name string, has []bool) bool {
		if has[0] {
			return true
		}
		out = append(out, candidate{
			cmps: []clientv3.Cmp{
				clientv3.Compare(clientv3.ModRevision(string(kv.Key)), "=", kv.ModRevision),
				absent(b.prefix + nsLeaseBusy + name),
			},
			dels: []clientv3.Op{clientv3.OpDelete(string(kv.Key)), clientv3.OpDelete(b.prefix + nsLeaseHold + name)},
		})
		return len(out) < limit
	})
	return out, err
}

// DeleteRecord implements contract.RecordDeleter. Tokens are cluster
// revisions, so a later grant still gets a greater one.
func (b *Backend) DeleteRecord(ctx context.Context, kind contract.RecordKind, scope contract.Scope, id string) (bool, error) {
	switch kind {
	case contract.KindKey:
		kk := b.keyKeys(contract.KeyRef{Scope: scope, Key: id})
		r, err := b.txn(ctx, true, []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(kk.tok), ">", 0)},
			[]clientv3.Op{clientv3.OpDelete(kk.rec), clientv3.OpDelete(kk.tok), clientv3.OpDelete(kk.out), clientv3.OpDelete(kk.busy), clientv3.OpDelete(kk.tomb)}, nil)
		if err != nil {
			return false, err
		}
		return r.Succeeded, nil
	case contract.KindLease:
		lk := b.leaseKeys(scope, id)
		r, err := b.txn(ctx, true, []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(lk.rec), ">", 0)},
			[]clientv3.Op{clientv3.OpDelete(lk.rec), clientv3.OpDelete(lk.hold), clientv3.OpDelete(lk.busy)}, nil)
		if err != nil {
			return false, err
		}
		return r.Succeeded, nil
	case contract.KindWorkflow:
		wk := b.key(nsWorkflow, scope, id)
		for {
			r, err := b.get(ctx, clientv3.OpGet(wk))
			if err != nil {
				return false, err
			}
			kv := rangeKV(r, 0)
			if kv == nil {
				return false, nil
			}
			dels := []clientv3.Op{clientv3.OpDelete(wk), clientv3.OpDelete(b.key(nsCreated, scope, id))}
			// The terminal index entry, if any, is at the time the record
			// last changed; a record that cannot be decoded has none to
			// find, and is deleted all the same.
			if st, rest, ok := cut(kv.Value); ok && contract.Status(st).Terminal() {
				if _, rest, ok := cut(rest); ok && len(rest) >= 8 {
					dels = append(dels, clientv3.OpDelete(b.terminalKey(timeAt(rest), scope, id)))
				}
			}
			r, err = b.txn(ctx, true, []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(wk), "=", kv.ModRevision)}, dels, nil)
			if err != nil {
				return false, err
			}
			if r.Succeeded {
				return true, nil
			}
		}
	}
	return false, &contract.Error{Code: contract.InvalidArgument, Msg: "unknown record kind"}
}

// ListKeys implements contract.RecordLister: pages of the token records in
// key order, with each key's record, outcome and tombstone read at the
// same revision.
func (b *Backend) ListKeys(ctx context.Context, q contract.KeyListQuery) ([]contract.KeyRecord, error) {
	now := b.clockNow()
	base := b.scopePrefix(nsKeyToken, q.Scope)
	end := clientv3.GetPrefixRangeEnd(base)
	from := base
	if q.After != "" {
		from = base + q.After + "\x00"
	}
	var out []contract.KeyRecord
	for {
		r, err := b.get(ctx, clientv3.OpGet(from, clientv3.WithRange(end), clientv3.WithLimit(int64(max(q.Limit, 50)))))
		if err != nil {
			return nil, err
		}
		rr := r.Responses[0].GetResponseRange()
		// The page's key, outcome and tombstone records: one range read of
		// each namespace over the page's names, at the page's revision
		// (three operations, whatever the page size: etcd bounds the
		// operations of a transaction, 128 by default).
		var parts [3]map[string]*mvccpb.KeyValue
		if len(rr.Kvs) > 0 {
			first := strings.TrimPrefix(string(rr.Kvs[0].Key), base)
			last := strings.TrimPrefix(string(rr.Kvs[len(rr.Kvs)-1].Key), base)
			nss := [3]string{nsKey, nsKeyOut, nsKeyTomb}
			ops := make([]clientv3.Op, len(nss))
			for i, ns := range nss {
				p := b.scopePrefix(ns, q.Scope)
				ops[i] = clientv3.OpGet(p+first, clientv3.WithRange(p+last+"\x00"), clientv3.WithRev(r.Header.Revision))
			}
			mr, err := b.get(ctx, ops...)
			if err != nil {
				return nil, err
			}
			for i, ns := range nss {
				p := b.scopePrefix(ns, q.Scope)
				parts[i] = map[string]*mvccpb.KeyValue{}
				for _, kv := range mr.Responses[i].GetResponseRange().Kvs {
					parts[i][strings.TrimPrefix(string(kv.Key), p)] = kv
				}
			}
		}
		for _, kv := range rr.Kvs {
			name := strings.TrimPrefix(string(kv.Key), base)
			from = string(kv.Key) + "\x00"
			st, err := keyStateFrom(contract.KeyRef{Scope: q.Scope, Key: name}, parts[0][name], kv, parts[1][name], nil, parts[2][name], now)
			if err != nil {
				return nil, err
			}
			if !st.live || (q.State != "" && st.rec.State != q.State) {
				continue
			}
			out = append(out, st.rec)
			if len(out) == q.Limit {
				return out, nil
			}
		}
		if !rr.More {
			return out, nil
		}
	}
}

// ListLeases implements contract.RecordLister. Held compares the stored
// ExpiresAt with this process's clock: it is a report for operators, and
// no decision about who holds a lease is taken from it.
func (b *Backend) ListLeases(ctx context.Context, q contract.LeaseListQuery) ([]contract.Lease, error) {
	now := b.clockNow()
	base := b.scopePrefix(nsLease, q.Scope)
	end := clientv3.GetPrefixRangeEnd(base)
	from := base
	if q.After != "" {
		from = base + q.After + "\x00"
	}
	var out []contract.Lease
	for {
		r, err := b.get(ctx, clientv3.OpGet(from, clientv3.WithRange(end), clientv3.WithLimit(int64(max(q.Limit, 50)))))
		if err != nil {
			return nil, err
		}
		rr := r.Responses[0].GetResponseRange()
		for _, kv := range rr.Kvs {
			from = string(kv.Key) + "\x00"
			l, err := decodeLease(q.Scope, strings.TrimPrefix(string(kv.Key), base), kv.Value, kv.CreateRevision)
			if err != nil {
				return nil, err
			}
			if q.Held && !l.ExpiresAt.After(now) {
				continue
			}
			out = append(out, l)
			if len(out) == q.Limit {
				return out, nil
			}
		}
		if !rr.More {
			return out, nil
		}
	}
}
