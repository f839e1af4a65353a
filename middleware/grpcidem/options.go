package grpcidem

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/renewal"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// Defaults of [ServerOptions]. The claim TTL and the retention default to
// the Store's (durable.WithDefaultTTLs, durable.WithKeyRetention).
const (
	DefaultRetryAfter   = time.Second
	DefaultMaxBody      = 1 << 20 // bytes; the Store's default limit
	DefaultStoreTimeout = 10 * time.Second
	// MaxKeyLength is the longest key accepted, in characters.
	MaxKeyLength = 255
	// maxHeaderBytes is the Store's limit on an outcome's headers.
	maxHeaderBytes = 64 << 10
)

// DefaultStoreCode reports whether a call that ended with code is stored for
// replay. Stored: OK and the codes that say the caller is at fault, which a
// retry of the same request would meet again: InvalidArgument, NotFound,
// AlreadyExists, PermissionDenied, FailedPrecondition, OutOfRange,
// Unimplemented, Unauthenticated. Not stored, so the claim is released and
// a retry runs the handler again: the transient and server-side codes
// (Unknown, Internal, Unavailable, DeadlineExceeded, ResourceExhausted,
// Aborted, DataLoss) and Canceled (the call was given up; whatever the
// handler did not finish may be done by a retry).
func DefaultStoreCode(c codes.Code) bool {
	switch c {
	case codes.OK, codes.InvalidArgument, codes.NotFound, codes.AlreadyExists,
		codes.PermissionDenied, codes.FailedPrecondition, codes.OutOfRange,
		codes.Unimplemented, codes.Unauthenticated:
		return true
	}
	return false
}

// ServerOptions configures [UnaryServerInterceptor]. The zero value is
// usable: every zero field means its default.
type ServerOptions struct {
	// MetadataKey is the request metadata key that carries the idempotency
	// key (default "idempotency-key"). It is matched case-insensitively, as
	// gRPC metadata keys are.
	MetadataKey string
	// Required makes a call without a key fail with InvalidArgument. By
	// default such a call passes through to the handler unprotected.
	Required bool
	// Methods lists the full method names ("/pkg.Service/Method") the
	// interceptor applies to (nil means every unary method). Calls of other
	// methods pass through untouched, key or not.
	Methods []string
	// Scope returns the tenant a call belongs to (default "" for every
	// call). Keys of one scope never replay in another. An invalid scope
	// fails the call with Internal.
	Scope func(ctx context.Context, fullMethod string) durable.Scope
	// Fingerprint identifies the request a key was first used with; the key
	// reused with another fingerprint gets FailedPrecondition (reason
	// IDEMPOTENCY_KEY_REUSED). The default is [DefaultFingerprint]: the full
	// method and the request message's deterministic encoding.
	Fingerprint func(fullMethod string, req proto.Message) (string, error)
	// ClaimTTL is how long a claim stays live without renewal (default: the
	// Store's default claim TTL).
	ClaimTTL time.Duration
	// RenewEvery is how often the claim is renewed while the handler runs
	// (default ClaimTTL/3).
	RenewEvery time.Duration
	// Retention is how long a response is kept for replay (default: the
	// Store's key retention).
	Retention time.Duration
	// WaitInFlight is how long a call waits for the first call with the
	// same key to finish, then replays its response. The default, 0,
	// answers Aborted (reason IDEMPOTENCY_KEY_IN_FLIGHT) at once; so does a
	// call still waiting after WaitInFlight.
	WaitInFlight time.Duration
	// RetryAfter is the delay of the errdetails.RetryInfo in Aborted and
	// Unavailable statuses (default 1 s).
	RetryAfter time.Duration
	// StoreHeader and StoreTrailer list the response header and trailer
	// metadata keys stored and replayed (default none). Other metadata the
	// handler sets is sent on the first call only.
	StoreHeader, StoreTrailer []string
	// StoreCode reports whether a call that ended with a code is stored
	// for replay, or its claim released so that a retry runs the handler
	// again (default [DefaultStoreCode]).
	StoreCode func(codes.Code) bool
	// MaxBody is the largest encoded response stored: the response
	// message, or the status with its details (default: 1 MiB or the
	// Store's limit, whichever is smaller; above the Store's limit is an
	// error). A larger response is sent, not stored, and its claim
	// released, so a retry runs the handler again; this is logged.
	MaxBody int
	// StoreTimeout bounds each phase in which a call waits for the store
	// (default 10 s): claiming the key, then storing the response or
	// releasing the claim. When it passes the call gets Unavailable.
	StoreTimeout time.Duration
	// FailOpen runs the handler unprotected when the store is unavailable.
	// By default the call fails with Unavailable (fail closed). It cannot
	// be combined with Transactional.
	FailOpen bool
	// Transactional stores each response in the same transaction as the
	// handler's effects (durable.DoTx): the handler finds the transaction
	// with [TxFrom] or [Tx] and writes through it; the interceptor stores
	// the response in it, commits, and only then replies. It needs a
	// backend with shared transactions (PostgreSQL, SQLite, Redis);
	// UnaryServerInterceptor fails with Code Unimplemented on others.
	Transactional bool
	// Types resolves the stored response's message type on replay
	// (default protoregistry.GlobalTypes, where generated types register
	// themselves). A response whose type it does not know is not stored.
	Types protoregistry.MessageTypeResolver
	// Logger receives warnings about responses not stored and store
	// failures (default: discard). Entries never contain keys or request
	// data.
	Logger *slog.Logger
}

type serverConfig struct {
	store         *durable.Store
	key           string
	required      bool
	methods       map[string]bool // nil: every method
	scope         func(context.Context, string) durable.Scope
	fingerprint   func(string, proto.Message) (string, error)
	ttl           time.Duration
	do            durable.DoOptions
	storeHeader   []string
	storeTrailer  []string
	storeCode     func(codes.Code) bool
	maxBody       int
	failOpen      bool
	transactional bool
	types         protoregistry.MessageTypeResolver
	log           *slog.Logger
	st            statuses
}

func invalidOption(msg string) error {
	return &contract.Error{Code: contract.InvalidArgument, Op: "grpcidem.UnaryServerInterceptor", Msg: msg}
}

func newServerConfig(store *durable.Store, o ServerOptions) (*serverConfig, error) {
	if store == nil {
		return nil, invalidOption("store must not be nil")
	}
	c := &serverConfig{
		store: store, required: o.Required, scope: o.Scope, fingerprint: o.Fingerprint,
		ttl: o.ClaimTTL, storeCode: o.StoreCode, maxBody: o.MaxBody, failOpen: o.FailOpen,
		transactional: o.Transactional, types: o.Types, log: o.Logger,
	}
	if c.transactional {
		if c.failOpen {
			return nil, invalidOption("FailOpen cannot be combined with Transactional: the handler's transaction comes from the store")
		}
		if !store.CanCompleteInTx() {
			return nil, &contract.Error{Code: contract.Unimplemented, Op: "grpcidem.UnaryServerInterceptor",
				Msg: "Transactional needs a store whose backend can complete keys in the caller's transaction (contract.TxCompleter: PostgreSQL, SQLite, Redis); this one cannot (memory, etcd): leave Transactional off there"}
		}
	}
	var ok bool
	if c.key, ok = metadataKey(o.MetadataKey); !ok {
		return nil, invalidOption("metadata key must be a valid gRPC metadata key (0-9 a-z - _ .), not binary (-bin) nor reserved (grpc-)")
	}
	if o.Methods != nil {
		c.methods = make(map[string]bool, len(o.Methods))
		for _, m := range o.Methods {
			if !strings.HasPrefix(m, "/") || strings.Count(m, "/") != 2 {
				return nil, invalidOption("methods must be full method names: /package.Service/Method")
			}
			c.methods[m] = true
		}
	}
	if c.scope == nil {
		c.scope = func(context.Context, string) durable.Scope { return "" }
	}
	if c.fingerprint == nil {
		c.fingerprint = DefaultFingerprint
	}
	if c.ttl == 0 {
		c.ttl, _ = store.DefaultTTLs()
	}
	if c.ttl < store.MinTTL() || c.ttl > durable.MaxTTL {
		return nil, invalidOption("claim TTL (ClaimTTL, or the store's default claim TTL) must be within the store's minimum (" + store.MinTTL().String() + ") and 24h")
	}
	every, ok := renewal.Period(c.ttl, o.RenewEvery, store.ClockTolerance())
	if !ok {
		return nil, invalidOption("renew period must be positive and shorter than the claim TTL minus the clock tolerance")
	}
	c.do.RenewEvery = every
	c.do.Retain = o.Retention
	if c.do.Retain < 0 {
		return nil, invalidOption("retention must be positive")
	}
	st := o.StoreTimeout
	if st == 0 {
		st = DefaultStoreTimeout
	}
	if st < 0 {
		return nil, invalidOption("store timeout must not be negative")
	}
	c.do.CallTimeout, c.do.CompleteWithin = st, st
	switch {
	case o.WaitInFlight < 0:
		return nil, invalidOption("wait for in-flight calls must not be negative")
	case o.WaitInFlight > 0:
		c.do.Wait, c.do.MaxWait = true, o.WaitInFlight
	}
	ra := o.RetryAfter
	if ra == 0 {
		ra = DefaultRetryAfter
	}
	if ra < 0 {
		return nil, invalidOption("retry after must not be negative")
	}
	for _, k := range o.StoreHeader {
		if !validMetadataKey(strings.ToLower(k)) {
			return nil, invalidOption("stored header keys must be valid metadata keys")
		}
		c.storeHeader = append(c.storeHeader, strings.ToLower(k))
	}
	for _, k := range o.StoreTrailer {
		if !validMetadataKey(strings.ToLower(k)) {
			return nil, invalidOption("stored trailer keys must be valid metadata keys")
		}
		c.storeTrailer = append(c.storeTrailer, strings.ToLower(k))
	}
	if c.storeCode == nil {
		c.storeCode = DefaultStoreCode
	}
	if c.maxBody == 0 {
		c.maxBody = min(DefaultMaxBody, store.MaxBodyBytes())
	}
	if c.maxBody < 0 {
		return nil, invalidOption("MaxBody must be positive")
	}
	if c.maxBody > store.MaxBodyBytes() {
		return nil, invalidOption("MaxBody exceeds the Store's body limit (durable.WithMaxBodyBytes)")
	}
	if c.types == nil {
		c.types = protoregistry.GlobalTypes
	}
	if c.log == nil {
		c.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	c.st = newStatuses(ra)
	return c, nil
}

func (c *serverConfig) applies(method string) bool {
	return c.methods == nil || c.methods[method]
}

// metadataKey returns the lower-cased metadata key name, the default for "".
func metadataKey(k string) (string, bool) {
	if k == "" {
		return DefaultMetadataKey, true
	}
	k = strings.ToLower(k)
	return k, validMetadataKey(k) && !strings.HasSuffix(k, "-bin") && !strings.HasPrefix(k, "grpc-")
}

// validMetadataKey reports whether k is a lower-case gRPC metadata key.
func validMetadataKey(k string) bool {
	if k == "" || len(k) > 256 {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// DefaultFingerprint is the default request fingerprint: "sha256:" and the
// hex SHA-256 of the full method name, a zero byte and the request
// message's deterministic encoding (proto.MarshalOptions{Deterministic:
// true}). Two messages equal field by field have the same fingerprint
// (map order does not matter); unknown fields count.
func DefaultFingerprint(fullMethod string, req proto.Message) (string, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(req)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	h.Write([]byte(fullMethod))
	h.Write([]byte{0})
	h.Write(b)
	return hashString(h.Sum(nil)), nil
}

func hashString(sum []byte) string {
	return "sha256:" + hex.EncodeToString(sum)
}

// storeFingerprint returns fp if the store accepts it as is (1-256 bytes of
// visible ASCII), otherwise "sha256:" and its hex SHA-256.
func storeFingerprint(fp string) string {
	ok := fp != "" && len(fp) <= 256
	for i := 0; ok && i < len(fp); i++ {
		ok = fp[i] >= 0x21 && fp[i] <= 0x7e
	}
	if ok {
		return fp
	}
	sum := sha256.Sum256([]byte(fp))
	return hashString(sum[:])
}
