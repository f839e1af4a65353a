package grpcidem

// Names on the wire, shared by the server and the client interceptors.
const (
	// DefaultMetadataKey is the request metadata key that carries an
	// idempotency key, unless ServerOptions names another.
	DefaultMetadataKey = "idempotency-key"
	// ReplayedKey is the response header metadata key set to "true" on a
	// replayed response: the handler did not run for this call.
	ReplayedKey = "idempotency-replayed"
	// ErrorDomain is the Domain of the errdetails.ErrorInfo the server
	// interceptor puts in the statuses it answers itself.
	ErrorDomain = "durable-go.github.io/idempotency"
)

// Reasons of the errdetails.ErrorInfo in the statuses the server
// interceptor answers itself (see the package documentation's table).
const (
	// ReasonKeyReused: the key was first used with another request
	// (another method or message); codes.FailedPrecondition. Not retryable
	// with this key.
	ReasonKeyReused = "IDEMPOTENCY_KEY_REUSED"
	// ReasonKeyInFlight: the key's first call is still running;
	// codes.Aborted with an errdetails.RetryInfo. Retry with the same key.
	ReasonKeyInFlight = "IDEMPOTENCY_KEY_IN_FLIGHT"
	// ReasonKeyMissing: the method requires a key and the call had none;
	// codes.InvalidArgument.
	ReasonKeyMissing = "IDEMPOTENCY_KEY_MISSING"
	// ReasonKeyMalformed: the key's metadata is not 1 to 255 visible ASCII
	// characters, or appears more than once; codes.InvalidArgument.
	ReasonKeyMalformed = "IDEMPOTENCY_KEY_MALFORMED"
	// ReasonOutcomeExpired: the key's call ran once, but its response is no
	// longer kept, only the key's tombstone; codes.FailedPrecondition. Not
	// retryable with this key.
	ReasonOutcomeExpired = "IDEMPOTENCY_OUTCOME_EXPIRED"
	// ReasonStoreUnavailable: the store could not be reached, or the
	// handler's response could not be stored; codes.Unavailable with an
	// errdetails.RetryInfo. Retry with the same key.
	ReasonStoreUnavailable = "IDEMPOTENCY_STORE_UNAVAILABLE"
)
