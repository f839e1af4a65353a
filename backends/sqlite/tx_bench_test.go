package sqlite

import (
	"context"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/durable-go/durable/contract"
)

// BenchmarkCompleteKeyTx compares a claim completed on its own
// (ClaimKey + CompleteKey: two write transactions) with one completed in a
// transaction of the caller's (ClaimKey + BeginTx + CompleteKeyTx +
// Commit), on a file with synchronous=full. See BENCHMARKS.md.
func BenchmarkCompleteKeyTx(b *testing.B) {
	for _, mode := range []string{"CompleteKey", "CompleteKeyTx"} {
		b.Run(mode, func(b *testing.B) {
			ctx := context.Background()
			be, err := NewBackend(ctx, Options{Path: filepath.Join(b.TempDir(), "bench.db"), Synchronous: "full"})
			if err != nil {
				b.Fatal(err)
			}
			defer be.Close()
			out := contract.Outcome{Code: 201, Body: []byte(`{"id":"pay_1"}`)}
			b.ResetTimer()
			for i := range b.N {
				ref := contract.KeyRef{Key: "k-" + strconv.Itoa(i)}
				c, err := be.ClaimKey(ctx, contract.ClaimRequest{KeyRef: ref, Fingerprint: "fp", TTL: time.Minute})
				if err != nil {
					b.Fatal(err)
				}
				comp := contract.Completion{KeyRef: ref, Token: c.Token, Outcome: out, Retain: time.Hour}
				if mode == "CompleteKey" {
					if _, err := be.CompleteKey(ctx, comp); err != nil {
						b.Fatal(err)
					}
					continue
				}
				tx, err := be.BeginTx(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := be.CompleteKeyTx(ctx, tx, comp); err != nil {
					b.Fatal(err)
				}
				if err := tx.Commit(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
