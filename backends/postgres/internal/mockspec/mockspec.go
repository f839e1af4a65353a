// Package mockspec is the bridge between the postgres backend and its
// go-sqlmock helpers (package pgmock). The backend fills New and Names
// when it is initialized; pgmock asks them, for one operation and one
// outcome, which statements the backend sends and what the server answers.
//
// Everything pgmock registers comes from here, and everything here comes
// from the backend's one statement source (sql.go and the parameter
// builders of workflows.go, keys.go, leases.go, delete.go, list.go): the
// text of each statement for a schema, its arguments as the backend builds
// them from the request, and its rows as the inverse of the backend's own
// conversion of a row into a record. pgmock holds no SQL and knows no argument order.
package mockspec

import (
	"time"

	"github.com/durable-go/durable/contract"
)

// Statement is one statement the backend sends, on database/sql, and the
// server's answer to it.
type Statement struct {
	// Name is the statement's name in the backend's registry ("GetKey"),
	// or "SchemaObjects" for the catalog query of the schema check.
	Name string
	// SQL is the exact text sent.
	SQL string
	// Args are the arguments, as database/sql receives them (a time cut to
	// the microsecond, a nil []byte as nil), in order. An element may be a
	// placeholder: Now or NewToken. Empty: the statement takes none.
	Args []any
	// Columns and Rows are the result, each row in the SELECT list's order.
	// Rows is empty when the statement returns no row.
	Columns []string
	Rows    [][]any
	// Err, when set, is the driver's error for the statement instead of
	// rows, and Times says how often the backend sends it then (retries).
	Err   error
	Times int
	// Control, when set, makes this no statement but a transaction's
	// control: TxBegin, TxCommit or TxRollback (database/sql's BeginTx,
	// Commit, Rollback). Name, SQL, Args and rows are then empty.
	Control TxControl
}

// TxControl is the control of a transaction a Statement stands for.
type TxControl int

const (
	TxNone TxControl = iota
	TxBegin
	TxCommit
	TxRollback
)

// Now is the placeholder of the argument @now when the backend has an
// injected clock (Options.Clock): the argument is the clock's time at the
// call, cut to the microsecond. Without a clock @now is NULL (nil).
type Now struct{}

// NewToken is the placeholder of the token ClaimKey generates for a new
// claim: 32 random hex digits.
type NewToken struct{}

// HeldToken, given as the token of a Completion or of RenewKey and
// ReleaseKey, stands for the token of the claim that an earlier expected
// ClaimKey generated: the argument becomes the placeholder Held.
const HeldToken = "pgmock:held-token"

// Held is the placeholder of the argument that carries HeldToken.
type Held struct{}

// ClaimOutcome is what ClaimKey finds: a contract.ClaimKind, or
// ClaimKeyConflict.
type ClaimOutcome int

const (
	// ClaimKeyConflict: the key is bound to another request.
	ClaimKeyConflict ClaimOutcome = -1
	// ClaimOutcomeExpired: the key holds the tombstone of the same
	// request, its outcome's retention ended (contract.OutcomeExpired).
	ClaimOutcomeExpired ClaimOutcome = -2
)

// CompleteOutcome is what CompleteKey finds.
type CompleteOutcome int

const (
	// CompleteApplied: the outcome is stored.
	CompleteApplied CompleteOutcome = iota
	// CompleteReplayed: the claim was already completed with this token
	// (a retry after a lost reply): the stored record comes back.
	CompleteReplayed
	// CompleteStale: the token no longer holds the claim (Fenced).
	CompleteStale
	// CompleteFenceInvalid: the completion's fence is not valid (Fenced).
	CompleteFenceInvalid
)

// UpdateSeen is the record UpdateWorkflow's statement sees. Applied: the
// update applied and Record is the new record. Otherwise Found says
// whether the workflow exists, Record is the current one and FenceOK
// whether the update's fence (if any) held.
type UpdateSeen struct {
	Applied bool
	Found   bool
	FenceOK bool
	Record  contract.Workflow
}

// Gen gives the statements of each operation for one backend
// configuration. A nil pointer result means "no row". Every method panics
// when the outcome cannot happen for the request (a bug in the caller).
type Gen interface {
	// Tolerance is the backend's clock tolerance (what the Store's MinTTL
	// is computed from).
	Tolerance() time.Duration
	// Open is what building the backend sends when the schema records
	// version (dirty or not); nil for Migrate=off. It fails for a schema
	// that Migrate=auto would migrate (not a mockable sequence).
	Open(version int64, dirty bool) ([]Statement, error)

	CreateWorkflow(w contract.Workflow, created *time.Time) []Statement
	GetWorkflow(scope contract.Scope, id string, found *contract.Workflow) []Statement
	UpdateWorkflow(u contract.Update, seen UpdateSeen) []Statement
	ListWorkflows(q contract.ListQuery, page []contract.Workflow) []Statement

	// ClaimKey: with contended, the optimistic statement finds the key
	// changed on every attempt and ClaimKey decides in a transaction that
	// holds the key's row lock (begin, lock, the write if it takes the
	// key, commit or rollback). A request without a Token has the
	// placeholder NewToken in its first statement and Held in the later
	// ones.
	ClaimKey(req contract.ClaimRequest, o ClaimOutcome, rec contract.KeyRecord, contended bool) []Statement
	CompleteKey(c contract.Completion, o CompleteOutcome, rec contract.KeyRecord) []Statement
	// CompleteKeyTx is the statement of CompleteKeyTx inside a
	// transaction (the transaction's begin and end are the caller's: see
	// BeginTx).
	CompleteKeyTx(c contract.Completion, o CompleteOutcome, rec contract.KeyRecord) []Statement
	// BeginTx is what BeginTx sends: a begin.
	BeginTx() []Statement
	RenewKey(k contract.KeyRef, token string, ttl time.Duration, renewed *contract.KeyRecord) []Statement
	ReleaseKey(k contract.KeyRef, token string, released bool) []Statement
	GetKey(k contract.KeyRef, found *contract.KeyRecord) []Statement

	AcquireLease(req contract.LeaseRequest, granted *contract.Lease) []Statement
	// AcquirePermit: granted is the permit granted (its Resource names
	// the permit), nil when every permit is held.
	AcquirePermit(req contract.PermitRequest, granted *contract.Lease) []Statement
	RenewLease(l contract.Lease, ttl time.Duration, renewed *contract.Lease) []Statement
	ReleaseLease(l contract.Lease, released bool) []Statement
	GetLease(scope contract.Scope, resource string, found *contract.Lease) []Statement
	FenceTx(scope contract.Scope, fence *contract.Fence, valid bool) []Statement

	Cleanup(req contract.CleanupRequest, res contract.CleanupResult) []Statement
	CountCleanup(req contract.CleanupRequest, res contract.CleanupResult) []Statement
	DeleteRecord(kind contract.RecordKind, scope contract.Scope, id string, found bool) []Statement

	// ListKeys and ListLeases: page is the records the statement returns,
	// in order (the query's Scope, after q.After, at most q.Limit, and for
	// ListKeys the state asked for, if any).
	ListKeys(q contract.KeyListQuery, page []contract.KeyRecord) []Statement
	ListLeases(q contract.LeaseListQuery, page []contract.Lease) []Statement

	// Fail returns s failing with the driver error err, Times set to how
	// often the backend sends it then.
	Fail(s Statement, err error) Statement
}

// Filled by the postgres package when it is initialized.
var (
	// New returns the Gen of a backend built with opts, a
	// postgres.Options, or the error building it would return.
	New func(opts any) (Gen, error)
	// Names lists the name of every statement the backend registers.
	Names func() []string
)
