package grpcidem

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/middleware/idempotency"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
)

// UnaryServerInterceptor returns the server interceptor, or an error with
// Code InvalidArgument if an option is invalid (Unimplemented for
// Transactional on a backend without shared transactions). See the package
// documentation for what it does.
func UnaryServerInterceptor(store *durable.Store, opts ServerOptions) (grpc.UnaryServerInterceptor, error) {
	c, err := newServerConfig(store, opts)
	if err != nil {
		return nil, err
	}
	return c.intercept, nil
}

// StreamServerInterceptor returns an interceptor that refuses, with
// Unimplemented, every streaming call that carries an idempotency key
// (opts.MetadataKey, default "idempotency-key"): stored outcomes cover
// unary calls only, and a streaming call with a key must not look
// protected. Streaming calls without a key pass through. Only
// opts.MetadataKey is read; an invalid one means the default.
func StreamServerInterceptor(opts ServerOptions) grpc.StreamServerInterceptor {
	key, ok := metadataKey(opts.MetadataKey)
	if !ok {
		key = DefaultMetadataKey
	}
	st := status.New(codes.Unimplemented, "idempotency keys are not supported on streaming calls: only unary calls are protected; call without the key")
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if md, ok := metadata.FromIncomingContext(ss.Context()); ok && len(md.Get(key)) > 0 {
			return st.Err()
		}
		return handler(srv, ss)
	}
}

// statuses are the interceptor's own answers, built once.
type statuses struct {
	missing, malformed, reused, inFlight, expired, unavailable, notStored,
	internal, corrupt, unknownType, tooLargeTx *status.Status
}

func withInfo(st *status.Status, reason string, retry *time.Duration) *status.Status {
	details := []proto.Message{&errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain}}
	if retry != nil {
		details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(*retry)})
	}
	p := st.Proto()
	for _, d := range details {
		a, err := anypb.New(d)
		if err != nil {
			panic(err) // well-known messages always marshal
		}
		p.Details = append(p.Details, a)
	}
	return status.FromProto(p)
}

func newStatuses(retryAfter time.Duration) statuses {
	ra := &retryAfter
	return statuses{
		missing:     withInfo(status.New(codes.InvalidArgument, "this method requires an idempotency key"), ReasonKeyMissing, nil),
		malformed:   withInfo(status.New(codes.InvalidArgument, "the idempotency key must be one value of 1 to 255 visible ASCII characters"), ReasonKeyMalformed, nil),
		reused:      withInfo(status.New(codes.FailedPrecondition, "the idempotency key was used with another request"), ReasonKeyReused, nil),
		inFlight:    withInfo(status.New(codes.Aborted, "the idempotency key's first call is still in flight; retry later with the same key"), ReasonKeyInFlight, ra),
		expired:     withInfo(status.New(codes.FailedPrecondition, "the call with this idempotency key ran once, and its response is no longer stored; do not retry it with this key"), ReasonOutcomeExpired, nil),
		unavailable: withInfo(status.New(codes.Unavailable, "the idempotency store is unavailable; retry later with the same key"), ReasonStoreUnavailable, ra),
		notStored:   withInfo(status.New(codes.Unavailable, "the response could not be stored; retry later with the same key"), ReasonStoreUnavailable, ra),
		internal:    status.New(codes.Internal, "the idempotency store rejected the call"),
		corrupt:     status.New(codes.Internal, "the stored response of this idempotency key is corrupt"),
		unknownType: status.New(codes.Internal, "the stored response's message type is unknown to this server"),
		tooLargeTx:  status.New(codes.Internal, "the response is too large to store; its transaction was rolled back"),
	}
}

// notStored ends the handler run when its response must not be stored; Do
// then releases the claim (DoTx also rolls back).
type notStored struct {
	reason   string
	tooLarge bool
}

func (e *notStored) Error() string { return "grpcidem: response not stored: " + e.reason }

func asNotStored(err error) *notStored {
	var ns *notStored
	if errors.As(err, &ns) {
		return ns
	}
	return nil
}

// run is the state of one handler run.
type run struct {
	resp any
	err  error
	cap  capture
}

func (c *serverConfig) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if !c.applies(info.FullMethod) {
		return handler(ctx, req)
	}
	md, _ := metadata.FromIncomingContext(ctx)
	values := md[c.key]
	if len(values) == 0 {
		if c.required {
			return nil, c.st.missing.Err()
		}
		return handler(ctx, req)
	}
	key, ok := idempotency.ParseKey(values)
	if !ok {
		return nil, c.st.malformed.Err()
	}
	msg, ok := req.(proto.Message)
	if !ok {
		c.log.Error("grpcidem: the request is not a protocol buffers message; it cannot be fingerprinted")
		return nil, c.st.internal.Err()
	}
	fp, err := c.fingerprint(info.FullMethod, msg)
	if err != nil {
		c.log.Error("grpcidem: fingerprinting the request failed", "err", err)
		return nil, c.st.internal.Err()
	}
	creq := durable.ClaimRequest{
		KeyRef:      durable.KeyRef{Scope: c.scope(ctx, info.FullMethod), Key: idempotency.StoreKey(key)},
		Fingerprint: storeFingerprint(fp),
		TTL:         c.ttl,
	}
	var x *run
	fn := func(hctx context.Context) (durable.Outcome, error) {
		x = &run{}
		x.cap.stream = grpc.ServerTransportStreamFromContext(ctx)
		x.resp, x.err = handler(grpc.NewContextWithServerTransportStream(hctx, &x.cap), req)
		out, ns := c.outcome(x, ctx.Err() != nil)
		if ns != nil {
			return durable.Outcome{}, ns
		}
		return out, nil
	}
	var res durable.DoResult
	if c.transactional {
		res, err = durable.DoTx(ctx, c.store, creq, c.do, func(hctx context.Context, tx durable.Tx) (durable.Outcome, error) {
			return fn(withTx(hctx, tx))
		})
	} else {
		res, err = c.store.Do(ctx, creq, c.do, fn)
	}
	switch {
	case x != nil:
		// The handler ran. Its response goes to the client only if it was
		// stored, or deliberately not stored.
		var ns *notStored
		if err != nil {
			ns = asNotStored(err)
		}
		switch {
		case err == nil:
			x.cap.flush(ctx)
			return x.resp, x.err
		case ns != nil && ns.tooLarge && c.transactional:
			c.log.Warn("grpcidem: response larger than MaxBody in transactional mode; rolled back and answered Internal", "max_body", c.maxBody)
			return nil, c.st.tooLargeTx.Err()
		case ns != nil:
			if ns.tooLarge {
				c.log.Warn("grpcidem: response not stored, a retry will run the handler again", "reason", ns.reason, "max_body", c.maxBody)
			} else {
				c.log.Debug("grpcidem: response not stored", "reason", ns.reason)
			}
			x.cap.flush(ctx)
			return x.resp, x.err
		default:
			if errors.Is(err, durable.ErrFenced) {
				c.log.Warn("grpcidem: the claim was lost before the response was stored; answered Unavailable, a retry may run the handler again", "err", err)
			} else {
				c.log.Warn("grpcidem: storing the response failed; answered Unavailable and kept the claim until it expires", "err", err, "claim_ttl", c.ttl)
			}
			return nil, c.st.notStored.Err()
		}
	case err == nil:
		return c.replay(ctx, res.Outcome)
	case errors.Is(err, durable.ErrInFlight):
		return nil, c.st.inFlight.Err()
	case errors.Is(err, durable.ErrKeyConflict):
		return nil, c.st.reused.Err()
	case errors.Is(err, durable.ErrOutcomeExpired):
		return nil, c.st.expired.Err()
	case ctx.Err() != nil:
		return nil, status.FromContextError(ctx.Err()).Err()
	case errors.Is(err, durable.ErrInvalidArgument):
		c.log.Error("grpcidem: the store rejected the claim; check the Scope function", "err", err)
		return nil, c.st.internal.Err()
	case errors.Is(err, durable.ErrCorrupt):
		c.log.Error("grpcidem: the stored record of this key is corrupt; inspect and delete it with the durable CLI", "err", err)
		return nil, c.st.corrupt.Err()
	default:
		if c.failOpen {
			c.log.Warn("grpcidem: store unavailable, running the handler unprotected", "err", err)
			return handler(ctx, req)
		}
		c.log.Warn("grpcidem: store unavailable", "err", err)
		return nil, c.st.unavailable.Err()
	}
}

var deterministic = proto.MarshalOptions{Deterministic: true}

// outcome encodes a handler's result for storing, or says why it is not
// stored. An OK response is stored with Code 0, its message's full type
// name as Ref and its encoding as Body; an error status with its code,
// and Body the encoded google.rpc.Status (message and details). Header
// holds the stored header ("h:" and the key) and trailer ("t:") metadata.
func (c *serverConfig) outcome(x *run, gone bool) (durable.Outcome, *notStored) {
	var out durable.Outcome
	if x.err != nil {
		st := status.Convert(x.err)
		if !c.storeCode(st.Code()) {
			return out, &notStored{reason: "status " + st.Code().String()}
		}
		if gone {
			return out, &notStored{reason: "the client went away and the call failed"}
		}
		b, err := deterministic.Marshal(st.Proto())
		if err != nil {
			return out, &notStored{reason: "status details do not encode"}
		}
		out.Code, out.Body = int(st.Code()), b
	} else {
		m, ok := x.resp.(proto.Message)
		if !ok || m == nil {
			return out, &notStored{reason: "the response is not a protocol buffers message"}
		}
		name := m.ProtoReflect().Descriptor().FullName()
		if _, err := c.types.FindMessageByName(name); err != nil {
			return out, &notStored{reason: "the response's message type is not registered (ServerOptions.Types)"}
		}
		b, err := deterministic.Marshal(m)
		if err != nil {
			return out, &notStored{reason: "the response does not encode"}
		}
		out.Ref, out.Body = string(name), b
	}
	if len(out.Body) > c.maxBody {
		return durable.Outcome{}, &notStored{reason: "response larger than MaxBody", tooLarge: true}
	}
	out.Header = x.cap.stored(c.storeHeader, c.storeTrailer)
	n := 0
	for k, vs := range out.Header {
		n += len(k)
		for _, v := range vs {
			n += len(v)
		}
	}
	if n > maxHeaderBytes {
		return durable.Outcome{}, &notStored{reason: "stored metadata larger than the store's limit", tooLarge: true}
	}
	return out, nil
}

var replayedMD = metadata.Pairs(ReplayedKey, "true")

// replay answers with a stored outcome.
func (c *serverConfig) replay(ctx context.Context, o durable.Outcome) (any, error) {
	var resp proto.Message
	var rerr error
	if o.Ref != "" {
		mt, err := c.types.FindMessageByName(protoreflect.FullName(o.Ref))
		if err != nil {
			c.log.Error("grpcidem: the stored response's message type is not registered; answered Internal", "err", err)
			return nil, c.st.unknownType.Err()
		}
		resp = mt.New().Interface()
		if err := proto.Unmarshal(o.Body, resp); err != nil {
			c.log.Error("grpcidem: the stored response does not decode", "err", err)
			return nil, c.st.corrupt.Err()
		}
	} else {
		var p spb.Status
		if err := proto.Unmarshal(o.Body, &p); err != nil || p.Code == 0 || int(p.Code) != o.Code {
			c.log.Error("grpcidem: the stored status does not decode")
			return nil, c.st.corrupt.Err()
		}
		rerr = status.FromProto(&p).Err()
	}
	header, trailer := replayedMD, metadata.MD(nil)
	if len(o.Header) > 0 {
		header = replayedMD.Copy()
		for k, vs := range o.Header {
			switch {
			case strings.HasPrefix(k, "h:"):
				header[k[2:]] = append(header[k[2:]], vs...)
			case strings.HasPrefix(k, "t:"):
				if trailer == nil {
					trailer = metadata.MD{}
				}
				trailer[k[2:]] = append(trailer[k[2:]], vs...)
			}
		}
	}
	if grpc.ServerTransportStreamFromContext(ctx) != nil {
		grpc.SetHeader(ctx, header)
		if trailer != nil {
			grpc.SetTrailer(ctx, trailer)
		}
	}
	if rerr != nil {
		return nil, rerr
	}
	return resp, nil
}

// capture is the transport stream the handler sees: it collects the header
// and trailer metadata the handler sets (SendHeader included) so that they
// are sent only once the response is stored.
type capture struct {
	stream  grpc.ServerTransportStream
	header  metadata.MD
	trailer metadata.MD
}

func (s *capture) Method() string {
	if s.stream == nil {
		return ""
	}
	return s.stream.Method()
}

func (s *capture) SetHeader(md metadata.MD) error {
	s.header = metadata.Join(s.header, md)
	return nil
}

// SendHeader is deferred like the rest: headers go out with the response.
func (s *capture) SendHeader(md metadata.MD) error { return s.SetHeader(md) }

func (s *capture) SetTrailer(md metadata.MD) error {
	s.trailer = metadata.Join(s.trailer, md)
	return nil
}

// flush hands the collected metadata to the real stream.
func (s *capture) flush(ctx context.Context) {
	if s.stream == nil {
		return
	}
	if len(s.header) > 0 {
		s.stream.SetHeader(s.header)
	}
	if len(s.trailer) > 0 {
		s.stream.SetTrailer(s.trailer)
	}
}

// stored returns the metadata to store: the listed header ("h:" key) and
// trailer ("t:" key) entries.
func (s *capture) stored(header, trailer []string) map[string][]string {
	var out map[string][]string
	add := func(prefix string, md metadata.MD, keys []string) {
		for _, k := range keys {
			if vs := md[k]; len(vs) > 0 {
				if out == nil {
					out = make(map[string][]string)
				}
				out[prefix+k] = append([]string(nil), vs...)
			}
		}
	}
	add("h:", s.header, header)
	add("t:", s.trailer, trailer)
	return out
}
