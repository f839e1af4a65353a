package contract

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// Code classifies an error. Every error a Store returns carries exactly one
// Code; use [CodeOf] to read it or errors.Is with one of the Err* sentinels.
type Code int

const (
	// Unknown is an error that was not classified. It is never retried.
	Unknown Code = iota
	// NotFound: the record does not exist (or is outside the caller's scope).
	NotFound
	// AlreadyExists: a record with that identity already exists.
	AlreadyExists
	// Conflict: a compare-and-set precondition (status or revision) did not
	// hold. The error's Details say what was expected and what was found.
	Conflict
	// Terminal: the workflow is in a terminal status and cannot move.
	Terminal
	// KeyConflict: an idempotency key is bound to another request
	// (another fingerprint or another workflow id).
	KeyConflict
	// LeaseBusy: another owner (or the same owner under another grant)
	// holds the lease.
	LeaseBusy
	// Fenced: the caller's lease, claim token or fence is no longer valid.
	// The write was not applied and never will be under that token.
	Fenced
	// InvalidArgument: the input failed validation; nothing reached storage.
	InvalidArgument
	// Unavailable: the backend could not be reached or refused the request
	// before applying it. The write was certainly not applied.
	Unavailable
	// OutcomeUnknown: the connection failed after the request was sent, so
	// the write may or may not have been applied. Every write in the
	// contract is conditional, so retrying it never applies it twice; but
	// only some retries tell the caller which happened:
	//
	//   - CompleteKey: a retry with the same token returns the stored record
	//     if the first applied (Fenced means the claim was lost).
	//   - RenewKey, RenewLease, RenewLeases: a retry renews again, to now +
	//     ttl; either way the claim or lease is renewed or Fenced.
	//   - ReleaseKey, ReleaseLease: a retry returns false if the first
	//     applied (or the record was lost otherwise); it is gone either way.
	//   - Cleanup: a retry deletes what is left; the counts of the lost
	//     pass are lost.
	//   - UpdateWorkflow: a retry gets Conflict if the first applied, as it
	//     would after another writer's update; GetWorkflow tells, when the
	//     update set a RequestID of the caller's (its RequestID and
	//     Revision). A terminal update retried returns the record unchanged.
	//   - CreateWorkflow: a retry gets AlreadyExists, as it would if
	//     another caller had created the workflow; GetWorkflow tells by the
	//     RequestID, when the caller set one.
	//   - ClaimKey: a claim that applied holds the key under a token the
	//     caller never saw. A retry with the same request gets ClaimInFlight
	//     (it cannot tell the claim is its own, nor complete it) until the
	//     claim expires beyond the tolerance, then ClaimReclaimed.
	//   - AcquireLease: a grant that applied holds the lease under a token
	//     the caller never saw. A retry gets LeaseBusy (even for the same
	//     owner); GetLease shows whether the caller's Owner holds it, with
	//     its token; otherwise the lease frees once it expires beyond the
	//     tolerance.
	OutcomeUnknown
	// SchemaMismatch: the storage schema is missing or newer than the code.
	SchemaMismatch
	// Closed: the Store or backend has been closed.
	Closed
	// Unimplemented: the backend does not support the operation.
	Unimplemented
	// Canceled: the caller's context ended before the operation was sent.
	// errors.Is(err, context.Canceled) or context.DeadlineExceeded also holds.
	Canceled
	// PermissionDenied: the backend refused the credentials or the role
	// lacks a privilege the operation needs (wrong password, unknown role,
	// missing grants on the schema). Retrying will not help until an
	// operator fixes the credentials or grants; the message says which.
	PermissionDenied
	// Misconfigured: the configuration points at something that does not
	// exist or does not match the server (a missing database, TLS required
	// by one side and refused by the other, an unusable parameter).
	// Retrying will not help until the configuration is fixed.
	// AcquireLease returns it, with ErrTokensExhausted in the chain, when
	// the fencing-token counter is at its maximum.
	Misconfigured
	// Corrupt: a stored record cannot be decoded (for example a damaged
	// column written outside durable). The operation fails closed for that
	// record until an operator inspects and deletes it (durable inspect,
	// durable delete); other records are unaffected.
	Corrupt
	// InFlight: another caller holds a live claim on the idempotency key
	// (Store.Do without waiting or after its wait; Store.WaitKey after its
	// max wait). Nothing ran and nothing was stored. Retrying helps only
	// after the other caller finishes or its claim expires.
	InFlight
	// OutcomeExpired: the idempotency key was completed, but its outcome's
	// retention (Completion.Retain) has ended: only a tombstone of the key
	// is left (fingerprint, workflow ID, completion time and status code,
	// until KeyRecord.ForgetAt). ClaimKey of the same request returns it
	// instead of running the request a second time. Nothing can be
	// replayed and the request must not run again; retrying does not help
	// until the tombstone ends, when the key is free again.
	OutcomeExpired
)

var codeNames = [...]string{
	Unknown:          "unknown",
	NotFound:         "not found",
	AlreadyExists:    "already exists",
	Conflict:         "conflict",
	Terminal:         "terminal",
	KeyConflict:      "key conflict",
	LeaseBusy:        "lease busy",
	Fenced:           "fenced",
	InvalidArgument:  "invalid argument",
	Unavailable:      "unavailable",
	OutcomeUnknown:   "outcome unknown",
	SchemaMismatch:   "schema mismatch",
	Closed:           "closed",
	Unimplemented:    "unimplemented",
	Canceled:         "canceled",
	PermissionDenied: "permission denied",
	Misconfigured:    "misconfigured",
	Corrupt:          "corrupt record",
	InFlight:         "in flight",
	OutcomeExpired:   "outcome expired",
}

// String returns a short lower-case name such as "not found".
func (c Code) String() string {
	if c >= 0 && int(c) < len(codeNames) {
		return codeNames[c]
	}
	return fmt.Sprintf("code(%d)", int(c))
}

// Details explains a failed compare-and-set. Zero fields were not checked or
// are not known.
type Details struct {
	ExpectedStatus   Status
	ActualStatus     Status
	ExpectedRevision int64
	ActualRevision   int64
}

// Error is the error type of the whole contract. Backends return *Error with
// a Code; the Store fills in Op and never wraps an *Error twice.
//
// Error() is safe to log: it contains the operation, the code, a fixed
// message and, for conflicts, the expected and actual status and revision.
// It never contains a DSN, a password, SQL text, parameter values or raw
// driver text. The underlying cause stays reachable through errors.As and
// errors.Unwrap.
type Error struct {
	Code    Code
	Op      string   // the operation, e.g. "UpdateWorkflow"
	Msg     string   // a fixed, non-sensitive message
	Details *Details // set for Conflict
	Err     error    // the cause, if any; not printed by Error()
	// Record, for Corrupt, names the record that cannot be decoded where
	// the backend knows it, so that an operator's tool can offer to
	// delete it (DeleteRecord): a list fails its whole page on such a
	// record, and would otherwise hide which one it was. Not printed by
	// Error(): an id may be a caller's key.
	Record *RecordRef
}

// Error formats the error without sensitive data.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("durable: ")
	if e.Op != "" {
		b.WriteString(e.Op)
		b.WriteString(": ")
	}
	b.WriteString(e.Code.String())
	if e.Msg != "" {
		b.WriteString(": ")
		b.WriteString(e.Msg)
	}
	if d := e.Details; d != nil {
		var parts []string
		if d.ExpectedStatus != "" || d.ActualStatus != "" {
			parts = append(parts, fmt.Sprintf("status expected %q, actual %q", d.ExpectedStatus, d.ActualStatus))
		}
		if d.ExpectedRevision != 0 || d.ActualRevision != 0 {
			parts = append(parts, fmt.Sprintf("revision expected %d, actual %d", d.ExpectedRevision, d.ActualRevision))
		}
		if len(parts) > 0 {
			b.WriteString(" (")
			b.WriteString(strings.Join(parts, "; "))
			b.WriteString(")")
		}
	}
	// Context errors carry no user data and tell the reader why.
	if errors.Is(e.Err, context.Canceled) {
		b.WriteString(": context canceled")
	} else if errors.Is(e.Err, context.DeadlineExceeded) {
		b.WriteString(": context deadline exceeded")
	}
	return b.String()
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is the sentinel of e's code, so that
// errors.Is(err, contract.ErrConflict) works on any *Error with Code Conflict.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	if !ok {
		return false
	}
	return t.sentinel() && t.Code == e.Code
}

func (e *Error) sentinel() bool {
	return e.Op == "" && e.Msg == "" && e.Err == nil && e.Details == nil
}

// Sentinels for errors.Is. Each matches every *Error with the same Code.
var (
	ErrUnknown          = &Error{Code: Unknown}
	ErrNotFound         = &Error{Code: NotFound}
	ErrAlreadyExists    = &Error{Code: AlreadyExists}
	ErrConflict         = &Error{Code: Conflict}
	ErrTerminal         = &Error{Code: Terminal}
	ErrKeyConflict      = &Error{Code: KeyConflict}
	ErrLeaseBusy        = &Error{Code: LeaseBusy}
	ErrFenced           = &Error{Code: Fenced}
	ErrInvalidArgument  = &Error{Code: InvalidArgument}
	ErrUnavailable      = &Error{Code: Unavailable}
	ErrOutcomeUnknown   = &Error{Code: OutcomeUnknown}
	ErrSchemaMismatch   = &Error{Code: SchemaMismatch}
	ErrClosed           = &Error{Code: Closed}
	ErrUnimplemented    = &Error{Code: Unimplemented}
	ErrCanceled         = &Error{Code: Canceled}
	ErrPermissionDenied = &Error{Code: PermissionDenied}
	ErrMisconfigured    = &Error{Code: Misconfigured}
	ErrCorrupt          = &Error{Code: Corrupt}
	ErrInFlight         = &Error{Code: InFlight}
	ErrOutcomeExpired   = &Error{Code: OutcomeExpired}
)

// ErrTokensExhausted is in the chain of the error AcquireLease returns
// when the backend can issue no fencing token greater than every token it
// issued before: its counter or sequence is at its maximum (math.MaxInt64
// on most backends). Tokens never wrap, so no lease can be granted on that
// storage (or, for a backend that counts per resource, on that resource)
// again. The error's Code is Misconfigured: retrying does not help.
// Test for it with errors.Is(err, contract.ErrTokensExhausted).
//
// In practice only a counter set near its maximum outside durable reaches
// this. What an operator can do: the counter must not be lowered while a
// token it issued may still be presented (a live lease) or compared (a
// system outside durable that keeps the highest token it has seen). Move
// the lease users to new storage (a new schema, database or key prefix)
// once every lease on the old one has ended; or, when no system outside
// durable compares tokens, stop every lease user, let every lease expire,
// delete the lease records and restart the counter below.
var ErrTokensExhausted = errors.New("no greater fencing token can be issued")

// TokensExhausted returns the error of an AcquireLease that found the
// token counter at its maximum: Code Misconfigured, with
// ErrTokensExhausted and cause (if any) in its chain.
func TokensExhausted(cause error) *Error {
	err := ErrTokensExhausted
	if cause != nil {
		err = errors.Join(ErrTokensExhausted, cause)
	}
	return &Error{Code: Misconfigured, Msg: "the fencing-token counter is at its maximum and tokens never wrap: " +
		"no lease can be granted until an operator moves lease users to new storage (see contract.ErrTokensExhausted)", Err: err}
}

// Errorf returns an *Error with the given code and a fixed message. The
// message must not contain user data; pass the cause as err instead.
func Errorf(code Code, err error, format string, args ...any) *Error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...), Err: err}
}

// CodeOf returns the Code of err: the code of the first *Error in its chain,
// Canceled for a bare context error, Unknown for anything else and for nil.
func CodeOf(err error) Code {
	if err == nil {
		return Unknown
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return Canceled
	}
	return Unknown
}

// Retryable reports whether repeating the same call unchanged may succeed:
// true for Unavailable and OutcomeUnknown. Conflict needs a fresh read and
// LeaseBusy needs the lease to expire first, so neither is retryable as is.
func Retryable(err error) bool {
	switch CodeOf(err) {
	case Unavailable, OutcomeUnknown:
		return true
	}
	return false
}

// CorruptRecord returns the record a Corrupt error names (Error.Record),
// if err is one that names it.
func CorruptRecord(err error) (RecordRef, bool) {
	var e *Error
	if errors.As(err, &e) && e.Code == Corrupt && e.Record != nil {
		return *e.Record, true
	}
	return RecordRef{}, false
}
