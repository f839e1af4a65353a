// Package broken holds deliberately broken variants of the memory backend,
// for the meta-test that proves the conformance suite catches them. Each
// variant decorates *exactmem.Backend (the memory backend with a fake
// TxCompleter) and gets one rule of the contract wrong, the way a
// plausible backend would; a few controls get nothing wrong but use a
// freedom the contract allows (declining an optional capability, a
// coarser time granularity), and must pass. It is internal: a test aid,
// not an API.
package broken

import (
	"context"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/durable-go/durable/backends/memory"
	"github.com/durable-go/durable/conformance"
	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/exactmem"
)

// Tolerance is the clock tolerance of the harnesses of [NewHarness].
const Tolerance = 2 * time.Second

// WideTolerance is the clock tolerance of the harnesses of
// [NewWideHarness], for conformance.RunToleranceSensitive.
const WideTolerance = 5 * Tolerance

// variant is one broken (or control) backend.
type variant struct {
	doc     string
	control bool // gets nothing wrong: the suite must pass it
	wrap    func(b *exactmem.Backend, st *state) contract.Backend
	caps    func(*conformance.Capabilities) // adjusts the harness's declaration
	// fixedTolerance: the storage judges expiry with Tolerance whatever
	// the harness configures, while the backend reports the configured
	// tolerance (see tolerance.go).
	fixedTolerance bool
}

// None is the name of the unbroken control: the plain memory backend.
const None = "none"

var variants = map[string]variant{}

// register adds a variant; called from the init functions of this package.
func register(name string, v variant) {
	if _, dup := variants[name]; dup {
		panic("broken: duplicate variant " + name)
	}
	variants[name] = v
}

func init() {
	register(None, variant{
		doc:     "the memory backend with the fake TxCompleter of internal/exactmem, with no bug",
		control: true,
		wrap:    func(b *exactmem.Backend, _ *state) contract.Backend { return b },
	})
}

// Names returns the names of the broken variants, sorted, without the
// controls.
func Names() []string { return names(false) }

// Controls returns the names of the controls, sorted: variants that get
// nothing wrong, which the suite must pass.
func Controls() []string { return names(true) }

func names(control bool) []string {
	var out []string
	for name, v := range variants {
		if v.control == control {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// Doc describes the bug of a variant.
func Doc(name string) string { return variants[name].doc }

// NewHarness returns a harness factory for the named variant, configured
// with the clock tolerance Tolerance, or false if there is no such
// variant.
func NewHarness(name string) (conformance.NewHarness, bool) { return newHarness(name, Tolerance) }

// NewWideHarness is NewHarness with the clock tolerance WideTolerance,
// several times Tolerance, for conformance.RunToleranceSensitive.
func NewWideHarness(name string) (conformance.NewHarness, bool) {
	return newHarness(name, WideTolerance)
}

func newHarness(name string, tol time.Duration) (conformance.NewHarness, bool) {
	v, ok := variants[name]
	if !ok {
		return nil, false
	}
	return func(_ context.Context, _ *testing.T) (conformance.Harness, error) {
		clock := conformance.NewManualClock()
		judged := tol
		if v.fixedTolerance {
			judged = Tolerance
		}
		storage := exactmem.NewStorage(memory.Options{Clock: clock, Tolerance: judged})
		caps := conformance.Capabilities{Clock: true, Restart: true}
		if v.caps != nil {
			v.caps(&caps)
		}
		return &harness{
			clock: clock,
			caps:  caps,
			state: newState(clock, storage, tol),
			wrap:  v.wrap,
		}, nil
	}, true
}

// harness is a conformance.Harness over one memory Storage whose clients
// are wrapped with one bug. The bug's state is shared by every client.
type harness struct {
	clock *contract.ManualClock
	caps  conformance.Capabilities
	state *state
	wrap  func(*exactmem.Backend, *state) contract.Backend
}

func (h *harness) Open(ctx context.Context) (contract.Backend, error) {
	h.state.mu.Lock()
	h.state.open++
	h.state.opened++
	h.state.mu.Unlock()
	return h.wrap(h.state.storage.Backend(), h.state), nil
}
func (h *harness) Advance(d time.Duration)                { h.clock.Advance(d) }
func (h *harness) Close() error                           { return nil }
func (h *harness) Capabilities() conformance.Capabilities { return h.caps }

// state is what a bug needs to remember across the clients of one storage.
type state struct {
	clock   *contract.ManualClock
	storage *exactmem.Storage
	tol     time.Duration // the tolerance the harness configured

	mu     sync.Mutex
	open   int // clients open now
	opened int // clients opened so far

	// Lease token translation (see leaseTokens).
	next    map[leaseKey]int64
	hwm     map[leaseKey]int64
	last    map[leaseKey]int64
	rel     map[leaseKey]released
	toReal  map[leaseKey]map[int64]int64
	visible map[int64]int64

	// Claim token translation (see claimTokens).
	claimN    int64
	claimVis  map[string]string // real → visible
	claimReal map[string]string // visible → real

	// staleTokenCompletes and the caller-token bugs: the latest claim
	// token per key.
	claims map[contract.KeyRef]string
	// reclaimed-claim-handed-back: the tokens of claims another caller
	// reclaimed.
	reclaimed map[contract.KeyRef]map[string]bool
	// completed-key-handed-back-as-held and tombstone-replays-payload: the
	// token and outcome of each key's completion.
	completions map[contract.KeyRef]completion
	// Aliasing bugs: the caller's snapshot and outcome, and the slices
	// handed out by reads.
	snapAlias map[recKey][]byte
	snapCache map[recKey]cachedSnap
	outAlias  map[contract.KeyRef]contract.Outcome
	outCache  map[outKey]*contract.Outcome
	// list-keys-past-retention: every completion.
	completed []contract.KeyRecord
	// Waiting bugs.
	waiting  map[contract.KeyRef]int
	released map[contract.KeyRef]bool
	// Scopes written, for unscoped-lease-read-sees-scopes.
	scopes map[contract.Scope]bool
	// lease-value-dropped-on-renew: the grant renewed last, per lease.
	valueDropped map[leaseKey]int64
	// The watch bugs: the watches of every client (permits.go).
	watches *watchHub
}

type leaseKey struct {
	scope    contract.Scope
	resource string
}

type recKey struct {
	scope contract.Scope
	id    string
}

type released struct {
	owner string
	token int64
}

// outKey names one completion of a key.
type outKey struct {
	ref         contract.KeyRef
	completedAt time.Time
}

type cachedSnap struct {
	rev  int64
	snap []byte
}

func newState(clock *contract.ManualClock, storage *exactmem.Storage, tol time.Duration) *state {
	return &state{
		clock: clock, storage: storage, tol: tol,
		next: map[leaseKey]int64{}, hwm: map[leaseKey]int64{}, last: map[leaseKey]int64{}, rel: map[leaseKey]released{},
		toReal: map[leaseKey]map[int64]int64{}, visible: map[int64]int64{},
		claimVis: map[string]string{}, claimReal: map[string]string{},
		claims: map[contract.KeyRef]string{}, reclaimed: map[contract.KeyRef]map[string]bool{},
		completions: map[contract.KeyRef]completion{},
		snapAlias:   map[recKey][]byte{}, snapCache: map[recKey]cachedSnap{},
		outAlias: map[contract.KeyRef]contract.Outcome{}, outCache: map[outKey]*contract.Outcome{},
		waiting: map[contract.KeyRef]int{}, released: map[contract.KeyRef]bool{},
		scopes: map[contract.Scope]bool{},
	}
}

// now is the store clock at the precision the memory backend keeps.
func (st *state) now() time.Time { return st.clock.Now().UTC().Truncate(time.Microsecond) }

// partial is a memory client that offers every optional capability but
// ToleranceReporter (see tolerance-not-reported).
type partial struct {
	contract.Backend
	m *exactmem.Backend
}

func (p partial) WaitKey(ctx context.Context, k contract.KeyRef) (contract.KeyRecord, error) {
	return p.m.WaitKey(ctx, k)
}

func (p partial) CountCleanup(ctx context.Context, r contract.CleanupRequest) (contract.CleanupResult, error) {
	return p.m.CountCleanup(ctx, r)
}

func (p partial) DeleteRecord(ctx context.Context, kind contract.RecordKind, scope contract.Scope, id string) (bool, error) {
	return p.m.DeleteRecord(ctx, kind, scope, id)
}

func (p partial) ListKeys(ctx context.Context, q contract.KeyListQuery) ([]contract.KeyRecord, error) {
	return p.m.ListKeys(ctx, q)
}

func (p partial) ListLeases(ctx context.Context, q contract.LeaseListQuery) ([]contract.Lease, error) {
	return p.m.ListLeases(ctx, q)
}

// raceWindow is how long the racy variants wait between their read and
// their write: long enough that every caller the suite releases at once
// reads before any writes, even on a loaded machine.
const raceWindow = 20 * time.Millisecond
