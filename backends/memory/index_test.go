package memory

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/durable-go/durable/contract"
)

// TestIDIndex checks the chunked index against a sorted slice over random
// inserts, deletes and walks, with enough IDs to split and merge chunks.
func TestIDIndex(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	var x idIndex[struct{}]
	set := map[string]bool{}
	for step := range 20000 {
		id := fmt.Sprintf("id-%04d", rng.IntN(3000))
		if rng.IntN(3) > 0 || step < 3000 {
			if got, want := x.insert(id, struct{}{}), !set[id]; got != want {
				t.Fatalf("insert(%q) = %v, want %v", id, got, want)
			}
			set[id] = true
		} else {
			if got, want := x.delete(id), set[id]; got != want {
				t.Fatalf("delete(%q) = %v, want %v", id, got, want)
			}
			delete(set, id)
		}
		if step%997 != 0 {
			continue
		}
		want := make([]string, 0, len(set))
		for id := range set {
			want = append(want, id)
		}
		slices.Sort(want)
		if x.n != len(want) {
			t.Fatalf("n = %d, want %d", x.n, len(want))
		}
		for _, after := range []string{"", "id-0000", "id-1500", "id-15000", "id-2999", "zz"} {
			var got []string
			x.ascend(after, func(id string, _ struct{}) bool { got = append(got, id); return true })
			i, _ := slices.BinarySearch(want, after)
			w := want[i:]
			if i < len(want) && want[i] == after {
				w = want[i+1:]
			}
			if !slices.Equal(got, w) {
				t.Fatalf("after %q: %d IDs, want %d", after, len(got), len(w))
			}
		}
		for i, c := range x.chunks {
			sorted := slices.IsSortedFunc(c, byID[struct{}])
			if len(c) == 0 || len(c) > maxChunk || !sorted || (i > 0 && x.chunks[i-1][len(x.chunks[i-1])-1].id >= c[0].id) {
				t.Fatalf("chunk %d malformed (len %d)", i, len(c))
			}
		}
	}
}

// checkIndexes fails unless the indexes hold exactly the records of the
// maps: every workflow in the eager workflow indexes, and, in each group a
// lazy index (keys, claimed keys, leases) has built, exactly that group's
// records. built counts the groups of the lazy indexes.
func checkIndexes(t *testing.T, s *Storage) (built int) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := func(n int, ascend func(string, func(string) bool)) []string {
		var out []string
		ascend("", func(id string) bool { out = append(out, id); return true })
		if len(out) != n {
			t.Errorf("index walks %d IDs, counts %d", len(out), n)
		}
		return out
	}
	// The workflow indexes hold each workflow's record, the others nothing.
	wfIDs := func(g scopeStatus, x *idIndex[*contract.Workflow]) []string {
		return ids(x.n, func(after string, fn func(string) bool) {
			x.ascend(after, func(id string, w *contract.Workflow) bool {
				if w != s.workflows[recKey{g.scope, id}] {
					t.Errorf("workflow %q is indexed with another record than the map's", id)
				}
				return fn(id)
			})
		})
	}
	plainIDs := func(x *idIndex[struct{}]) []string {
		return ids(x.n, func(after string, fn func(string) bool) {
			x.ascend(after, func(id string, _ struct{}) bool { return fn(id) })
		})
	}
	sorted := func(v []string) []string { slices.Sort(v); return v }
	want := func(m map[recKey]bool, g contract.Scope) []string {
		var out []string
		for k := range m {
			if k.scope == g {
				out = append(out, k.id)
			}
		}
		return sorted(out)
	}
	wf := 0
	for g, x := range s.idx.workflows.m {
		wf += x.n
		wfIDs(scopeStatus{scope: g}, x)
	}
	wfs := 0
	for g, x := range s.idx.workflowsStatus.m {
		wfs += x.n
		for _, id := range wfIDs(g, x) {
			if w := s.workflows[recKey{g.scope, id}]; w == nil || w.Status != g.status {
				t.Errorf("workflow %q indexed under status %q", id, g.status)
			}
		}
	}
	if wf != len(s.workflows) || wfs != len(s.workflows) {
		t.Errorf("the workflow indexes hold %d and %d workflows, the map %d", wf, wfs, len(s.workflows))
	}
	keys, claimed, leases := map[recKey]bool{}, map[recKey]bool{}, map[recKey]bool{}
	for k, r := range s.keys {
		keys[k] = true
		if !r.completed {
			claimed[k] = true
		}
	}
	for k := range s.leases {
		leases[k] = true
	}
	for _, c := range []struct {
		name string
		set  indexSet[contract.Scope, struct{}]
		recs map[recKey]bool
	}{{"keys", s.idx.keys, keys}, {"claimed keys", s.idx.keysClaimed, claimed}, {"leases", s.idx.leases, leases}} {
		for g, x := range c.set.m {
			built++
			if got, w := plainIDs(x), want(c.recs, g); !slices.Equal(got, w) {
				t.Errorf("the index of %s of scope %q holds %q, the map %q", c.name, g, got, w)
			}
		}
	}
	return built
}

// TestIndexesInStep runs every writing path concurrently on a few scopes
// and IDs, then checks that the indexes match the maps.
func TestIndexesInStep(t *testing.T) {
	clock := contract.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	s := NewStorage(Options{Clock: clock})
	ctx := context.Background()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := s.Backend()
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for range 3000 {
				scope := contract.Scope([]string{"", "t1"}[rng.IntN(2)])
				id := fmt.Sprintf("x%02d", rng.IntN(40))
				switch rng.IntN(10) {
				case 0:
					b.CreateWorkflow(ctx, contract.Workflow{Scope: scope, ID: id, Status: contract.StatusPending})
				case 1:
					st := []contract.Status{contract.StatusRunning, contract.StatusSucceeded}[rng.IntN(2)]
					b.UpdateWorkflow(ctx, contract.Update{Scope: scope, ID: id, ExpectStatus: contract.StatusPending, Status: st})
					b.UpdateWorkflow(ctx, contract.Update{Scope: scope, ID: id, ExpectStatus: contract.StatusRunning, Status: contract.StatusFailed})
				case 2:
					c, err := b.ClaimKey(ctx, contract.ClaimRequest{KeyRef: contract.KeyRef{Scope: scope, Key: id}, Fingerprint: "f", TTL: time.Second})
					if err == nil && c.Token != "" {
						switch rng.IntN(3) {
						case 0:
							b.CompleteKey(ctx, contract.Completion{KeyRef: c.Record.KeyRef, Token: c.Token, Outcome: contract.Outcome{Code: 200}, Retain: time.Second})
						case 1:
							b.ReleaseKey(ctx, c.Record.KeyRef, c.Token)
						}
					}
				case 3:
					b.AcquireLease(ctx, contract.LeaseRequest{Scope: scope, Resource: id, Owner: "o", TTL: time.Second})
				case 4:
					if l, err := b.GetLease(ctx, scope, id); err == nil {
						b.ReleaseLease(ctx, l)
					}
				case 5:
					kind := []contract.RecordKind{contract.KindWorkflow, contract.KindKey, contract.KindLease}[rng.IntN(3)]
					b.DeleteRecord(ctx, kind, scope, id)
				case 6:
					clock.Advance(300 * time.Millisecond)
				case 7:
					b.Cleanup(ctx, contract.CleanupRequest{Limit: 5})
				case 8:
					b.ListWorkflows(ctx, contract.ListQuery{Scope: scope, Status: contract.StatusPending, After: id, Limit: 5})
					b.ListKeys(ctx, contract.KeyListQuery{Scope: scope, State: contract.KeyClaimed, Limit: 5})
					b.ListKeys(ctx, contract.KeyListQuery{Scope: scope, After: id, Limit: 5})
				case 9:
					b.ListLeases(ctx, contract.LeaseListQuery{Scope: scope, Held: true, After: id, Limit: 5})
				}
			}
		}()
	}
	wg.Wait()
	if built := checkIndexes(t, s); built < 6 {
		t.Errorf("the listings built %d lazy indexes, want those of keys, claimed keys and leases in both scopes", built)
	}
}

// TestLazyIndexes: a store that never lists keys or leases keeps no index
// of them; the first listing of a scope builds that scope's index from the
// records, in byte order, and from then on it follows every write.
func TestLazyIndexes(t *testing.T) {
	s := NewStorage(Options{})
	b := s.Backend()
	ctx := context.Background()
	claim := func(scope contract.Scope, key string) contract.Claim {
		t.Helper()
		c, err := b.ClaimKey(ctx, contract.ClaimRequest{KeyRef: contract.KeyRef{Scope: scope, Key: key}, Fingerprint: "f", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	list := func(scope contract.Scope, state contract.KeyState) []string {
		t.Helper()
		recs, err := b.ListKeys(ctx, contract.KeyListQuery{Scope: scope, State: state})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range recs {
			out = append(out, r.Key)
		}
		return out
	}
	for _, k := range []string{"b", "a", "é", "B", "c"} {
		claim("s", k)
	}
	claim("other", "x")
	if _, err := b.AcquireLease(ctx, contract.LeaseRequest{Scope: "s", Resource: "r", Owner: "o", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if built := checkIndexes(t, s); built != 0 {
		t.Fatalf("%d lazy indexes before any listing, want 0", built)
	}
	if got := list("s", ""); !slices.Equal(got, []string{"B", "a", "b", "c", "é"}) {
		t.Fatalf("first listing = %q", got)
	}
	c := claim("s", "aa")
	if _, err := b.CompleteKey(ctx, contract.Completion{KeyRef: c.Record.KeyRef, Token: c.Token, Outcome: contract.Outcome{Code: 200}, Retain: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.DeleteRecord(ctx, contract.KindKey, "s", "b"); err != nil {
		t.Fatal(err)
	}
	if got := list("s", ""); !slices.Equal(got, []string{"B", "a", "aa", "c", "é"}) {
		t.Errorf("after a claim, a completion and a delete = %q", got)
	}
	if got := list("s", contract.KeyClaimed); !slices.Equal(got, []string{"B", "a", "c", "é"}) {
		t.Errorf("claimed = %q", got)
	}
	if got := list("other", ""); !slices.Equal(got, []string{"x"}) {
		t.Errorf("other scope = %q", got)
	}
	if built := checkIndexes(t, s); built != 3 {
		t.Errorf("%d lazy indexes after listing keys of two scopes and claimed keys of one, want 3", built)
	}
}

func BenchmarkIDIndexInsert(b *testing.B) {
	var x idIndex[struct{}]
	perm := rand.New(rand.NewPCG(1, 2)).Perm(100_000)
	ids := make([]string, len(perm))
	for i, p := range perm {
		ids[i] = fmt.Sprintf("wf-%08d", p)
		x.insert(ids[i], struct{}{})
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		id := ids[i%len(ids)] + "x"
		x.insert(id, struct{}{})
		x.delete(id)
	}
}
