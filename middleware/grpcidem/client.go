package grpcidem

import (
	"context"
	cryptorand "crypto/rand"
	"encoding/hex"
	"math/rand/v2"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Client defaults, used where ClientOptions leaves a field zero.
const (
	DefaultMaxAttempts = 5
	DefaultMinBackoff  = 50 * time.Millisecond
	DefaultMaxBackoff  = 2 * time.Second
)

// ClientOptions configures UnaryClientInterceptor. The zero value keys no
// method by itself: only calls made with WithKey or Idempotent get a key.
// A negative duration or MaxAttempts counts as zero (its default).
type ClientOptions struct {
	// Methods lists the full method names ("/package.Service/Method") whose
	// calls always get a key. Other calls get one only with the call option
	// WithKey or Idempotent, and are otherwise passed through untouched
	// (one attempt, no key: retrying a call without a key could run it
	// twice).
	Methods []string

	// Key, if set, returns the key of a call that needs one and was not
	// given one by WithKey or by the outgoing metadata; it is called once
	// per logical call, before the first attempt. An empty result, or a
	// nil Key, means a random key: 128 bits from crypto/rand as 32 hex
	// digits. A key must have 1 to 255 visible ASCII characters to be
	// accepted by the server interceptor.
	Key func(ctx context.Context, method string, req any) string

	// MetadataKey is the metadata name that carries the key; it must match
	// the server's. Default "idempotency-key".
	MetadataKey string

	// MaxAttempts bounds the attempts of one logical call, the first one
	// included. Default DefaultMaxAttempts; 1 disables retries (the key is
	// still sent).
	MaxAttempts int

	// Budget bounds the whole logical call, attempts and waits between
	// them, on top of the call context's own deadline (the earlier one
	// wins). Zero: only the call context bounds it.
	Budget time.Duration

	// AttemptTimeout, if positive, bounds each attempt. An attempt that
	// runs out of it ends with DeadlineExceeded and is retried while the
	// budget and the call context have time left; a DeadlineExceeded of the
	// call context itself is final.
	AttemptTimeout time.Duration

	// MinBackoff and MaxBackoff shape the wait before a retry: it doubles
	// from MinBackoff with each attempt, is capped at MaxBackoff, and is
	// drawn uniformly from its upper half (jitter). Defaults
	// DefaultMinBackoff and DefaultMaxBackoff. A RetryInfo detail in the
	// failed attempt's status replaces this wait by its retry_delay (plus up
	// to a tenth of jitter), even above MaxBackoff; when that wait would
	// outlast the budget or the call context, the call ends at once with
	// the attempt's error.
	MinBackoff, MaxBackoff time.Duration
}

// Outcome describes how a keyed call ended; Report fills one in.
type Outcome struct {
	// Key is the idempotency key the call carried on every attempt; empty
	// if the call was not keyed (then it was not retried either).
	Key string
	// Attempts is the number of attempts made (at least 1).
	Attempts int
	// Replayed reports that the final answer, a response or an error
	// status, was the server's stored outcome of an earlier attempt or
	// call with the same key (the "idempotency-replayed: true" metadata),
	// not a fresh run of the handler.
	Replayed bool
	// Waited is the sum of the waits planned between attempts.
	Waited time.Duration
}

// WithKey is a call option that makes the call keyed with key, whether or
// not its method is in ClientOptions.Methods.
func WithKey(key string) grpc.CallOption { return keyOption{key: key} }

// Idempotent is a call option that makes the call keyed, whether or not its
// method is in ClientOptions.Methods; the key comes from ClientOptions.Key
// or is random.
func Idempotent() grpc.CallOption { return keyOption{} }

// Report is a call option that fills in *o when the call returns, whether
// it succeeded or not.
func Report(o *Outcome) grpc.CallOption { return reportOption{o: o} }

type keyOption struct {
	grpc.EmptyCallOption
	key string
}

type reportOption struct {
	grpc.EmptyCallOption
	o *Outcome
}

type clientInterceptor struct {
	methods        map[string]bool
	key            func(context.Context, string, any) string
	mdKey          string
	maxAttempts    int
	budget         time.Duration
	attemptTimeout time.Duration
	minBackoff     time.Duration
	maxBackoff     time.Duration
}

// UnaryClientInterceptor returns a unary client interceptor that gives the
// calls that need one an idempotency key and retries them with that same
// key in the outgoing metadata, so that the server interceptor runs the
// handler once and answers every attempt with its one stored outcome.
//
// A keyed call is retried, within MaxAttempts, the Budget and the call
// context, when an attempt ends with
//
//   - Unavailable (no connection, a connection lost mid-call, a server going
//     away, the server's store unavailable);
//   - Aborted whose ErrorInfo reason is IDEMPOTENCY_KEY_IN_FLIGHT (another
//     attempt with the key still runs; other Aborted errors are the
//     application's and are final);
//   - ResourceExhausted, Internal or Unknown (the server's transient
//     failures, which it does not store);
//   - DeadlineExceeded while the call context and the Budget still have
//     time: the attempt's own AttemptTimeout ran out, or the server answered
//     it (its timeout towards something else, like a 504; not stored).
//
// Every other code is final and returned at once, in particular the ones
// that say the request itself is wrong: InvalidArgument,
// FailedPrecondition (the key reused with another request among them),
// NotFound, AlreadyExists, PermissionDenied, Unauthenticated, OutOfRange,
// Unimplemented, and Canceled. The error returned is the last attempt's,
// unchanged, or the call context's error as a status when it ended during
// a wait.
//
// A key the caller put in the outgoing metadata itself is kept, and makes
// the call keyed. Calls that are not keyed pass through untouched.
func UnaryClientInterceptor(opts ClientOptions) grpc.UnaryClientInterceptor {
	c := &clientInterceptor{
		methods:        make(map[string]bool, len(opts.Methods)),
		key:            opts.Key,
		mdKey:          strings.ToLower(opts.MetadataKey),
		maxAttempts:    opts.MaxAttempts,
		budget:         opts.Budget,
		attemptTimeout: opts.AttemptTimeout,
		minBackoff:     opts.MinBackoff,
		maxBackoff:     opts.MaxBackoff,
	}
	for _, m := range opts.Methods {
		c.methods[m] = true
	}
	if c.mdKey == "" {
		c.mdKey = DefaultMetadataKey
	}
	if c.maxAttempts <= 0 {
		c.maxAttempts = DefaultMaxAttempts
	}
	if c.minBackoff <= 0 {
		c.minBackoff = DefaultMinBackoff
	}
	if c.maxBackoff <= 0 {
		c.maxBackoff = DefaultMaxBackoff
	}
	if c.maxBackoff < c.minBackoff {
		c.maxBackoff = c.minBackoff
	}
	return c.intercept
}

func (c *clientInterceptor) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	var (
		report *Outcome
		keyed  = c.methods[method]
		key    string
		rest   = opts  // the options for grpc: opts without this package's
		copied = false // whether rest is a copy yet
	)
	for i, o := range opts {
		switch o := o.(type) {
		case keyOption:
			keyed = true
			if o.key != "" {
				key = o.key
			}
		case reportOption:
			report = o.o
		default:
			if copied {
				rest = append(rest, o)
			}
			continue
		}
		if !copied { // the first of ours: copy the others before it
			rest, copied = append(make([]grpc.CallOption, 0, len(opts)+1), opts[:i]...), true
		}
	}
	var out Outcome
	if report != nil {
		defer func() { *report = out }()
	}
	inMetadata := false
	if md, ok := metadata.FromOutgoingContext(ctx); ok {
		if vs := md.Get(c.mdKey); len(vs) > 0 {
			keyed, key, inMetadata = true, vs[0], true
		}
	}
	if !keyed {
		out.Attempts = 1
		return invoker(ctx, method, req, reply, cc, rest...)
	}
	if key == "" && c.key != nil {
		key = c.key(ctx, method, req)
	}
	if key == "" {
		key = newKey()
	}
	out.Key = key
	if !inMetadata {
		ctx = metadata.AppendToOutgoingContext(ctx, c.mdKey, key)
	}
	if c.budget > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.budget)
		defer cancel()
	}
	var header, trailer metadata.MD
	rest = append(rest[:len(rest):len(rest)], grpc.Header(&header), grpc.Trailer(&trailer))
	for {
		header, trailer = nil, nil
		out.Attempts++
		err := c.attempt(ctx, method, req, reply, cc, invoker, rest)
		out.Replayed = replayed(header) || replayed(trailer)
		if err == nil {
			return nil
		}
		wait, again := c.retry(ctx, err, out.Attempts)
		if !again {
			return err
		}
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= wait {
			return err // the wait would outlast the budget
		}
		out.Waited += wait
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return status.FromContextError(ctx.Err()).Err()
		}
	}
}

func (c *clientInterceptor) attempt(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts []grpc.CallOption) error {
	if c.attemptTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.attemptTimeout)
		defer cancel()
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// retry decides whether a failed attempt is retried, and after how long.
func (c *clientInterceptor) retry(ctx context.Context, err error, attempts int) (time.Duration, bool) {
	if attempts >= c.maxAttempts || ctx.Err() != nil {
		return 0, false
	}
	st, ok := status.FromError(err)
	if !ok {
		return 0, false // not a status: an interceptor's own error, say
	}
	switch st.Code() {
	case codes.Unavailable, codes.ResourceExhausted, codes.Internal, codes.Unknown:
	case codes.DeadlineExceeded:
		// The call context is still alive (checked above): the attempt's
		// own timeout fired, or the server answered DeadlineExceeded, a
		// transient code it does not store.
	case codes.Aborted:
		if !inFlight(st) {
			return 0, false
		}
	default:
		return 0, false
	}
	if d, ok := retryDelay(st); ok {
		return d + rand.N(d/10+1), true
	}
	d := c.minBackoff
	for i := 1; i < attempts && d < c.maxBackoff; i++ {
		d *= 2
	}
	d = min(d, c.maxBackoff)
	return d/2 + rand.N(d/2+1), true
}

func inFlight(st *status.Status) bool {
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetReason() == ReasonKeyInFlight {
			return true
		}
	}
	return false
}

func retryDelay(st *status.Status) (time.Duration, bool) {
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay() != nil {
			if err := ri.GetRetryDelay().CheckValid(); err != nil {
				return 0, false
			}
			return max(ri.GetRetryDelay().AsDuration(), 0), true
		}
	}
	return 0, false
}

func replayed(md metadata.MD) bool {
	for _, v := range md.Get(ReplayedKey) {
		if strings.EqualFold(strings.TrimSpace(v), "true") {
			return true
		}
	}
	return false
}

// newKey returns 128 random bits as 32 hex digits.
func newKey() string {
	var b [16]byte
	_, _ = cryptorand.Read(b[:])
	return hex.EncodeToString(b[:])
}
