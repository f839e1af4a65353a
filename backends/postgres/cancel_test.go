package postgres

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/pgtest"
)

// TestCanceledWritesWereNotApplied cancels writes at random points while
// 16 goroutines run them, on every client library, and checks the promise
// of the Canceled and Unavailable codes: a write reported so is absent
// afterwards. (On pgx a context cancelled while the statement was in flight
// used to come back as a bare context.Canceled, which was taken for the
// wait for a pooled connection and reported Canceled although the write had
// applied.)
func TestCanceledWritesWereNotApplied(t *testing.T) {
	for _, tc := range dsnClients {
		t.Run(tc.name, func(t *testing.T) {
			srv := pgtest.Require(t)
			schema := srv.Schema(t)
			ctx := context.Background()
			b, err := tc.open(ctx, srv.DSN()+"&pool_max_conns=8", Options{Schema: schema, Tolerance: -1})
			if err != nil {
				t.Fatal(err)
			}
			s, err := durable.New(b)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()

			const workers, rounds = 16, 40
			var (
				mu       sync.Mutex
				notDone  []func() error // checks for the writes reported not applied
				counts   = map[string]int{}
				wg       sync.WaitGroup
				checkErr = func(op string, err error) bool {
					mu.Lock()
					defer mu.Unlock()
					if err == nil {
						counts["ok"]++
						return false
					}
					counts[contract.CodeOf(err).String()]++
					switch contract.CodeOf(err) {
					case contract.Canceled, contract.Unavailable:
						return true
					case contract.OutcomeUnknown:
						return false
					}
					t.Errorf("%s: unexpected error %v", op, err)
					return false
				}
			)
			// Where a cancel lands is chance: on a fast machine nearly every
			// statement finishes before its cancel request does, so passes are
			// repeated until both kinds of outcome have been seen (or the cap
			// says the test exercised too little).
			const maxPasses = 10
			exercised := func() bool {
				mu.Lock()
				defer mu.Unlock()
				return counts["canceled"] > 0 && counts["outcome unknown"] > 0
			}
			for pass := 0; pass < maxPasses && !exercised(); pass++ {
				for w := range workers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := range rounds {
							id := fmt.Sprintf("p%d-w%d-%d", pass, w, i)
							// A workflow to update, created without cancellation.
							if _, err := s.CreateWorkflow(ctx, durable.Workflow{ID: id}); err != nil {
								t.Errorf("CreateWorkflow: %v", err)
								return
							}
							_, err := s.AcquireLease(randomCancel(ctx), durable.LeaseRequest{Resource: id, Owner: "o", TTL: 10 * time.Second})
							if checkErr("AcquireLease", err) {
								mu.Lock()
								notDone = append(notDone, func() error {
									if l, err := s.GetLease(ctx, "", id); !errors.Is(err, durable.ErrNotFound) {
										return fmt.Errorf("AcquireLease %s reported canceled but the lease exists (token %d, %v)", id, l.Token, err)
									}
									return nil
								})
								mu.Unlock()
							}
							_, err = s.ClaimKey(randomCancel(ctx), durable.ClaimRequest{KeyRef: durable.KeyRef{Key: id}, Fingerprint: "f", TTL: 10 * time.Second})
							if checkErr("ClaimKey", err) {
								mu.Lock()
								notDone = append(notDone, func() error {
									if _, err := s.GetKey(ctx, durable.KeyRef{Key: id}); !errors.Is(err, durable.ErrNotFound) {
										return fmt.Errorf("ClaimKey %s reported canceled but the claim exists (%v)", id, err)
									}
									return nil
								})
								mu.Unlock()
							}
							_, err = s.UpdateWorkflow(randomCancel(ctx), durable.Update{ID: id, ExpectStatus: durable.StatusPending, Status: durable.StatusRunning})
							if checkErr("UpdateWorkflow", err) {
								mu.Lock()
								notDone = append(notDone, func() error {
									wf, err := s.GetWorkflow(ctx, "", id)
									if err != nil || wf.Revision != 1 {
										return fmt.Errorf("UpdateWorkflow %s reported canceled but revision is %d (%v)", id, wf.Revision, err)
									}
									return nil
								})
								mu.Unlock()
							}
						}
					}()
				}
				wg.Wait()
			}
			for _, check := range notDone {
				if err := check(); err != nil {
					t.Error(err)
				}
			}
			t.Logf("outcomes by code: %v (%d reported not applied)", counts, len(notDone))
			if counts["canceled"] == 0 || counts["outcome unknown"] == 0 {
				t.Errorf("cancellation never hit both before and after sending: the test exercised too little (%v)", counts)
			}
		})
	}
}

// randomCancel returns a context cancelled after a random delay of up to
// 20 ms: before, while or after the statement is sent.
func randomCancel(ctx context.Context) context.Context {
	cctx, cancel := context.WithCancel(ctx)
	time.AfterFunc(time.Duration(rand.IntN(20000))*time.Microsecond, cancel)
	return cctx
}
