// Package claimrule is the decision of ClaimKey, written once for every
// backend: given what a backend knows about a key's stored record (Facts),
// whether the claim takes the key (as a new claim, a reclaim, or the
// caller's own claim handed back) or answers with the record (completed,
// expired to a tombstone, in flight, or bound to another request).
//
// A backend establishes the facts its own way (in Go for memory, SQLite
// and etcd; in SQL for PostgreSQL, whose statement returns them as one
// integer of these bits) and takes the outcome from Decide. How a backend
// then takes the key atomically (a transaction, a compare-and-swap, an
// INSERT … ON CONFLICT) is its own mechanism, not part of the rule.
package claimrule

// Facts are what is known about a key's stored record when a claim
// arrives, one bit each. The zero value is a key without a record. The
// PostgreSQL backend's statement computes Found, Live, Lapsed and Match in
// SQL and returns them as one integer of these bits (its claimConds).
type Facts uint8

const (
	// Found: the key has a stored record.
	Found Facts = 1 << iota
	// Live: the record still binds the key: it is not a completed one
	// past ForgetAt (the end of its tombstone), which counts as absent.
	// (A record stored before tombstones existed has ForgetAt =
	// ExpiresAt.)
	Live
	// Lapsed: the record is a claim whose lease expired more than the
	// clock tolerance ago (lease end + tolerance < now): abandoned.
	Lapsed
	// Match: the record is bound to the claiming request (SameRequest).
	Match
	// Completed: the record is completed (it holds an outcome, or its
	// tombstone).
	Completed
	// Expired: the record is completed and its outcome's retention ended
	// (ExpiresAt <= now): only the tombstone is left.
	Expired
	// Own: the record is a claim whose token equals the claiming
	// request's own token (ClaimRequest.Token, non-empty; byte for byte):
	// the caller's own claim, whose reply it lost.
	Own

	all = Found | Live | Lapsed | Match | Completed | Expired | Own
)

// Stored are the facts of a key that has a record, as named booleans.
type Stored struct {
	Live, Lapsed, Match, Completed, Expired, Own bool
}

// Facts returns s as Facts, Found included.
func (s Stored) Facts() Facts {
	f := Found
	if s.Live {
		f |= Live
	}
	if s.Lapsed {
		f |= Lapsed
	}
	if s.Match {
		f |= Match
	}
	if s.Completed {
		f |= Completed
	}
	if s.Expired {
		f |= Expired
	}
	if s.Own {
		f |= Own
	}
	return f
}

// Outcome is what a claim does.
type Outcome uint8

const (
	// New: take the key as a new claim (no record, or one that counts as
	// absent, which the claim replaces).
	New Outcome = iota
	// Reclaim: take over the abandoned claim of the same request, with a
	// new token and lease (contract.ClaimReclaimed).
	Reclaim
	// Replay: answer with the completed record (contract.ClaimCompleted).
	Replay
	// InFlight: answer that the claim is held (contract.ClaimInFlight).
	InFlight
	// Conflict: the key is bound to another request (contract.KeyConflict).
	Conflict
	// Held: the record is the caller's own claim (the same token): hand it
	// back as the caller's, its lease set to now + TTL (contract.ClaimNew).
	Held
	// Gone: the outcome's retention ended; only the tombstone is left
	// (contract.OutcomeExpired).
	Gone
)

// Takes reports whether the outcome writes the key: New, Reclaim or Held.
func (o Outcome) Takes() bool { return o == New || o == Reclaim || o == Held }

func (o Outcome) String() string {
	switch o {
	case New:
		return "New"
	case Reclaim:
		return "Reclaim"
	case Replay:
		return "Replay"
	case InFlight:
		return "InFlight"
	case Conflict:
		return "Conflict"
	case Held:
		return "Held"
	case Gone:
		return "Gone"
	}
	return "Outcome(?)"
}

// rule is the decision: the first line whose facts hold decides (has:
// every one of these facts; lacks: none of these).
var rule = [...]struct {
	has, lacks Facts
	then       Outcome
}{
	{lacks: Found, then: New},
	{lacks: Live, then: New}, // a completed record past its tombstone counts as absent
	{lacks: Match, then: Conflict},
	{has: Completed | Expired, then: Gone},
	{has: Completed, then: Replay},
	{has: Own, then: Held}, // the caller's own claim, lapsed or not: nobody took it over
	{lacks: Lapsed, then: InFlight},
	{then: Reclaim},
}

// table is rule for every combination of facts.
var table = func() (t [all + 1]Outcome) {
	for f := range t {
		for _, l := range rule {
			if Facts(f)&l.has == l.has && Facts(f)&l.lacks == 0 {
				t[f] = l.then
				break
			}
		}
	}
	return t
}()

// Decide returns what a claim does on a key of facts f.
func Decide(f Facts) Outcome { return table[f&all] }

// SameRequest reports whether a record bound to fingerprint and
// workflowID belongs to a claim of reqFingerprint and reqWorkflowID: the
// same fingerprint, and the same workflow ID unless the claim names none.
// (The PostgreSQL backend writes the same in SQL: sameRequest in its
// sql.go.)
func SameRequest(fingerprint, workflowID, reqFingerprint, reqWorkflowID string) bool {
	return fingerprint == reqFingerprint && (reqWorkflowID == "" || reqWorkflowID == workflowID)
}
