package etcd

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/outcomecodec"
)

// Key layout under the prefix P (which ends in "/"). Scopes and ids never
// contain "/", so "<scope>/<id>" is unambiguous and ranges over
// "<kind>/<scope>/" list one scope in byte order.
const (
	nsWorkflow  = "w/"  // P w/<scope>/<id>: status \0 request id \0 updatedAt snapshot
	nsCreated   = "wc/" // P wc/<scope>/<id>: createdAt (written once)
	nsTerminal  = "wt/" // P wt/<updatedAt hex>/<scope>/<id>: a terminal workflow, by age
	nsKey       = "k/"  // P k/<scope>/<key>: createdAt, fingerprint, workflow id (written once)
	nsKeyToken  = "kt/" // P kt/<scope>/<key>: token \0 state leaseUntil
	nsKeyOut    = "ko/" // P ko/<scope>/<key>: the outcome, on an etcd lease of Retain
	nsKeyTomb   = "kx/" // P kx/<scope>/<key>: the tombstone (times, code), on an etcd lease of max(Retain, Tombstone)
	nsKeyBusy   = "kb/" // P kb/<scope>/<key>: empty, on an etcd lease of TTL + tolerance
	nsLease     = "l/"  // P l/<scope>/<resource>: owner \0 acquiredAt [uvarint(len(value)) value] expiresAt; CreateRevision = token
	nsLeaseHold = "lh/" // P lh/<scope>/<resource>: owner, on an etcd lease of TTL - tolerance
	nsLeaseBusy = "lb/" // P lb/<scope>/<resource>: empty, on an etcd lease of TTL + tolerance
)

func (b *Backend) key(ns string, scope contract.Scope, id string) string {
	return b.prefix + ns + string(scope) + "/" + id
}

func (b *Backend) scopePrefix(ns string, scope contract.Scope) string {
	return b.prefix + ns + string(scope) + "/"
}

// terminalKey indexes a terminal workflow by the time it became terminal,
// so Cleanup finds old ones with one range read.
func (b *Backend) terminalKey(at time.Time, scope contract.Scope, id string) string {
	return fmt.Sprintf("%s%s%016x/%s/%s", b.prefix, nsTerminal, uint64(at.UnixMicro()), scope, id)
}

func putTime(buf []byte, t time.Time) []byte {
	var v int64
	if !t.IsZero() {
		v = t.UnixMicro()
	}
	return binary.BigEndian.AppendUint64(buf, uint64(v))
}

func timeAt(b []byte) time.Time {
	v := int64(binary.BigEndian.Uint64(b))
	if v == 0 {
		return time.Time{}
	}
	return time.UnixMicro(v).UTC()
}

var errCorrupt = errors.New("etcd: malformed record")

func corrupt(what string) error {
	return &contract.Error{Code: contract.Corrupt, Msg: "stored " + what + " record cannot be decoded; inspect and delete it", Err: errCorrupt}
}

// cut splits b at the first 0 byte.
func cut(b []byte) (before, after []byte, ok bool) {
	return bytes.Cut(b, []byte{0})
}

// --- workflows ---

func encodeWorkflow(status contract.Status, requestID string, updated time.Time, snap []byte) []byte {
	buf := make([]byte, 0, len(status)+len(requestID)+10+len(snap))
	buf = append(buf, status...)
	buf = append(buf, 0)
	buf = append(buf, requestID...)
	buf = append(buf, 0)
	buf = putTime(buf, updated)
	return append(buf, snap...)
}

// statusPrefix is what a workflow's value starts with when its status is s.
func statusPrefix(s contract.Status) string { return string(s) + "\x00" }

func decodeWorkflow(scope contract.Scope, id string, v, created []byte, version int64) (contract.Workflow, error) {
	st, rest, ok := cut(v)
	if !ok {
		return contract.Workflow{}, corrupt("workflow")
	}
	req, rest, ok := cut(rest)
	if !ok || len(rest) < 8 || len(created) != 8 {
		return contract.Workflow{}, corrupt("workflow")
	}
	w := contract.Workflow{
		Scope: scope, ID: id, RequestID: string(req), Status: contract.Status(st),
		Revision: version, UpdatedAt: timeAt(rest), CreatedAt: timeAt(created),
	}
	if len(rest) > 8 {
		w.Snapshot = append([]byte(nil), rest[8:]...)
	}
	return w, nil
}

// --- keys ---

const (
	stateClaimed   = 'C'
	stateCompleted = 'D'
)

func encodeKey(created time.Time, fingerprint, workflowID string) []byte {
	buf := putTime(make([]byte, 0, 16+len(fingerprint)+len(workflowID)), created)
	buf = binary.AppendUvarint(buf, uint64(len(fingerprint)))
	buf = append(buf, fingerprint...)
	return append(buf, workflowID...)
}

func encodeToken(token string, state byte, leaseUntil time.Time) []byte {
	buf := make([]byte, 0, len(token)+10)
	buf = append(buf, token...)
	buf = append(buf, 0, state)
	return putTime(buf, leaseUntil)
}

// tokenPrefix is what a key's token record starts with when token holds it
// in state.
func tokenPrefix(token string, state byte) string { return token + "\x00" + string(state) }

type tokenRec struct {
	token      string
	state      byte
	leaseUntil time.Time
}

func decodeToken(v []byte) (tokenRec, error) {
	tok, rest, ok := cut(v)
	if !ok || len(rest) != 9 || (rest[0] != stateClaimed && rest[0] != stateCompleted) {
		return tokenRec{}, corrupt("idempotency key")
	}
	return tokenRec{token: string(tok), state: rest[0], leaseUntil: timeAt(rest[1:])}, nil
}

// encodeOutcome is the value of a completed key's outcome record: the
// outcome in the shared versioned encoding (internal/outcomecodec), then
// completedAt and expiresAt.
func encodeOutcome(completed, expires time.Time, o *contract.Outcome) []byte {
	buf := outcomecodec.AppendOutcome(make([]byte, 0, outcomecodec.OutcomeLen(o)+16), o)
	buf = putTime(buf, completed)
	return putTime(buf, expires)
}

// decodeOutcome reads encodeOutcome's value, or one of the backend's first
// format (the times first, then the outcome unversioned), which begins
// with a zero byte where the versioned encoding begins with its version.
func decodeOutcome(v []byte) (completed, expires time.Time, o *contract.Outcome, err error) {
	if len(v) > 0 && v[0] == outcomecodec.Version1 {
		o, rest, err := outcomecodec.DecodeOutcome(v)
		if err != nil || len(rest) != 16 {
			return time.Time{}, time.Time{}, nil, corrupt("idempotency key")
		}
		return timeAt(rest), timeAt(rest[8:]), o, nil
	}
	completed, expires, o, err = outcomecodec.DecodeLegacyEtcdOutcome(v)
	if err != nil {
		return time.Time{}, time.Time{}, nil, corrupt("idempotency key")
	}
	return completed, expires, o, nil
}

// encodeTombstone is the value of a completed key's tombstone record,
// which outlives its outcome record: completedAt, expiresAt, forgetAt and
// the status code.
func encodeTombstone(completed, expires, forget time.Time, code int) []byte {
	buf := make([]byte, 0, 24+binary.MaxVarintLen64)
	buf = putTime(buf, completed)
	buf = putTime(buf, expires)
	buf = putTime(buf, forget)
	return binary.AppendVarint(buf, int64(code))
}

// tombstone is a decoded tombstone record.
type tombstone struct {
	completed, expires, forget time.Time
	code                       int
}

func decodeTombstone(v []byte) (tombstone, error) {
	if len(v) < 25 {
		return tombstone{}, corrupt("idempotency key")
	}
	code, n := binary.Varint(v[24:])
	if n <= 0 || 24+n != len(v) {
		return tombstone{}, corrupt("idempotency key")
	}
	return tombstone{completed: timeAt(v), expires: timeAt(v[8:]), forget: timeAt(v[16:]), code: int(code)}, nil
}

func decodeKeyRec(ref contract.KeyRef, k []byte, t tokenRec, out []byte) (contract.KeyRecord, error) {
	if len(k) < 9 {
		return contract.KeyRecord{}, corrupt("idempotency key")
	}
	// After the time: the fingerprint, length-prefixed, then the workflow
	// ID to the end.
	rest := k[8:]
	n, w := binary.Uvarint(rest)
	if w <= 0 || n > uint64(len(rest)-w) {
		return contract.KeyRecord{}, corrupt("idempotency key")
	}
	fp, wf := rest[w:w+int(n)], rest[w+int(n):]
	rec := contract.KeyRecord{
		KeyRef: ref, Fingerprint: string(fp), WorkflowID: string(wf), CreatedAt: timeAt(k),
	}
	switch t.state {
	case stateClaimed:
		rec.State = contract.KeyClaimed
		rec.LeaseUntil = t.leaseUntil
	case stateCompleted:
		rec.State = contract.KeyCompleted
		c, e, o, err := decodeOutcome(out)
		if err != nil {
			return contract.KeyRecord{}, err
		}
		rec.CompletedAt, rec.ExpiresAt, rec.ForgetAt, rec.Outcome = c, e, e, o // ForgetAt: see keyStateFrom
	}
	return rec, nil
}

// --- leases ---

// encodeLease is the value of a lease record. Without a value it is
// owner \0 acquiredAt expiresAt, the backend's first format, which older
// versions of it read too; with one it is owner \0 acquiredAt
// uvarint(len(value)) value expiresAt. expiresAt stays last so that a
// renewal can compare the record with everything but it (leasePrefix).
func encodeLease(owner string, acquired, expires time.Time, value string) []byte {
	buf := make([]byte, 0, len(owner)+17+binary.MaxVarintLen64+len(value))
	buf = append(buf, owner...)
	buf = append(buf, 0)
	buf = putTime(buf, acquired)
	if value != "" {
		buf = binary.AppendUvarint(buf, uint64(len(value)))
		buf = append(buf, value...)
	}
	return putTime(buf, expires)
}

// leasePrefix is what the record of the grant (owner, acquired, value)
// starts with, whatever its ExpiresAt: encodeLease without expiresAt. A
// record starts with it only if it stores exactly that owner, AcquiredAt
// and value: the owner ends at the first 0 byte; after the time, a record
// with a value has a length (a uvarint, which no other uvarint starts) and
// one without has its ExpiresAt, whose first byte is 0 for every time
// before the year 4253, while a length's is not. So a record starts with
// it exactly when it lies strictly between it and it + "\x01".
func leasePrefix(owner string, acquired time.Time, value string) string {
	b := encodeLease(owner, acquired, time.Time{}, value)
	return string(b[:len(b)-8])
}

// ownerPrefix is what a lease record starts with when owner holds it.
func ownerPrefix(owner string) string { return owner + "\x00" }

func decodeLease(scope contract.Scope, resource string, v []byte, token int64) (contract.Lease, error) {
	owner, rest, ok := cut(v)
	if !ok || len(rest) < 16 {
		return contract.Lease{}, corrupt("lease")
	}
	l := contract.Lease{
		Scope: scope, Resource: resource, Owner: string(owner), Token: token,
		AcquiredAt: timeAt(rest), ExpiresAt: timeAt(rest[len(rest)-8:]),
	}
	if len(rest) > 16 {
		mid := rest[8 : len(rest)-8]
		n, w := binary.Uvarint(mid)
		if w <= 0 || n == 0 || n != uint64(len(mid)-w) {
			return contract.Lease{}, corrupt("lease")
		}
		l.Value = string(mid[w:])
	}
	return l, nil
}
