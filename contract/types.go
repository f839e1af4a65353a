package contract

import "time"

// Scope is a tenant namespace. "" is the unscoped namespace. Records in one
// scope are invisible to every other scope.
type Scope string

// Status is a workflow status: a lower-case identifier. The three statuses
// Succeeded, Failed and Closed are terminal; every other status, including
// application-defined ones, is not.
type Status string

// Well-known statuses.
const (
	StatusPending   Status = "pending"
	StatusRunning   Status = "running"
	StatusSucceeded Status = "succeeded"
	StatusFailed    Status = "failed"
	StatusClosed    Status = "closed"
)

// TerminalStatuses lists the terminal statuses in a stable order.
var TerminalStatuses = []Status{StatusSucceeded, StatusFailed, StatusClosed}

// Terminal reports whether s is final: once a workflow reaches it, it never
// changes status again.
func (s Status) Terminal() bool {
	switch s {
	case StatusSucceeded, StatusFailed, StatusClosed:
		return true
	}
	return false
}

// Workflow is a durable snapshot of one workflow.
type Workflow struct {
	Scope     Scope     // the tenant namespace ("" = unscoped); the record is invisible in every other scope
	ID        string    // an identifier: 1–128 bytes of [A-Za-z0-9_.:-], starting with a letter or digit
	RequestID string    // optional identifier: the request that last wrote the record
	Status    Status    // [a-z][a-z0-9_]{0,63}; "" on create means pending
	Revision  int64     // 1 on create, +1 on every applied update
	Snapshot  []byte    // opaque, up to the Store's limit (1 MiB by default); round-trips byte for byte (a zero-length one reads back as nil or empty)
	CreatedAt time.Time // store clock, UTC, microseconds
	UpdatedAt time.Time // store clock, UTC, microseconds
}

// Update is one compare-and-set on a workflow. It applies only if the record
// exists, its status equals ExpectStatus, ExpectRevision is 0 or equals its
// revision, its status is not terminal, and Fence (if set) is valid.
type Update struct {
	Scope          Scope  // the workflow's scope
	ID             string // the workflow's ID
	ExpectStatus   Status // the status the record must have now (required; a terminal status never matches)
	ExpectRevision int64  // the revision the record must have now; 0 = any revision
	Fence          *Fence // optional: the write is rejected unless the fence is valid
	Status         Status // the new status
	RequestID      string // the new request id ("" keeps none)
	Snapshot       []byte // the new snapshot
}

// ListQuery selects workflows in one scope, ordered by ID.
type ListQuery struct {
	Scope  Scope  // the one scope listed
	Status Status // optional filter
	After  string // keyset cursor: the last ID of the previous page ("" = from the start)
	Limit  int    // page size, 1–1000; 0 means 100 (filled by the Store)
}

// KeyListQuery selects idempotency keys in one scope, ordered by Key.
type KeyListQuery struct {
	Scope Scope    // the one scope listed
	State KeyState // optional filter: KeyClaimed (keys in flight, or abandoned), KeyCompleted (outcome kept) or KeyExpired (tombstones)
	After string   // keyset cursor: the last Key of the previous page ("" = from the start)
	Limit int      // page size, 1–1000; 0 means 100 (filled by the Store)
}

// LeaseListQuery selects leases in one scope, ordered by Resource.
type LeaseListQuery struct {
	Scope Scope  // the one scope listed
	Held  bool   // only leases whose ExpiresAt is after now (store clock); false lists expired ones too
	After string // keyset cursor: the last Resource of the previous page ("" = from the start)
	Limit int    // page size, 1–1000; 0 means 100 (filled by the Store)
}

// Fence names a lease grant. A fence is valid iff the lease on Resource (in
// the record's scope) is held by Owner with Token and expires more than the
// clock tolerance from now.
type Fence struct {
	Resource string // the leased resource, in the scope of the record written
	Owner    string // the owner the lease must still be held by
	Token    int64  // the fencing token of the grant (Lease.Token)
}

// KeyRef names an idempotency key.
type KeyRef struct {
	Scope Scope  // the tenant namespace ("" = unscoped)
	Key   string // an identifier: 1–128 bytes of [A-Za-z0-9_.:-], starting with a letter or digit
}

// ClaimRequest asks to claim an idempotency key for one request.
type ClaimRequest struct {
	KeyRef                    // the key claimed
	Fingerprint string        // identifies the request, 1–256 bytes of printable ASCII; another fingerprint → KeyConflict
	WorkflowID  string        // optional identifier: binds the key to a workflow
	TTL         time.Duration // how long the claim stays live without renewal: at least Store.MinTTL() (1 s plus the clock tolerance, which a takeover also waits out), at most 24 h; 0 means the Store's default (1 min)
	// Token, when set, is the caller's own token for the claim (16–128
	// bytes of printable ASCII, 0x21–0x7e): fresh and random for each
	// logical call, and reused by that call's retries. Empty: the backend
	// chooses a random token. A ClaimKey retried after a lost reply (an
	// OutcomeUnknown) with the same key, fingerprint, workflow ID and token
	// finds its own claim and gets it back as the caller's (ClaimNew, the
	// lease set to now + TTL) instead of ClaimInFlight, as long as nobody
	// has reclaimed it and it is not completed. Tokens are compared byte
	// for byte.
	Token string
}

// ClaimKind says what ClaimKey found.
type ClaimKind int

const (
	// ClaimNew: the key was free, or held by the caller's own claim (the
	// same ClaimRequest.Token, after a lost reply); the caller holds the
	// claim and must complete or release it.
	ClaimNew ClaimKind = iota + 1
	// ClaimReclaimed: an abandoned claim (lease expired beyond the clock
	// tolerance) was taken over; the old token is stale.
	ClaimReclaimed
	// ClaimInFlight: another caller holds a live claim; no token is given.
	ClaimInFlight
	// ClaimCompleted: the key has a stored outcome; replay it.
	ClaimCompleted
)

func (k ClaimKind) String() string {
	switch k {
	case ClaimNew:
		return "new"
	case ClaimReclaimed:
		return "reclaimed"
	case ClaimInFlight:
		return "in-flight"
	case ClaimCompleted:
		return "completed"
	}
	return "invalid"
}

// Owned reports whether the caller holds the claim and must run the work.
func (k ClaimKind) Owned() bool { return k == ClaimNew || k == ClaimReclaimed }

// Claim is the result of ClaimKey.
type Claim struct {
	Kind   ClaimKind // what ClaimKey found
	Token  string    // set for ClaimNew and ClaimReclaimed only: pass it to CompleteKey, RenewKey or ReleaseKey
	Record KeyRecord // the key's record: the caller's fresh claim, another caller's live claim or the completed outcome
}

// KeyState is the state of an idempotency record.
type KeyState string

const (
	KeyClaimed   KeyState = "claimed"   // a request holds the key and has not completed it
	KeyCompleted KeyState = "completed" // the key has a stored outcome to replay
	// KeyExpired: the key was completed and its outcome's retention ended;
	// a tombstone keeps the key bound to its request until ForgetAt. The
	// record's Outcome holds the status code alone (Code), nothing to
	// replay; ClaimKey of the same request is OutcomeExpired.
	KeyExpired KeyState = "expired"
)

// KeyRecord is the stored state of an idempotency key.
type KeyRecord struct {
	KeyRef                // the key
	Fingerprint string    // the fingerprint of the request that claimed it
	WorkflowID  string    // the workflow the key is bound to, if any
	State       KeyState  // claimed or completed
	LeaseUntil  time.Time // claimed: when the claim lease ends
	Outcome     *Outcome  // completed: the stored outcome
	CreatedAt   time.Time // when the key was first claimed (store clock, UTC, microseconds)
	CompletedAt time.Time // zero while claimed
	ExpiresAt   time.Time // completed: when the outcome's retention ends (then only the tombstone is left)
	ForgetAt    time.Time // completed or expired: when the tombstone ends and the key is free again (never before ExpiresAt)
}

// Outcome is what a completed key replays. Every read of it (CompleteKey's
// result, GetKey, ClaimKey's replay, WaitKey, ListKeys) returns the same
// bytes, with one rule for nil and empty:
//
//   - Header: names, values, their order and duplicates read back as
//     written; a name with a nil or empty value list reads back, with a nil
//     list. A nil Header reads back as nil; an empty, non-nil one with no
//     names, as nil or empty (test len(Header) == 0).
//   - Body: a zero-length Body reads back with length zero, as nil or
//     empty (test len(Body) == 0).
//
// The conformance suite checks this rule
// (Values/EmptyHeadersAndBodiesReadBackByTheNilRule).
type Outcome struct {
	Code   int                 // e.g. an HTTP status
	Header map[string][]string // e.g. selected response headers
	Body   []byte              // e.g. the response body; replayed byte for byte
	Ref    string              // e.g. the id of a created resource
}

// Completion stores the outcome of a claimed key.
type Completion struct {
	KeyRef                // the key completed
	Token   string        // the claim's token, from ClaimKey
	Outcome Outcome       // Body up to the Store's limit (1 MiB by default), Header up to 64 KiB, Ref up to 1024 bytes
	Retain  time.Duration // how long the outcome is kept (ExpiresAt = CompletedAt + Retain); 0 means the Store's retention (24 h)
	// Tombstone is how long the key stays bound to its request after
	// completion (ForgetAt = CompletedAt + max(Retain, Tombstone)): between
	// ExpiresAt and ForgetAt only a tombstone is kept and a late retry gets
	// OutcomeExpired instead of a second run. 0 means the Store's
	// (WithTombstoneRetention, 7 days).
	Tombstone time.Duration
	Fence     *Fence // optional: reject the completion unless the fence is valid
}

// LeaseRequest asks for a lease on a resource.
type LeaseRequest struct {
	Scope    Scope         // the tenant namespace ("" = unscoped)
	Resource string        // an identifier: what the lease is on
	Owner    string        // an identifier: who holds it (the same owner cannot hold it twice at once)
	TTL      time.Duration // how long the lease lasts without renewal: at least Store.MinTTL() (1 s plus the clock tolerance, which a takeover also waits out), at most 24 h; 0 means the Store's default (30 s)
	Value    string        // optional: stored with the grant and returned with it (GetLease, ListLeases, RenewLease, observers), any bytes, at most MaxLeaseValueBytes
}

// Lease is a granted lease. Token is a fencing token: strictly greater than
// every token ever issued for the resource.
type Lease struct {
	Scope      Scope     // the scope of the request
	Resource   string    // what the lease is on
	Owner      string    // who holds it
	Token      int64     // the fencing token: unchanged by renewal, greater after every new grant
	AcquiredAt time.Time // when this grant began (store clock, UTC, microseconds)
	ExpiresAt  time.Time // when it ends unless renewed; another owner can take over only after ExpiresAt plus the clock tolerance
	Value      string    // the grant's LeaseRequest.Value, byte for byte, unchanged by renewal
}

// Fence returns the fence that proves this grant in a fenced write.
func (l Lease) Fence() *Fence {
	return &Fence{Resource: l.Resource, Owner: l.Owner, Token: l.Token}
}

// CleanupRequest bounds one cleanup pass.
type CleanupRequest struct {
	TerminalAge time.Duration // terminal workflows not updated for this long are deleted (not negative)
	Limit       int           // at most this many records of each kind are deleted, 1–100000; 0 means 1000
}

// CleanupResult counts what one cleanup pass deleted.
type CleanupResult struct {
	Workflows int  // terminal workflows older than TerminalAge
	Keys      int  // tombstones past ForgetAt and claims expired by more than the clock tolerance (deleted)
	Outcomes  int  // completed keys past ExpiresAt whose outcome was dropped (each leaves its tombstone until ForgetAt); 0 on a backend whose storage drops them by itself
	Leases    int  // leases expired by more than the clock tolerance
	More      bool // some kind hit Limit: call again
}
