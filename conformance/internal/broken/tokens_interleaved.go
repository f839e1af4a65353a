package broken

import (
	"context"

	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/exactmem"
)

// Token sources that break only when grants on several resources
// interleave: on one resource alone each behaves as a correct counter.
func init() {
	register("takeover-token-from-the-record", variant{
		doc: "new grants draw from one counter for every resource, but a takeover computes its token from the expired record (its token + 1) and stores that in the counter, stepping it back when the record was an old one",
		wrap: leaseTokens(func(st *state, _ leaseKey, prev *contract.Lease, _ contract.LeaseRequest) int64 {
			if prev != nil {
				st.next[sharedCounter] = st.visible[prev.Token] + 1 // the bug: not from the counter
				return st.next[sharedCounter]
			}
			st.next[sharedCounter]++
			return st.next[sharedCounter]
		}, nil),
	})
	register("cleanup-recomputes-token-counter", variant{
		doc: "tokens come from one counter for every resource, which Cleanup recomputes from the greatest token still stored (leaving it alone when no lease is left), stepping it back below the tokens of the records it deleted",
		wrap: func(b *exactmem.Backend, st *state) contract.Backend {
			return cleanupRecomputes{&tokenMapper{Backend: b, st: st, grant: func(st *state, _ leaseKey, _ *contract.Lease, _ contract.LeaseRequest) int64 {
				st.next[sharedCounter]++
				return st.next[sharedCounter]
			}}}
		},
	})
}

// sharedCounter is the key, matching no resource, of the counter the
// variants above share across resources.
var sharedCounter = leaseKey{}

// cleanupRecomputes recomputes the shared counter after a Cleanup that
// deleted leases.
type cleanupRecomputes struct{ *tokenMapper }

func (b cleanupRecomputes) Cleanup(ctx context.Context, r contract.CleanupRequest) (contract.CleanupResult, error) {
	res, err := b.Backend.Cleanup(ctx, r)
	if err != nil || res.Leases == 0 {
		return res, err
	}
	b.st.mu.Lock()
	keys := make([]leaseKey, 0, len(b.st.toReal))
	for k := range b.st.toReal {
		keys = append(keys, k)
	}
	b.st.mu.Unlock()
	var most int64
	found := false
	for _, k := range keys {
		l, gerr := b.GetLease(ctx, k.scope, k.resource) // visible token
		if gerr != nil {
			continue
		}
		found = true
		most = max(most, l.Token)
	}
	if found {
		b.st.mu.Lock()
		b.st.next[sharedCounter] = most // the bug
		b.st.mu.Unlock()
	}
	return res, err
}
