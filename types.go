package durable

import "github.com/durable-go/durable/contract"

// The record and request types are defined in package contract so that
// backends need not import this package; they are aliased here so users need
// only one import.
type (
	Scope          = contract.Scope
	Status         = contract.Status
	Workflow       = contract.Workflow
	Update         = contract.Update
	ListQuery      = contract.ListQuery
	Fence          = contract.Fence
	KeyRef         = contract.KeyRef
	ClaimRequest   = contract.ClaimRequest
	ClaimKind      = contract.ClaimKind
	Claim          = contract.Claim
	KeyState       = contract.KeyState
	KeyRecord      = contract.KeyRecord
	Outcome        = contract.Outcome
	Completion     = contract.Completion
	LeaseRequest   = contract.LeaseRequest
	Lease          = contract.Lease
	CleanupRequest = contract.CleanupRequest
	CleanupResult  = contract.CleanupResult
	Error          = contract.Error
	Code           = contract.Code
	Details        = contract.Details
)

// Statuses, claim kinds and key states, re-exported from package contract.
const (
	StatusPending   = contract.StatusPending
	StatusRunning   = contract.StatusRunning
	StatusSucceeded = contract.StatusSucceeded
	StatusFailed    = contract.StatusFailed
	StatusClosed    = contract.StatusClosed

	ClaimNew       = contract.ClaimNew
	ClaimReclaimed = contract.ClaimReclaimed
	ClaimInFlight  = contract.ClaimInFlight
	ClaimCompleted = contract.ClaimCompleted

	KeyClaimed   = contract.KeyClaimed
	KeyCompleted = contract.KeyCompleted
)

// Error sentinels for errors.Is, re-exported from package contract.
var (
	ErrNotFound         = contract.ErrNotFound
	ErrAlreadyExists    = contract.ErrAlreadyExists
	ErrConflict         = contract.ErrConflict
	ErrTerminal         = contract.ErrTerminal
	ErrKeyConflict      = contract.ErrKeyConflict
	ErrLeaseBusy        = contract.ErrLeaseBusy
	ErrFenced           = contract.ErrFenced
	ErrInvalidArgument  = contract.ErrInvalidArgument
	ErrUnavailable      = contract.ErrUnavailable
	ErrOutcomeUnknown   = contract.ErrOutcomeUnknown
	ErrSchemaMismatch   = contract.ErrSchemaMismatch
	ErrClosed           = contract.ErrClosed
	ErrUnimplemented    = contract.ErrUnimplemented
	ErrCanceled         = contract.ErrCanceled
	ErrPermissionDenied = contract.ErrPermissionDenied
	ErrMisconfigured    = contract.ErrMisconfigured
	ErrCorrupt          = contract.ErrCorrupt
)

// CodeOf returns the Code of err; see contract.CodeOf.
func CodeOf(err error) Code { return contract.CodeOf(err) }

// Retryable reports whether repeating the same call may succeed; see
// contract.Retryable.
func Retryable(err error) bool { return contract.Retryable(err) }
