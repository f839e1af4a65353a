package conformance

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/contract"
)

// The operator's listings of keys and leases (contract.RecordLister, an
// optional capability). A backend without it skips these scenarios, loudly.
func listingScenarios() []scenario {
	return []scenario{
		{"KeysArePagedInByteOrder", 0, testListKeysPagedInByteOrder},
		{"KeysFilterByState", 0, testListKeysFilterByState},
		{"KeysPastRetentionAreNotListed", needClock, testListKeysPastRetentionNotListed},
		{"LeasesArePagedInByteOrder", 0, testListLeasesPagedInByteOrder},
		{"HeldLeasesExcludeExpiredOnes", needClock, testListLeasesHeldExcludesExpired},
	}
}

// lister returns a client of the backend, skipping the scenario when the
// backend lacks contract.RecordLister or declines it at run time.
func (e *env) lister() *durable.Store {
	e.t.Helper()
	s := e.open()
	if l := contract.RecordLister(nil); !s.As(&l) {
		e.skipf("the backend does not implement contract.RecordLister (optional): Store.ListKeys and Store.ListLeases return Unimplemented")
	}
	if _, err := s.ListKeys(e.ctx, contract.KeyListQuery{Limit: 1}); contract.CodeOf(err) == contract.Unimplemented {
		e.skipf("the backend declines contract.RecordLister at run time (Unimplemented)")
	}
	return s
}

// listedIDs are identifiers chosen so that byte order differs from
// case-insensitive and locale order: B < Z < a < a-b < a.b < ab < b.
var listedIDs = []string{"ab", "B", "a-b", "b", "Z", "a", "a.b"}

// sortedIDs returns ids in byte order.
func sortedIDs(ids []string) []string {
	out := slices.Clone(ids)
	slices.Sort(out)
	return out
}

// pageAll reads every page of size limit with fetch, checking that each
// page but the last is full, and returns the ids in the order listed.
func pageAll[T any](t *testing.T, what string, limit int, fetch func(after string) ([]T, error), id func(T) string, each func(T)) []string {
	t.Helper()
	var ids []string
	after := ""
	for pages := 0; ; pages++ {
		if pages > 100 {
			t.Fatalf("%s: more than 100 pages: the cursor does not advance", what)
		}
		page, err := fetch(after)
		noErr(t, err, what)
		if len(page) > limit {
			t.Fatalf("%s: a page of %d records with Limit %d", what, len(page), limit)
		}
		for _, r := range page {
			ids = append(ids, id(r))
			each(r)
		}
		if len(page) < limit {
			return ids
		}
		after = id(page[len(page)-1])
	}
}

func checkIDs(t *testing.T, what string, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("%s listed %q, want %q (every record once, in byte order)", what, got, want)
	}
}

func testListKeysPagedInByteOrder(t *testing.T, e *env) {
	s := e.lister()
	const other = contract.Scope("scope-b")
	want := map[string]contract.KeyRecord{}
	for i, id := range listedIDs {
		req := e.claimReq("key-" + id)
		req.Fingerprint = fmt.Sprintf("fp-%d", i)
		c := mustClaim(t, e.ctx, s, req, contract.ClaimNew)
		want[req.Key] = c.Record
		if i%2 == 0 {
			want[req.Key] = mustComplete(t, e.ctx, s, contract.Completion{KeyRef: req.KeyRef, Token: c.Token, Outcome: testOutcome(id), Retain: time.Hour})
		}
	}
	req := e.claimReq("key-other")
	req.Scope = other
	mustClaim(t, e.ctx, s, req, contract.ClaimNew)

	var wantIDs []string
	for _, id := range sortedIDs(listedIDs) {
		wantIDs = append(wantIDs, "key-"+id)
	}
	for _, limit := range []int{1, 2, 3, 1000} {
		what := fmt.Sprintf("ListKeys (Limit %d)", limit)
		got := pageAll(t, what, limit, func(after string) ([]contract.KeyRecord, error) {
			return s.ListKeys(e.ctx, contract.KeyListQuery{After: after, Limit: limit})
		}, func(r contract.KeyRecord) string { return r.Key }, func(r contract.KeyRecord) {
			if w, ok := want[r.Key]; ok {
				checkKey(t, what+" record "+r.Key, r, w)
			}
		})
		checkIDs(t, what, got, wantIDs)
	}
	page, err := s.ListKeys(e.ctx, contract.KeyListQuery{Scope: other})
	noErr(t, err, "ListKeys in another scope")
	if len(page) != 1 || page[0].Key != "key-other" || page[0].Scope != other {
		t.Errorf("ListKeys in scope %s = %d records (%s), want only key-other", scopeName(other), len(page), keyList(page))
	}
	// A cursor past every key gives an empty page, not an error.
	page, err = s.ListKeys(e.ctx, contract.KeyListQuery{After: "key-zzz"})
	noErr(t, err, "ListKeys after the last key")
	if len(page) != 0 {
		t.Errorf("ListKeys after the last key = %s, want none", keyList(page))
	}
}

func keyList(rs []contract.KeyRecord) string {
	ks := make([]string, len(rs))
	for i, r := range rs {
		ks[i] = string(r.Scope) + "/" + r.Key
	}
	return strings.Join(ks, ", ")
}

func testListKeysFilterByState(t *testing.T, e *env) {
	s := e.lister()
	claimed := []string{"key-1", "key-3"}
	completed := []string{"key-2", "key-4"}
	for _, k := range claimed {
		mustClaim(t, e.ctx, s, e.claimReq(k), contract.ClaimNew)
	}
	for _, k := range completed {
		c := mustClaim(t, e.ctx, s, e.claimReq(k), contract.ClaimNew)
		mustComplete(t, e.ctx, s, contract.Completion{KeyRef: c.Record.KeyRef, Token: c.Token, Outcome: testOutcome(k)})
	}
	for _, f := range []struct {
		state contract.KeyState
		want  []string
	}{
		{"", []string{"key-1", "key-2", "key-3", "key-4"}},
		{contract.KeyClaimed, claimed},
		{contract.KeyCompleted, completed},
	} {
		what := fmt.Sprintf("ListKeys (State %q, Limit 1)", f.state)
		got := pageAll(t, what, 1, func(after string) ([]contract.KeyRecord, error) {
			return s.ListKeys(e.ctx, contract.KeyListQuery{State: f.state, After: after, Limit: 1})
		}, func(r contract.KeyRecord) string { return r.Key }, func(r contract.KeyRecord) {
			if f.state != "" && r.State != f.state {
				t.Errorf("%s listed %s in state %s", what, r.Key, r.State)
			}
			checkStoredKey(t, e.ctx, s, r)
		})
		checkIDs(t, what, got, f.want)
	}
}

func testListKeysPastRetentionNotListed(t *testing.T, e *env) {
	s := e.lister()
	short := mustClaim(t, e.ctx, s, e.claimReq("key-short"), contract.ClaimNew)
	mustComplete(t, e.ctx, s, contract.Completion{KeyRef: short.Record.KeyRef, Token: short.Token, Outcome: testOutcome("short"), Retain: time.Minute})
	long := mustClaim(t, e.ctx, s, e.claimReq("key-long"), contract.ClaimNew)
	mustComplete(t, e.ctx, s, contract.Completion{KeyRef: long.Record.KeyRef, Token: long.Token, Outcome: testOutcome("long"), Retain: time.Hour})
	abandoned := mustClaim(t, e.ctx, s, e.claimReq("key-abandoned"), contract.ClaimNew)

	e.advance(2 * time.Minute)
	// The abandoned claim expired long ago but is a record until Cleanup
	// deletes it; the short outcome is past retention (GetKey: NotFound).
	for _, f := range []struct {
		state contract.KeyState
		want  []string
	}{
		{"", []string{"key-abandoned", "key-long"}},
		{contract.KeyCompleted, []string{"key-long"}},
		{contract.KeyClaimed, []string{"key-abandoned"}},
	} {
		page, err := s.ListKeys(e.ctx, contract.KeyListQuery{State: f.state})
		noErr(t, err, "ListKeys")
		got := make([]string, len(page))
		for i, r := range page {
			got[i] = r.Key
		}
		checkIDs(t, fmt.Sprintf("ListKeys (State %q) after the short retention ended", f.state), got, f.want)
		for _, r := range page {
			if r.Key == "key-abandoned" {
				e.checkTime(t, "LeaseUntil of the abandoned claim as listed", r.LeaseUntil, abandoned.Record.LeaseUntil)
			}
		}
	}
}

func testListLeasesPagedInByteOrder(t *testing.T, e *env) {
	s := e.lister()
	const other = contract.Scope("scope-b")
	want := map[string]contract.Lease{}
	for i, id := range listedIDs {
		l := mustAcquire(t, e.ctx, s, e.leaseReq("res-"+id, fmt.Sprintf("owner-%d", i)))
		want[l.Resource] = l
	}
	released := mustAcquire(t, e.ctx, s, e.leaseReq("res-released", "owner-r"))
	ok, err := s.ReleaseLease(e.ctx, released)
	noErr(t, err, "ReleaseLease")
	if !ok {
		t.Fatal("ReleaseLease = false for the holder")
	}
	req := e.leaseReq("res-other", "owner-o")
	req.Scope = other
	mustAcquire(t, e.ctx, s, req)

	var wantIDs []string
	for _, id := range sortedIDs(listedIDs) {
		wantIDs = append(wantIDs, "res-"+id)
	}
	for _, held := range []bool{false, true} {
		for _, limit := range []int{1, 3, 1000} {
			what := fmt.Sprintf("ListLeases (Held %v, Limit %d)", held, limit)
			got := pageAll(t, what, limit, func(after string) ([]contract.Lease, error) {
				return s.ListLeases(e.ctx, contract.LeaseListQuery{Held: held, After: after, Limit: limit})
			}, func(l contract.Lease) string { return l.Resource }, func(l contract.Lease) {
				if w, ok := want[l.Resource]; ok {
					if d := diffLease(l, w); d != "" {
						t.Errorf("%s lease %s: %s", what, l.Resource, d)
					}
				}
			})
			checkIDs(t, what+" (a released lease is not listed)", got, wantIDs)
		}
	}
	page, err := s.ListLeases(e.ctx, contract.LeaseListQuery{Scope: other})
	noErr(t, err, "ListLeases in another scope")
	if len(page) != 1 || page[0].Resource != "res-other" || page[0].Scope != other {
		t.Errorf("ListLeases in scope %s = %d leases, want only res-other", scopeName(other), len(page))
	}
}

func testListLeasesHeldExcludesExpired(t *testing.T, e *env) {
	s := e.lister()
	old := mustAcquire(t, e.ctx, s, e.leaseReq("res-old", "owner-1"))
	e.advance(e.ttl + e.g)
	fresh := mustAcquire(t, e.ctx, s, e.leaseReq("res-fresh", "owner-2"))

	all, err := s.ListLeases(e.ctx, contract.LeaseListQuery{})
	noErr(t, err, "ListLeases")
	if len(all) != 2 || all[0].Resource != "res-fresh" || all[1].Resource != "res-old" {
		t.Errorf("ListLeases = %d leases, want res-fresh and the expired res-old (an expired lease is a record until Cleanup)", len(all))
	} else if d := diffLease(all[1], old); d != "" {
		t.Errorf("ListLeases: the expired lease: %s", d)
	}
	held, err := s.ListLeases(e.ctx, contract.LeaseListQuery{Held: true})
	noErr(t, err, "ListLeases(Held)")
	if len(held) != 1 || held[0].Resource != "res-fresh" {
		var rs []string
		for _, l := range held {
			rs = append(rs, l.Resource)
		}
		t.Errorf("ListLeases(Held) = %q, want only res-fresh (res-old expired %v ago)", rs, e.g)
	} else if d := diffLease(held[0], fresh); d != "" {
		t.Errorf("ListLeases(Held): %s", d)
	}
}
