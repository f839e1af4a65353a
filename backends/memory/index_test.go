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
	var x idIndex
	set := map[string]bool{}
	for step := range 20000 {
		id := fmt.Sprintf("id-%04d", rng.IntN(3000))
		if rng.IntN(3) > 0 || step < 3000 {
			if got, want := x.insert(id), !set[id]; got != want {
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
			x.ascend(after, func(id string) bool { got = append(got, id); return true })
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
			if len(c) == 0 || len(c) > maxChunk || !slices.IsSorted(c) || (i > 0 && x.chunks[i-1][len(x.chunks[i-1])-1] >= c[0]) {
				t.Fatalf("chunk %d malformed (len %d)", i, len(c))
			}
		}
	}
}

// checkIndexes fails unless the indexes hold exactly the records of the maps.
func checkIndexes(t *testing.T, s *Storage) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	wf, wfs, ks, kst, ls := 0, 0, 0, 0, 0
	for _, x := range s.idx.workflows {
		wf += x.n
	}
	for g, x := range s.idx.workflowsStatus {
		wfs += x.n
		x.ascend("", func(id string) bool {
			if w := s.workflows[recKey{g.scope, id}]; w == nil || w.Status != g.status {
				t.Errorf("workflow %q indexed under status %q", id, g.status)
			}
			return true
		})
	}
	for _, x := range s.idx.keys {
		ks += x.n
	}
	claimed := 0
	for _, r := range s.keys {
		if r.rec.State == contract.KeyClaimed {
			claimed++
		}
	}
	for g, x := range s.idx.keysClaimed {
		kst += x.n
		x.ascend("", func(id string) bool {
			if r := s.keys[recKey{g, id}]; r == nil || r.rec.State != contract.KeyClaimed {
				t.Errorf("key %q indexed as claimed", id)
			}
			return true
		})
	}
	for g, x := range s.idx.leases {
		ls += x.n
		x.ascend("", func(id string) bool {
			if s.leases[recKey{g, id}] == nil {
				t.Errorf("lease %q indexed but absent", id)
			}
			return true
		})
	}
	if wf != len(s.workflows) || wfs != len(s.workflows) || ks != len(s.keys) || kst != claimed || ls != len(s.leases) {
		t.Errorf("indexes hold %d/%d workflows, %d/%d keys, %d leases; maps %d, %d, %d",
			wf, wfs, ks, kst, ls, len(s.workflows), len(s.keys), len(s.leases))
	}
}

// TestIndexesInStep runs every writing path concurrently on a few scopes
// and IDs, then checks that the indexes match the maps.
func TestIndexesInStep(t *testing.T) {
	clock := NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
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
				case 9:
					b.ListLeases(ctx, contract.LeaseListQuery{Scope: scope, Held: true, After: id, Limit: 5})
				}
			}
		}()
	}
	wg.Wait()
	checkIndexes(t, s)
}

func BenchmarkIDIndexInsert(b *testing.B) {
	var x idIndex
	perm := rand.New(rand.NewPCG(1, 2)).Perm(100_000)
	ids := make([]string, len(perm))
	for i, p := range perm {
		ids[i] = fmt.Sprintf("wf-%08d", p)
		x.insert(ids[i])
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		id := ids[i%len(ids)] + "x"
		x.insert(id)
		x.delete(id)
	}
}
