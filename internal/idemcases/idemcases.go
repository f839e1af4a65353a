// Package idemcases is the behaviour table that every idempotency transport
// of durable must pass: the HTTP middleware (middleware/idempotency) and
// the gRPC interceptor (middleware/grpcidem) run the same cases through an
// [Adapter] each, so that both ends answer alike.
//
// A case is a script of handler runs (what the handler does on its first,
// second, … execution: succeed, fail by the caller's fault, fail
// transiently, block until released) and a sequence of steps (send a
// request with a key and a message variant, at once or in the background;
// wait until the handler blocks; release it; collect a background reply),
// each with the reply expected in abstract terms. Values carry the run
// number ("v#1"), so a replay proves it is the first run's outcome.
package idemcases

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
)

// Kind classifies a reply.
type Kind int

const (
	// Success: the handler's success value (Reply.Value).
	Success Kind = iota + 1
	// CallerFault: the handler's stored caller-fault error (HTTP 404, gRPC
	// NotFound), its text in Reply.Value.
	CallerFault
	// Transient: the handler's transient error (HTTP 503, gRPC Unavailable).
	Transient
	// Reused: the key was used with another request (HTTP 422, gRPC
	// FailedPrecondition IDEMPOTENCY_KEY_REUSED).
	Reused
	// InFlight: the key's first request still runs (HTTP 409, gRPC Aborted
	// IDEMPOTENCY_KEY_IN_FLIGHT).
	InFlight
	// KeyRejected: the key is missing where required, or malformed (HTTP
	// 400, gRPC InvalidArgument IDEMPOTENCY_KEY_MISSING/MALFORMED).
	KeyRejected
	// Other is anything else; no case expects it.
	Other
)

func (k Kind) String() string {
	return [...]string{"?", "Success", "CallerFault", "Transient", "Reused", "InFlight", "KeyRejected", "Other"}[k]
}

// Reply is a transport's reply in abstract terms.
type Reply struct {
	Kind     Kind
	Replayed bool   // the transport's replay marker was set
	Value    string // Success and CallerFault: the handler's value
}

func (r Reply) String() string {
	return fmt.Sprintf("%v replayed=%v %q", r.Kind, r.Replayed, r.Value)
}

// Action is what the handler does on one run.
type Action int

const (
	Succeed       Action = iota + 1 // reply the value
	FailCaller                      // fail with a caller-fault error carrying the value
	FailTransient                   // fail with a transient error
	Block                           // block until Release, then succeed
)

// Config is the transport's configuration for a case.
type Config struct {
	Required     bool // a request without a key is rejected
	WaitInFlight bool // a request whose key is in flight waits for the first one's outcome
}

// Adapter is one transport under test.
type Adapter interface {
	// Start serves a fresh store and handler configured by cfg whose handler
	// calls h.Run for every execution and answers by its result, and
	// returns a client for it. The server lives until the test ends.
	Start(t *testing.T, cfg Config, h *Handler) Client
}

// Client sends requests to a started server.
type Client interface {
	// Send sends a request carrying key ("" for none; any other value is
	// sent as is, malformed or not) whose message is variant, and classifies
	// the reply.
	Send(ctx context.Context, key, variant string) Reply
}

// Handler is the scripted handler a transport's server calls.
type Handler struct {
	mu      sync.Mutex
	script  []Action
	value   string
	runs    int
	blocked chan struct{}
	release chan struct{}
}

// NewHandler returns a handler that acts by script, one action per run (the
// last action repeats), replying value#run.
func NewHandler(value string, script ...Action) *Handler {
	return &Handler{script: script, value: value, blocked: make(chan struct{}, 16), release: make(chan struct{})}
}

// Run is one execution: it returns what the handler does (Succeed,
// FailCaller or FailTransient; a Block run blocks until Release or ctx's
// end, then succeeds) and the value to reply.
func (h *Handler) Run(ctx context.Context) (Action, string) {
	h.mu.Lock()
	h.runs++
	n := h.runs
	a := h.script[min(n, len(h.script))-1]
	h.mu.Unlock()
	v := fmt.Sprintf("%s#%d", h.value, n)
	if a == Block {
		h.blocked <- struct{}{}
		select {
		case <-h.release:
		case <-ctx.Done():
			return FailTransient, v
		}
		a = Succeed
	}
	return a, v
}

// Runs returns how many times the handler ran.
func (h *Handler) Runs() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.runs
}

// Op is a step's operation.
type Op int

const (
	Send       Op = iota + 1 // send and check the reply
	SendAsync                // send in the background
	AwaitBlock               // wait until a Block run is blocking
	Release                  // release the blocked runs
	Collect                  // collect the oldest background reply and check it
)

// Step is one step of a case.
type Step struct {
	Op      Op
	Key     string // Send, SendAsync
	Variant string // Send, SendAsync; "" means "a"
	Want    Reply  // Send, Collect
}

// Case is one row of the table.
type Case struct {
	Name     string
	Config   Config
	Script   []Action
	Steps    []Step
	WantRuns int // handler executions at the end
}

// Malformed is a key no transport accepts: longer than 255 characters.
var Malformed = strings.Repeat("k", 256)

func ok(v string) Reply    { return Reply{Kind: Success, Value: v} }
func replay(r Reply) Reply { r.Replayed = true; return r }
func fault(v string) Reply { return Reply{Kind: CallerFault, Value: v} }
func kind(k Kind) Reply    { return Reply{Kind: k} }
func send(key string, want Reply) Step {
	return Step{Op: Send, Key: key, Want: want}
}

// Cases is the table.
var Cases = []Case{
	{
		Name: "executed then replayed", Script: []Action{Succeed},
		Steps:    []Step{send("k1", ok("v#1")), send("k1", replay(ok("v#1"))), send("k1", replay(ok("v#1")))},
		WantRuns: 1,
	},
	{
		Name: "caller fault stored and replayed", Script: []Action{FailCaller, Succeed},
		Steps:    []Step{send("k1", fault("v#1")), send("k1", replay(fault("v#1")))},
		WantRuns: 1,
	},
	{
		Name: "transient error not stored, the retry executes again", Script: []Action{FailTransient, Succeed},
		Steps:    []Step{send("k1", kind(Transient)), send("k1", ok("v#2")), send("k1", replay(ok("v#2")))},
		WantRuns: 2,
	},
	{
		Name: "key reused with another request", Script: []Action{Succeed},
		Steps: []Step{
			send("k1", ok("v#1")),
			{Op: Send, Key: "k1", Variant: "b", Want: kind(Reused)},
			send("k1", replay(ok("v#1"))),
		},
		WantRuns: 1,
	},
	{
		Name: "distinct keys execute independently", Script: []Action{Succeed},
		Steps:    []Step{send("k1", ok("v#1")), send("k2", ok("v#2")), send("k1", replay(ok("v#1")))},
		WantRuns: 2,
	},
	{
		Name: "key in flight", Script: []Action{Block},
		Steps: []Step{
			{Op: SendAsync, Key: "k1"},
			{Op: AwaitBlock},
			send("k1", kind(InFlight)),
			{Op: Release},
			{Op: Collect, Want: ok("v#1")},
			send("k1", replay(ok("v#1"))),
		},
		WantRuns: 1,
	},
	{
		Name: "wait in flight returns the first outcome", Config: Config{WaitInFlight: true}, Script: []Action{Block},
		Steps: []Step{
			{Op: SendAsync, Key: "k1"},
			{Op: AwaitBlock},
			{Op: SendAsync, Key: "k1"},
			{Op: Release},
			{Op: Collect, Want: ok("v#1")},
			{Op: Collect, Want: replay(ok("v#1"))},
		},
		WantRuns: 1,
	},
	{
		Name: "missing key rejected when required", Config: Config{Required: true}, Script: []Action{Succeed},
		Steps:    []Step{send("", kind(KeyRejected)), send("k1", ok("v#1"))},
		WantRuns: 1,
	},
	{
		Name: "no key passes through unprotected", Script: []Action{Succeed},
		Steps:    []Step{send("", ok("v#1")), send("", ok("v#2"))},
		WantRuns: 2,
	},
	{
		Name: "malformed key rejected", Script: []Action{Succeed},
		Steps:    []Step{send(Malformed, kind(KeyRejected))},
		WantRuns: 0,
	},
}

// Run runs every case of the table against a.
func Run(t *testing.T, a Adapter) {
	for _, c := range Cases {
		t.Run(c.Name, func(t *testing.T) {
			runCase(t, a, c)
		})
	}
}

func runCase(t *testing.T, a Adapter, c Case) {
	h := NewHandler("v", c.Script...)
	cl := a.Start(t, c.Config, h)
	ctx := t.Context()
	var pending []chan Reply
	released := false
	defer func() {
		if !released {
			close(h.release)
		}
		for _, ch := range pending {
			<-ch
		}
	}()
	for i, s := range c.Steps {
		variant := s.Variant
		if variant == "" {
			variant = "a"
		}
		switch s.Op {
		case Send:
			if got := cl.Send(ctx, s.Key, variant); got != s.Want {
				t.Fatalf("step %d: got %v, want %v", i, got, s.Want)
			}
		case SendAsync:
			ch := make(chan Reply, 1)
			pending = append(pending, ch)
			go func() { ch <- cl.Send(ctx, s.Key, variant) }()
		case AwaitBlock:
			<-h.blocked
		case Release:
			released = true
			close(h.release)
		case Collect:
			ch := pending[0]
			pending = pending[1:]
			if got := <-ch; got != s.Want {
				t.Fatalf("step %d: got %v, want %v", i, got, s.Want)
			}
		}
	}
	if n := h.Runs(); n != c.WantRuns {
		t.Fatalf("the handler ran %d times, want %d", n, c.WantRuns)
	}
}
