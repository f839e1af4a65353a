package broken

import (
	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/exactmem"
)

// Caller tokens and tombstones: mistakes of the reference layer
// (exactmem.Bugs), whose scenarios are in conformance/exactlyonce.go.
func init() {
	asIs := func(b *exactmem.Backend, _ *state) contract.Backend { return b }
	register("token-compared-case-insensitively", variant{
		doc:  "ClaimKey hands a claim back to a caller token that differs from the claim's only in case",
		wrap: asIs, bugs: exactmem.Bugs{TokenFold: true},
	})
	register("reclaimed-claim-handed-back", variant{
		doc:  "ClaimKey hands a claim that another caller reclaimed back to the old caller's token",
		wrap: asIs, bugs: exactmem.Bugs{HandBackReclaimed: true},
	})
	register("completed-key-handed-back-as-held", variant{
		doc:  "ClaimKey with the token that completed a key answers ClaimNew (held) instead of replaying it",
		wrap: asIs, bugs: exactmem.Bugs{HandBackCompleted: true},
	})
	register("tombstone-replays-payload", variant{
		doc:  "a completed key past its retention still replays its whole outcome instead of becoming a tombstone",
		wrap: asIs, bugs: exactmem.Bugs{ReplayAfterRetain: true},
	})
	register("tombstone-forgotten-at-expiry", variant{
		doc:  "the tombstone ends with the outcome (ForgetAt = ExpiresAt whatever Completion.Tombstone says), so a late retry runs again",
		wrap: asIs, bugs: exactmem.Bugs{ForgetAtExpires: true},
	})
}
