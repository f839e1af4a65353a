package redis

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/outcomecodec"
	goredis "github.com/redis/go-redis/v9"
)

// --- workflows ---

func decodeWorkflow(r *reply, scope contract.Scope, id string) (contract.Workflow, error) {
	w := contract.Workflow{Scope: scope, ID: id}
	w.Status = contract.Status(r.str())
	w.RequestID = r.str()
	w.Revision = r.int()
	if snap := r.str(); snap != "" {
		w.Snapshot = []byte(snap)
	}
	w.CreatedAt, w.UpdatedAt = r.time(), r.time()
	if r.bad || w.Status == "" || w.Revision < 1 {
		return contract.Workflow{}, corrupt("workflow")
	}
	return w, nil
}

// CreateWorkflow implements contract.StateStore.
func (b *Backend) CreateWorkflow(ctx context.Context, w contract.Workflow) (contract.Workflow, error) {
	if err := b.register(ctx, w.Scope); err != nil {
		return contract.Workflow{}, err
	}
	base := b.base(w.Scope)
	v, err := b.run(ctx, wfCreate, true, []string{base + "w:" + w.ID}, base, b.now(), w.ID, string(w.Status), w.RequestID, w.Snapshot, nonce())
	if err != nil {
		return contract.Workflow{}, err
	}
	r := asReply(v)
	if r.str() == "exists" {
		return contract.Workflow{}, &contract.Error{Code: contract.AlreadyExists, Msg: "workflow already exists"}
	}
	return decodeWorkflow(r, w.Scope, w.ID)
}

// GetWorkflow implements contract.StateStore.
func (b *Backend) GetWorkflow(ctx context.Context, scope contract.Scope, id string) (contract.Workflow, error) {
	base := b.base(scope)
	v, err := b.run(ctx, wfGet, false, []string{base + "w:" + id}, base, "")
	if err != nil {
		return contract.Workflow{}, err
	}
	r := asReply(v)
	if r.str() != "ok" {
		return contract.Workflow{}, notFound("workflow")
	}
	return decodeWorkflow(r, scope, id)
}

func fenceArgs(f *contract.Fence) (string, string, string) {
	if f == nil {
		return "", "", ""
	}
	return f.Resource, f.Owner, strconv.FormatInt(f.Token, 10)
}

// UpdateWorkflow implements contract.StateStore: one script checks, in
// the contract's order, existence, terminal status, the fence and the
// expected status and revision, and writes.
func (b *Backend) UpdateWorkflow(ctx context.Context, u contract.Update) (contract.Workflow, error) {
	base := b.base(u.Scope)
	fr, fo, ft := fenceArgs(u.Fence)
	v, err := b.run(ctx, wfUpdate, true, []string{base + "w:" + u.ID}, base, b.now(), u.ID,
		string(u.ExpectStatus), strconv.FormatInt(u.ExpectRevision, 10), fr, fo, ft, b.tol(),
		string(u.Status), u.RequestID, u.Snapshot, nonce())
	if err != nil {
		return contract.Workflow{}, err
	}
	r := asReply(v)
	switch r.str() {
	case "ok":
		return decodeWorkflow(r, u.Scope, u.ID)
	case "notfound":
		return contract.Workflow{}, notFound("workflow")
	case "terminal":
		return contract.Workflow{}, &contract.Error{Code: contract.Terminal, Msg: "workflow is in a terminal status"}
	case "fenced":
		return contract.Workflow{}, &contract.Error{Code: contract.Fenced, Msg: "fence is not valid"}
	case "conflict":
		st, rev := r.str(), r.int()
		return contract.Workflow{}, &contract.Error{Code: contract.Conflict, Msg: "workflow changed", Details: &contract.Details{
			ExpectedStatus: u.ExpectStatus, ActualStatus: contract.Status(st),
			ExpectedRevision: u.ExpectRevision, ActualRevision: rev,
		}}
	}
	return contract.Workflow{}, corrupt("workflow")
}

// ListWorkflows implements contract.StateStore: one script reads a page
// of the scope's index (or its index of one status) with ZRANGEBYLEX.
func (b *Backend) ListWorkflows(ctx context.Context, q contract.ListQuery) ([]contract.Workflow, error) {
	base := b.base(q.Scope)
	v, err := b.run(ctx, listWorkflows, false, []string{base + "i:w"}, base, "", string(q.Status), q.After, limit(q.Limit))
	if err != nil {
		return nil, err
	}
	r := asReply(v)
	var out []contract.Workflow
	for r.more() {
		id := r.str()
		w, err := decodeWorkflow(r, q.Scope, id)
		if err != nil {
			return nil, err
		}
		out = append(out, w)
	}
	if r.bad {
		return nil, corrupt("workflow")
	}
	return out, nil
}

func limit(n int) string {
	if n <= 0 {
		n = 100
	}
	return strconv.Itoa(n)
}

// --- idempotency keys ---

// decodeKey reads a key_reply.
func decodeKey(r *reply, ref contract.KeyRef) (contract.KeyRecord, error) {
	k := contract.KeyRecord{KeyRef: ref}
	k.Fingerprint = r.str()
	k.WorkflowID = r.str()
	state := r.str()
	k.LeaseUntil, k.CreatedAt, k.CompletedAt, k.ExpiresAt, k.ForgetAt = r.time(), r.time(), r.time(), r.time(), r.time()
	code, err := strconv.Atoi(r.str())
	out, has := r.str(), r.str()
	if r.bad || err != nil {
		return contract.KeyRecord{}, corrupt("idempotency key")
	}
	switch state {
	case "claimed":
		k.State = contract.KeyClaimed
	case "expired":
		k.State = contract.KeyExpired
		k.Outcome = &contract.Outcome{Code: code}
	case "completed":
		k.State = contract.KeyCompleted
		if has != "1" {
			return contract.KeyRecord{}, corrupt("idempotency key")
		}
		o, rest, err := outcomecodec.DecodeOutcome([]byte(out))
		if err != nil || len(rest) != 0 {
			return contract.KeyRecord{}, &contract.Error{Code: contract.Corrupt, Msg: "stored outcome cannot be decoded (inspect it and delete it with durable delete)", Err: err,
				Record: &contract.RecordRef{Kind: contract.KindKey, Scope: ref.Scope, ID: ref.Key}}
		}
		k.Outcome = o
	default:
		return contract.KeyRecord{}, corrupt("idempotency key")
	}
	return k, nil
}

func errFencedKey() error {
	return &contract.Error{Code: contract.Fenced, Msg: "claim token does not hold the key"}
}

// ClaimKey implements contract.IdempotencyStore: one script establishes
// the facts of internal/claimrule on the server's clock, decides by the
// same rule (ported line by line to Lua) and writes. The token is chosen
// here (or is the caller's), so a retried script finds its own claim.
func (b *Backend) ClaimKey(ctx context.Context, req contract.ClaimRequest) (contract.Claim, error) {
	if err := b.register(ctx, req.Scope); err != nil {
		return contract.Claim{}, err
	}
	token := req.Token
	if token == "" {
		token = nonce()
	}
	base := b.base(req.Scope)
	v, err := b.run(ctx, keyClaim, true, []string{base + "k:" + req.Key}, base, b.now(), req.Key,
		req.Fingerprint, req.WorkflowID, us(req.TTL), token, b.tol())
	if err != nil {
		return contract.Claim{}, err
	}
	r := asReply(v)
	var kind contract.ClaimKind
	switch r.str() {
	case "conflict":
		return contract.Claim{}, &contract.Error{Code: contract.KeyConflict, Msg: "key is bound to another request"}
	case "gone":
		return contract.Claim{}, &contract.Error{Code: contract.OutcomeExpired, Msg: "the key's outcome is no longer retained; the request must not run again"}
	case "new":
		kind = contract.ClaimNew
	case "reclaimed":
		kind = contract.ClaimReclaimed
	case "inflight":
		kind = contract.ClaimInFlight
	case "completed":
		kind = contract.ClaimCompleted
	default:
		return contract.Claim{}, corrupt("idempotency key")
	}
	tok := r.str()
	rec, err := decodeKey(r, req.KeyRef)
	if err != nil {
		return contract.Claim{}, err
	}
	return contract.Claim{Kind: kind, Token: tok, Record: rec}, nil
}

// CompleteKey implements contract.IdempotencyStore.
func (b *Backend) CompleteKey(ctx context.Context, c contract.Completion) (contract.KeyRecord, error) {
	base := b.base(c.Scope)
	fr, fo, ft := fenceArgs(c.Fence)
	blob := outcomecodec.AppendOutcome(make([]byte, 0, outcomecodec.OutcomeLen(&c.Outcome)), &c.Outcome)
	v, err := b.run(ctx, keyComplete, true, []string{base + "k:" + c.Key}, base, b.now(), c.Key, c.Token,
		blob, strconv.Itoa(c.Outcome.Code), us(c.Retain), us(c.Tombstone), fr, fo, ft, b.tol())
	if err != nil {
		return contract.KeyRecord{}, err
	}
	r := asReply(v)
	switch r.str() {
	case "ok":
		return decodeKey(r, c.KeyRef)
	case "fencedkey":
		return contract.KeyRecord{}, errFencedKey()
	case "fenced":
		return contract.KeyRecord{}, &contract.Error{Code: contract.Fenced, Msg: "fence is not valid"}
	}
	return contract.KeyRecord{}, corrupt("idempotency key")
}

// RenewKey implements contract.IdempotencyStore.
func (b *Backend) RenewKey(ctx context.Context, ref contract.KeyRef, token string, ttl time.Duration) (contract.KeyRecord, error) {
	base := b.base(ref.Scope)
	v, err := b.run(ctx, keyRenew, true, []string{base + "k:" + ref.Key}, base, b.now(), ref.Key, token, us(ttl))
	if err != nil {
		return contract.KeyRecord{}, err
	}
	r := asReply(v)
	if r.str() != "ok" {
		return contract.KeyRecord{}, errFencedKey()
	}
	return decodeKey(r, ref)
}

// ReleaseKey implements contract.IdempotencyStore.
func (b *Backend) ReleaseKey(ctx context.Context, ref contract.KeyRef, token string) (bool, error) {
	base := b.base(ref.Scope)
	v, err := b.run(ctx, keyRelease, true, []string{base + "k:" + ref.Key}, base, b.now(), ref.Key, token)
	if err != nil {
		return false, err
	}
	return v == int64(1), nil
}

// GetKey implements contract.IdempotencyStore.
func (b *Backend) GetKey(ctx context.Context, ref contract.KeyRef) (contract.KeyRecord, error) {
	base := b.base(ref.Scope)
	v, err := b.run(ctx, keyGet, false, []string{base + "k:" + ref.Key}, base, b.now())
	if err != nil {
		return contract.KeyRecord{}, err
	}
	r := asReply(v)
	if r.str() != "ok" {
		return contract.KeyRecord{}, notFound("key")
	}
	return decodeKey(r, ref)
}

// --- leases ---

func decodeLease(r *reply, scope contract.Scope, res string) (contract.Lease, error) {
	l := contract.Lease{Scope: scope, Resource: res}
	l.Owner = r.str()
	l.Token = r.int()
	l.AcquiredAt, l.ExpiresAt = r.time(), r.time()
	l.Value = r.str()
	if r.bad || l.Token < 1 {
		return contract.Lease{}, corrupt("lease")
	}
	return l, nil
}

// maxToken is the greatest token the backend issues: 2^53, the last
// integer from which Lua's doubles still count one by one.
const maxToken = 1 << 53

func errLeaseFenced() error {
	return &contract.Error{Code: contract.Fenced, Msg: "lease is no longer held"}
}

// AcquireLease implements contract.LeaseStore: one script, which takes
// the token from the counter P:{sS}:t:TR of the resource's token resource
// TR (contract.TokenResource: the semaphore's resource for a permit's
// "R#n", the resource itself otherwise; in the scope's slot; never
// deleted, see the package documentation).
func (b *Backend) AcquireLease(ctx context.Context, req contract.LeaseRequest) (contract.Lease, error) {
	if err := b.register(ctx, req.Scope); err != nil {
		return contract.Lease{}, err
	}
	base := b.base(req.Scope)
	tr := contract.TokenResource(req.Resource)
	v, err := b.run(ctx, leaseAcquire, true, []string{base + "l:" + req.Resource, base + "t:" + tr},
		base, b.now(), req.Resource, req.Owner, us(req.TTL), b.tol(), nonce(), req.Value, tr)
	if err != nil {
		return contract.Lease{}, err
	}
	r := asReply(v)
	kind := r.str()
	if kind != "ok" {
		return decodeGrant(r, kind, req.Scope, req.Resource)
	}
	return decodeAcquired(r, req)
}

// decodeAcquired decodes the rest of leaseAcquire's 'ok' reply: token,
// acquired and expires; the owner and value are req's.
func decodeAcquired(r *reply, req contract.LeaseRequest) (contract.Lease, error) {
	l := contract.Lease{Scope: req.Scope, Resource: req.Resource, Owner: req.Owner, Value: req.Value}
	l.Token = r.int()
	l.AcquiredAt, l.ExpiresAt = r.time(), r.time()
	if r.bad || l.Token < 1 {
		return contract.Lease{}, corrupt("lease")
	}
	return l, nil
}

// decodeGrant decodes the rest of a grant's reply whose first element was
// kind.
func decodeGrant(r *reply, kind string, scope contract.Scope, res string) (contract.Lease, error) {
	switch kind {
	case "ok":
		return decodeLease(r, scope, res)
	case "busy":
		return contract.Lease{}, &contract.Error{Code: contract.LeaseBusy, Msg: "lease is held"}
	case "exhausted":
		return contract.Lease{}, contract.TokensExhausted(nil)
	}
	return contract.Lease{}, corrupt("lease")
}

// AcquirePermit implements contract.PermitAcquirer: one script reads
// permits 1 to req.Permits of the semaphore in turn and grants the first
// one AcquireLease would grant, with a token from the counter of
// req.Resource that the permits and a plain lease on req.Resource share.
// The permits' records and the counter have the scope's hash tag: one
// script on one node, also on a cluster.
func (b *Backend) AcquirePermit(ctx context.Context, req contract.PermitRequest) (contract.Lease, error) {
	if strings.Contains(req.Resource, contract.PermitSeparator) {
		return contract.Lease{}, invalid("a semaphore's resource cannot contain " + contract.PermitSeparator)
	}
	if err := b.register(ctx, req.Scope); err != nil {
		return contract.Lease{}, err
	}
	base := b.base(req.Scope)
	v, err := b.run(ctx, permitAcquire, true, []string{base + "t:" + req.Resource},
		base, b.now(), req.Resource, req.Owner, us(req.TTL), b.tol(), nonce(), req.Value, req.Resource, strconv.Itoa(req.Permits))
	if err != nil {
		return contract.Lease{}, err
	}
	r := asReply(v)
	kind := r.str()
	res := req.Resource
	if kind == "ok" {
		res = r.str()
		if base, _, ok := contract.SplitPermit(res); !ok || base != req.Resource {
			return contract.Lease{}, corrupt("lease")
		}
	}
	l, err := decodeGrant(r, kind, req.Scope, res)
	if err != nil && kind == "busy" {
		return contract.Lease{}, &contract.Error{Code: contract.LeaseBusy, Msg: "every permit is held"}
	}
	return l, err
}

// RenewLease implements contract.LeaseStore.
func (b *Backend) RenewLease(ctx context.Context, l contract.Lease, ttl time.Duration) (contract.Lease, error) {
	out, err := b.renewScope(ctx, l.Scope, []contract.Lease{l}, ttl)
	if err != nil {
		return contract.Lease{}, err
	}
	return out[0].Lease, out[0].Err
}

// RenewLeases implements contract.LeaseRenewer: one script per scope
// (each scope is one slot), each judging its leases on one reading of the
// clock. With the server's clock, a batch that spans several scopes reads
// each scope's node clock once.
func (b *Backend) RenewLeases(ctx context.Context, leases []contract.Lease, ttl time.Duration) ([]contract.LeaseRenewal, error) {
	out := make([]contract.LeaseRenewal, len(leases))
	byScope := map[contract.Scope][]int{}
	var order []contract.Scope
	for i, l := range leases {
		if _, ok := byScope[l.Scope]; !ok {
			order = append(order, l.Scope)
		}
		byScope[l.Scope] = append(byScope[l.Scope], i)
	}
	for _, scope := range order {
		idx := byScope[scope]
		part := make([]contract.Lease, len(idx))
		for j, i := range idx {
			part[j] = leases[i]
		}
		got, err := b.renewScope(ctx, scope, part, ttl)
		if err != nil {
			return nil, err
		}
		for j, i := range idx {
			out[i] = got[j]
		}
	}
	return out, nil
}

func (b *Backend) renewScope(ctx context.Context, scope contract.Scope, leases []contract.Lease, ttl time.Duration) ([]contract.LeaseRenewal, error) {
	base := b.base(scope)
	args := make([]any, 0, 4+3*len(leases))
	args = append(args, base, b.now(), us(ttl), b.tol())
	for _, l := range leases {
		args = append(args, l.Resource, l.Owner, strconv.FormatInt(l.Token, 10))
	}
	v, err := b.run(ctx, leaseRenew, true, []string{base + "l:" + leases[0].Resource}, args...)
	if err != nil {
		return nil, err
	}
	r := asReply(v)
	out := make([]contract.LeaseRenewal, len(leases))
	for i, l := range leases {
		if r.str() != "ok" {
			for range 5 {
				r.str()
			}
			out[i].Err = errLeaseFenced()
			continue
		}
		got, err := decodeLease(r, scope, l.Resource)
		if err != nil {
			return nil, err
		}
		out[i].Lease = got
	}
	if r.bad {
		return nil, corrupt("lease")
	}
	return out, nil
}

// ReleaseLease implements contract.LeaseStore.
func (b *Backend) ReleaseLease(ctx context.Context, l contract.Lease) (bool, error) {
	if l.Token < 1 || l.Token > maxToken {
		// No grant gives such a token (see grantLua); the script compares
		// tokens as Lua numbers, exact only below 2^53.
		return false, nil
	}
	base := b.base(l.Scope)
	v, err := b.run(ctx, leaseRelease, true, []string{base + "l:" + l.Resource}, base, "", l.Resource, l.Owner,
		strconv.FormatInt(l.Token, 10), contract.TokenResource(l.Resource))
	if err != nil {
		return false, err
	}
	return v == int64(1), nil
}

// GetLease implements contract.LeaseStore.
func (b *Backend) GetLease(ctx context.Context, scope contract.Scope, resource string) (contract.Lease, error) {
	base := b.base(scope)
	v, err := b.run(ctx, leaseGet, false, []string{base + "l:" + resource}, base, "")
	if err != nil {
		return contract.Lease{}, err
	}
	r := asReply(v)
	if r.str() != "ok" {
		return contract.Lease{}, notFound("lease")
	}
	return decodeLease(r, scope, resource)
}

// --- operators ---

// ListKeys implements contract.RecordLister.
func (b *Backend) ListKeys(ctx context.Context, q contract.KeyListQuery) ([]contract.KeyRecord, error) {
	base := b.base(q.Scope)
	v, err := b.run(ctx, listKeys, false, []string{base + "i:k"}, base, b.now(), string(q.State), q.After, limit(q.Limit))
	if err != nil {
		return nil, err
	}
	r := asReply(v)
	var out []contract.KeyRecord
	for r.more() {
		key := r.str()
		k, err := decodeKey(r, contract.KeyRef{Scope: q.Scope, Key: key})
		if err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	if r.bad {
		return nil, corrupt("idempotency key")
	}
	return out, nil
}

// ListLeases implements contract.RecordLister.
func (b *Backend) ListLeases(ctx context.Context, q contract.LeaseListQuery) ([]contract.Lease, error) {
	base := b.base(q.Scope)
	held := "0"
	if q.Held {
		held = "1"
	}
	v, err := b.run(ctx, listLeases, false, []string{base + "i:l"}, base, b.now(), held, q.After, limit(q.Limit))
	if err != nil {
		return nil, err
	}
	r := asReply(v)
	var out []contract.Lease
	for r.more() {
		res := r.str()
		l, err := decodeLease(r, q.Scope, res)
		if err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, nil
}

// DeleteRecord implements contract.RecordDeleter. Deleting a lease never
// touches its token resource's counter, so a later grant still gets a
// greater token; a deleted key wakes its waiters, a deleted lease its
// watchers.
func (b *Backend) DeleteRecord(ctx context.Context, kind contract.RecordKind, scope contract.Scope, id string) (bool, error) {
	var k string
	base := b.base(scope)
	switch kind {
	case contract.KindWorkflow:
		k = base + "w:" + id
	case contract.KindKey:
		k = base + "k:" + id
	case contract.KindLease:
		k = base + "l:" + id
	default:
		return false, &contract.Error{Code: contract.InvalidArgument, Msg: "unknown record kind"}
	}
	v, err := b.run(ctx, deleteRecord, true, []string{k}, base, "", string(kind), id)
	if err != nil {
		return false, err
	}
	return v == int64(1), nil
}

// Cleanup implements contract.Backend: one script per scope in the
// registry (each scope on its own slot), each bounded by what is left of
// req.Limit for each kind. Expired records are found through the scopes'
// expiry indexes, never by scanning live records.
func (b *Backend) Cleanup(ctx context.Context, req contract.CleanupRequest) (contract.CleanupResult, error) {
	return b.cleanup(ctx, req, true)
}

// CountCleanup implements contract.CleanupCounter.
func (b *Backend) CountCleanup(ctx context.Context, req contract.CleanupRequest) (contract.CleanupResult, error) {
	return b.cleanup(ctx, req, false)
}

func (b *Backend) cleanup(ctx context.Context, req contract.CleanupRequest, del bool) (contract.CleanupResult, error) {
	if b.closed.Load() {
		return contract.CleanupResult{}, errClosed()
	}
	lim := req.Limit
	if lim <= 0 {
		lim = 1000
	}
	var res contract.CleanupResult
	var more [4]bool
	flag := "0"
	if del {
		flag = "1"
	}
	now := b.now() // one reading of the test clock; the server's is read per scope
	after := "-"
	for {
		scopes, err := b.rdb.ZRangeByLex(ctx, b.registry(), &goredis.ZRangeBy{Min: after, Max: "+", Count: 500}).Result()
		if err != nil {
			return res, b.fail(ctx, err, false)
		}
		for _, s := range scopes {
			scope := contract.Scope(s)
			base := b.base(scope)
			counts := []*int{&res.Workflows, &res.Keys, &res.Outcomes, &res.Leases}
			v, err := b.run(ctx, cleanupScope, del, []string{base + "i:wt"}, base, now, us(req.TerminalAge), b.tol(),
				lim-res.Workflows, lim-res.Keys, lim-res.Outcomes, lim-res.Leases, flag)
			if err != nil {
				return res, err
			}
			r := asReply(v)
			var n [4]int64
			for i := range n {
				n[i] = r.int()
			}
			for i := range n {
				if r.int() == 1 {
					more[i] = true
				}
				*counts[i] += int(n[i])
			}
			if r.bad {
				return res, corrupt("cleanup reply")
			}
			if more[0] && more[1] && more[2] && more[3] {
				res.More = true
				return res, nil
			}
		}
		if len(scopes) < 500 {
			break
		}
		after = "(" + scopes[len(scopes)-1]
	}
	res.More = more[0] || more[1] || more[2] || more[3]
	return res, nil
}
