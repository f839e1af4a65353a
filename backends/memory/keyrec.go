package memory

import (
	"time"

	"github.com/durable-go/durable/contract"
)

// keyRec is a stored idempotency key, kept compact because a store keeps
// every completed key for its retention, and what it keeps per key is what
// the garbage collector marks on every cycle. The keys map holds it by
// value (it is small enough for the map to store inline), its strings are
// substrings of one allocation, data, and its times are integers. A key is
// then one pointer-free object beside its map slot, where a record held by
// pointer with a contract.KeyRecord inside was five objects: the struct
// and its key, fingerprint, token and outcome strings. The map key of a
// record is made of data's substrings too (see id); a record rebuilt with
// new data is stored under its own id, which makes the map (and the
// listing indexes, see Storage.putKey) drop the old data.
type keyRec struct {
	// data holds the scope, the key, the fingerprint, the workflow ID and
	// the claim token, in that order, then the packed outcome (outcome.go)
	// once completed: the whole outcome until Cleanup drops its payload
	// past ExpiresAt, then the tombstone's code alone. The token is kept
	// after completion for lost-reply retries.
	data string
	// The ends of the parts in data.
	scopeEnd, keyEnd, fpEnd, wfEnd, tokenEnd uint32
	completed                                bool // the state: completed (or its tombstone), else claimed
	// The record's times, in microseconds since the Unix epoch (the store's
	// clock has microsecond precision; the zero time is stored as its own
	// value, far before the epoch, and comes back as the zero time).
	//
	// until is the end of what the state holds: while claimed, the lease
	// (LeaseUntil); once completed, the tombstone (ForgetAt). A completed
	// key has no lease, so one field serves both and the record is no
	// bigger for the second tier of retention.
	until, createdAt, completedAt, expiresAt int64
}

// newKeyRec returns a claimed record of the strings given (and out packed,
// if not nil) in one allocation, its times zero; the caller sets the state
// and the times.
func newKeyRec(scope contract.Scope, key, fingerprint, workflowID, token string, out *contract.Outcome) keyRec {
	return newKeyRecFlags(scope, key, fingerprint, workflowID, token, out, 0)
}

// newKeyRecFlags is newKeyRec with extra flags in the packed outcome's
// flags byte (packedDropped for a tombstone).
func newKeyRecFlags(scope contract.Scope, key, fingerprint, workflowID, token string, out *contract.Outcome, flags byte) keyRec {
	var p packer
	p.b.Grow(len(scope) + len(key) + len(fingerprint) + len(workflowID) + len(token) + packedLen(out))
	var r keyRec
	p.b.WriteString(string(scope))
	r.scopeEnd = uint32(p.b.Len())
	p.b.WriteString(key)
	r.keyEnd = uint32(p.b.Len())
	p.b.WriteString(fingerprint)
	r.fpEnd = uint32(p.b.Len())
	p.b.WriteString(workflowID)
	r.wfEnd = uint32(p.b.Len())
	p.b.WriteString(token)
	r.tokenEnd = uint32(p.b.Len())
	r.until, r.createdAt, r.completedAt, r.expiresAt = zeroTime, zeroTime, zeroTime, zeroTime
	p.outcome(out, flags)
	r.data = p.b.String()
	return r
}

// withData returns r's state and times on a new record of r's strings with
// the token and outcome given.
func (r keyRec) withData(token string, out *contract.Outcome) keyRec {
	nr := newKeyRec(r.scope(), r.key(), r.fingerprint(), r.workflowID(), token, out)
	nr.completed = r.completed
	nr.until, nr.createdAt, nr.completedAt, nr.expiresAt = r.until, r.createdAt, r.completedAt, r.expiresAt
	return nr
}

// withoutPayload returns r, a completed record, as its tombstone: the same
// strings, state and times, the outcome reduced to its code and marked
// dropped.
func (r keyRec) withoutPayload() keyRec {
	nr := newKeyRecFlags(r.scope(), r.key(), r.fingerprint(), r.workflowID(), r.token(), &contract.Outcome{Code: r.out().code()}, packedDropped)
	nr.completed = r.completed
	nr.until, nr.createdAt, nr.completedAt, nr.expiresAt = r.until, r.createdAt, r.completedAt, r.expiresAt
	return nr
}

func (r *keyRec) scope() contract.Scope { return contract.Scope(r.data[:r.scopeEnd]) }
func (r *keyRec) key() string           { return r.data[r.scopeEnd:r.keyEnd] }
func (r *keyRec) fingerprint() string   { return r.data[r.keyEnd:r.fpEnd] }
func (r *keyRec) workflowID() string    { return r.data[r.fpEnd:r.wfEnd] }
func (r *keyRec) token() string         { return r.data[r.wfEnd:r.tokenEnd] }
func (r *keyRec) out() packedOutcome    { return packedOutcome(r.data[r.tokenEnd:]) }

// id is the map key the record is stored under: its own substrings, never
// the caller's strings, which the map would otherwise keep alive.
func (r *keyRec) id() recKey { return recKey{r.scope(), r.key()} }

// state returns the record's state at now: a completed record past
// ExpiresAt is only its tombstone (KeyExpired), whether or not Cleanup has
// dropped its payload yet.
func (r *keyRec) state(now time.Time) contract.KeyState {
	switch {
	case !r.completed:
		return contract.KeyClaimed
	case r.expired(now):
		return contract.KeyExpired
	}
	return contract.KeyCompleted
}

// live reports whether the record still counts at now: a completed record
// past ForgetAt (the end of its tombstone) counts as absent.
func (r *keyRec) live(now time.Time) bool {
	return !r.completed || micros(now) < r.until
}

// expired reports whether r is completed and its outcome's retention
// ended at now (ExpiresAt <= now): its payload must not be read any more.
func (r *keyRec) expired(now time.Time) bool {
	return r.completed && r.expiresAt <= micros(now)
}

// lapsed reports whether r is a claim whose lease ended more than tol
// before now: abandoned.
func (r *keyRec) lapsed(now time.Time, tol time.Duration) bool {
	return !r.completed && fromMicros(r.until).Add(tol).Before(now)
}

// record returns the contract record as it reads at now, with a private
// copy of its outcome when withOutcome is set (else the Outcome is nil,
// for a caller that unpacks r.out() itself). A tombstone (state
// KeyExpired) always gets its Outcome, the code alone: never the payload,
// even before Cleanup drops it.
func (r *keyRec) record(now time.Time, withOutcome bool) contract.KeyRecord {
	rec := contract.KeyRecord{
		KeyRef:      contract.KeyRef{Scope: r.scope(), Key: r.key()},
		Fingerprint: r.fingerprint(),
		WorkflowID:  r.workflowID(),
		State:       r.state(now),
		CreatedAt:   fromMicros(r.createdAt),
		CompletedAt: fromMicros(r.completedAt),
		ExpiresAt:   fromMicros(r.expiresAt),
	}
	if r.completed {
		rec.ForgetAt = fromMicros(r.until)
	} else {
		rec.LeaseUntil = fromMicros(r.until)
	}
	switch {
	case rec.State == contract.KeyExpired:
		rec.Outcome = &contract.Outcome{Code: r.out().code()}
	case withOutcome:
		rec.Outcome = r.out().unpack()
	}
	return rec
}

// zeroTime is micros(time.Time{}).
const zeroTime = -62135596800 * 1_000_000

// micros returns t (which has microsecond precision, or loses what is
// finer) as microseconds since the Unix epoch.
func micros(t time.Time) int64 { return t.UnixMicro() }

// fromMicros returns the UTC time of micros' value; the zero time comes
// back as the zero time.
func fromMicros(us int64) time.Time { return time.UnixMicro(us).UTC() }
