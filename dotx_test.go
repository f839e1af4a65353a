package durable_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/backends/memory"
	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/exactmem"
)

// newExact returns a Store over the memory backend with a fake
// TxCompleter (internal/exactmem) on a manual clock.
func newExact(t *testing.T, opts ...durable.Option) (*durable.Store, *exactmem.Storage, *contract.ManualClock) {
	t.Helper()
	clock := contract.NewManualClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	st := exactmem.NewStorage(memory.Options{Clock: clock})
	s, err := durable.New(st.Backend(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, st, clock
}

// lostClaims makes the first n ClaimKey calls apply but lose their reply.
type lostClaims struct {
	*exactmem.Backend
	lose  atomic.Int64
	calls atomic.Int64
	toks  []string
}

func (l *lostClaims) ClaimKey(ctx context.Context, req contract.ClaimRequest) (contract.Claim, error) {
	l.calls.Add(1)
	l.toks = append(l.toks, req.Token)
	c, err := l.Backend.ClaimKey(ctx, req)
	if err == nil && l.lose.Add(-1) >= 0 {
		return contract.Claim{}, &contract.Error{Code: contract.OutcomeUnknown, Msg: "injected: the reply was lost"}
	}
	return c, err
}

func TestDoRecoversItsOwnClaimAfterALostReply(t *testing.T) {
	clock := contract.NewManualClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	l := &lostClaims{Backend: exactmem.NewStorage(memory.Options{Clock: clock}).Backend()}
	l.lose.Store(1)
	s, err := durable.New(l)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var runs atomic.Int64
	res, err := s.Do(t.Context(), doReq, durable.DoOptions{}, counter(&runs, durable.Outcome{Code: 201, Body: []byte("ok")}))
	if err != nil {
		t.Fatalf("Do after a lost claim reply = %v; want the claim recovered with the call's token", err)
	}
	if runs.Load() != 1 || res.Replayed || string(res.Outcome.Body) != "ok" {
		t.Fatalf("Do = %+v after %d runs; want one run, not replayed", res, runs.Load())
	}
	if n := l.calls.Load(); n != 2 {
		t.Fatalf("%d ClaimKey calls, want 2 (the lost one and its retry)", n)
	}
	if l.toks[0] == "" || l.toks[0] != l.toks[1] {
		t.Fatalf("claim tokens %q: want one non-empty token reused by the retry", l.toks)
	}
	// A second logical call gets a fresh token and the replay.
	res, err = s.Do(t.Context(), doReq, durable.DoOptions{}, counter(&runs, durable.Outcome{Code: 500}))
	if err != nil || !res.Replayed || runs.Load() != 1 {
		t.Fatalf("second Do = %+v, %v (runs %d); want the replay", res, err, runs.Load())
	}
	if l.toks[2] == l.toks[0] {
		t.Fatalf("the second call reused the first call's token %q", l.toks[0])
	}
}

func TestDoGivesUpOnLostClaimsAfterRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clock := contract.NewManualClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
		l := &lostClaims{Backend: exactmem.NewStorage(memory.Options{Clock: clock}).Backend()}
		l.lose.Store(100)
		s, err := durable.New(l)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		var runs atomic.Int64
		_, err = s.Do(t.Context(), doReq, durable.DoOptions{}, counter(&runs, durable.Outcome{Code: 201}))
		checkCode(t, err, contract.OutcomeUnknown)
		if runs.Load() != 0 || l.calls.Load() != 4 {
			t.Fatalf("runs %d, ClaimKey calls %d; want 0 runs and 4 claims (3 retries)", runs.Load(), l.calls.Load())
		}
	})
}

func TestDoCallerTokenIsKept(t *testing.T) {
	l := &lostClaims{Backend: exactmem.NewStorage(memory.Options{}).Backend()}
	s, err := durable.New(l)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	req := doReq
	req.Token = "caller-token-0123456789"
	var runs atomic.Int64
	if _, err := s.Do(t.Context(), req, durable.DoOptions{}, counter(&runs, durable.Outcome{Code: 201})); err != nil {
		t.Fatal(err)
	}
	if l.toks[0] != req.Token {
		t.Fatalf("Do claimed with token %q, want the caller's %q", l.toks[0], req.Token)
	}
}

func TestNewClaimToken(t *testing.T) {
	a, b := durable.NewClaimToken(), durable.NewClaimToken()
	if len(a) != 32 || a == b {
		t.Fatalf("tokens %q, %q: want 32 characters, distinct", a, b)
	}
	for _, c := range []byte(a) {
		if c < 0x21 || c > 0x7e {
			t.Fatalf("token %q has a byte outside printable ASCII", a)
		}
	}
}

func TestClaimTokenAndTombstoneValidation(t *testing.T) {
	s := newMemStore(t)
	ctx := t.Context()
	for _, tok := range []string{"short", strings.Repeat("x", 15), strings.Repeat("x", 129), "has a space in it!!", "tab\tinside-the-token", "é-not-ascii-at-all-no"} {
		req := doReq
		req.Token = tok
		_, err := s.ClaimKey(ctx, req)
		checkCode(t, err, contract.InvalidArgument)
		if strings.Contains(err.Error(), tok) {
			t.Errorf("error %q echoes the token", err)
		}
	}
	for i, tok := range []string{strings.Repeat("x", 16), strings.Repeat("~", 128), durable.NewClaimToken()} {
		req := doReq
		req.Token = tok
		req.Key = fmt.Sprintf("k-%d", i)
		if _, err := s.ClaimKey(ctx, req); err != nil {
			t.Errorf("ClaimKey with a %d-byte token: %v", len(tok), err)
		}
	}
	c, err := s.ClaimKey(ctx, doReq)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.CompleteKey(ctx, durable.Completion{KeyRef: doReq.KeyRef, Token: c.Token, Outcome: durable.Outcome{Code: 200}, Tombstone: -time.Second})
	checkCode(t, err, contract.InvalidArgument)
	for _, d := range []time.Duration{0, -time.Hour} {
		if _, err := durable.New(memory.NewStorage(memory.Options{}).Backend(), durable.WithTombstoneRetention(d)); durable.CodeOf(err) != contract.InvalidArgument {
			t.Errorf("WithTombstoneRetention(%v): %v, want InvalidArgument", d, err)
		}
	}
}

// recordingBackend records the Completion the backend receives.
type recordingBackend struct {
	contract.Backend
	got durable.Completion
}

func (r *recordingBackend) CompleteKey(ctx context.Context, c contract.Completion) (contract.KeyRecord, error) {
	r.got = c
	return r.Backend.CompleteKey(ctx, c)
}

func TestCompletionDefaults(t *testing.T) {
	for _, tc := range []struct {
		name           string
		opts           []durable.Option
		c              durable.Completion
		retain, tombst time.Duration
	}{
		{"store defaults", nil, durable.Completion{}, durable.DefaultKeyRetention, durable.DefaultTombstoneRetention},
		{"options", []durable.Option{durable.WithKeyRetention(time.Hour), durable.WithTombstoneRetention(3 * time.Hour)}, durable.Completion{}, time.Hour, 3 * time.Hour},
		{"given", nil, durable.Completion{Retain: time.Minute, Tombstone: 2 * time.Minute}, time.Minute, 2 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rb := &recordingBackend{Backend: memory.NewStorage(memory.Options{}).Backend()}
			s, err := durable.New(rb, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			c, err := s.ClaimKey(t.Context(), doReq)
			if err != nil {
				t.Fatal(err)
			}
			comp := tc.c
			comp.KeyRef, comp.Token, comp.Outcome = doReq.KeyRef, c.Token, durable.Outcome{Code: 200}
			if _, err := s.CompleteKey(t.Context(), comp); err != nil {
				t.Fatal(err)
			}
			if rb.got.Retain != tc.retain || rb.got.Tombstone != tc.tombst {
				t.Fatalf("backend got Retain %v Tombstone %v, want %v and %v", rb.got.Retain, rb.got.Tombstone, tc.retain, tc.tombst)
			}
		})
	}
}

func TestDoOutcomeExpired(t *testing.T) {
	s, _, clock := newExact(t, durable.WithKeyRetention(time.Hour), durable.WithTombstoneRetention(48*time.Hour))
	ctx := t.Context()
	var runs atomic.Int64
	fn := counter(&runs, durable.Outcome{Code: 201, Body: []byte("paid")})
	if _, err := s.Do(ctx, doReq, durable.DoOptions{}, fn); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Hour)
	res, err := s.Do(ctx, doReq, durable.DoOptions{}, fn)
	if !errors.Is(err, durable.ErrOutcomeExpired) || runs.Load() != 1 {
		t.Fatalf("Do past the retention = %+v, %v (runs %d); want ErrOutcomeExpired and no run", res, err, runs.Load())
	}
	rec, err := s.GetKey(ctx, doReq.KeyRef)
	if err != nil || rec.State != durable.KeyExpired || rec.Outcome == nil || rec.Outcome.Code != 201 || rec.Outcome.Body != nil {
		t.Fatalf("GetKey of the tombstone = %+v, %v", rec, err)
	}
	clock.Advance(48 * time.Hour)
	if _, err := s.Do(ctx, doReq, durable.DoOptions{}, fn); err != nil || runs.Load() != 2 {
		t.Fatalf("Do past the tombstone = %v (runs %d); want a new run", err, runs.Load())
	}
}

func TestTxUnimplementedOnMemory(t *testing.T) {
	s := newMemStore(t)
	ctx := t.Context()
	if s.CanCompleteInTx() {
		t.Fatal("CanCompleteInTx on memory = true")
	}
	_, err := s.BeginTx(ctx)
	checkCode(t, err, contract.Unimplemented)
	c, err := s.ClaimKey(ctx, doReq)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.CompleteKeyTx(ctx, struct{}{}, durable.Completion{KeyRef: doReq.KeyRef, Token: c.Token, Outcome: durable.Outcome{Code: 200}})
	checkCode(t, err, contract.Unimplemented)
	if !strings.Contains(err.Error(), "CompleteKey") || !strings.Contains(err.Error(), "TxCompleter") {
		t.Errorf("error %q does not say which path to use", err)
	}
	ran := false
	req := doReq
	req.Key = "other"
	_, err = durable.DoTx(ctx, s, req, durable.DoOptions{}, func(context.Context, durable.Tx) (durable.Outcome, error) {
		ran = true
		return durable.Outcome{}, nil
	})
	checkCode(t, err, contract.Unimplemented)
	if ran {
		t.Fatal("fn ran")
	}
	assertReleased(t, s, req.KeyRef)
}

func TestCompleteKeyTxValidates(t *testing.T) {
	s, _, _ := newExact(t)
	ctx := t.Context()
	tx, err := s.BeginTx(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	for name, c := range map[string]durable.Completion{
		"bad key":            {KeyRef: durable.KeyRef{Key: "bad key"}, Token: "tok-0123456789abcdef", Outcome: durable.Outcome{Code: 200}},
		"no token":           {KeyRef: doReq.KeyRef, Outcome: durable.Outcome{Code: 200}},
		"negative tombstone": {KeyRef: doReq.KeyRef, Token: "tok-0123456789abcdef", Tombstone: -1},
		"negative retain":    {KeyRef: doReq.KeyRef, Token: "tok-0123456789abcdef", Retain: -1},
	} {
		_, err := s.CompleteKeyTx(ctx, tx, c)
		if durable.CodeOf(err) != contract.InvalidArgument {
			t.Errorf("%s: %v, want InvalidArgument", name, err)
		}
	}
	_, err = s.CompleteKeyTx(ctx, nil, durable.Completion{KeyRef: doReq.KeyRef, Token: "tok-0123456789abcdef"})
	checkCode(t, err, contract.InvalidArgument)
}

// payment is the effect the DoTx tests write through the transaction.
type ledger struct{ entries atomic.Int64 }

func (l *ledger) pay(out durable.Outcome, fnErr error) func(ctx context.Context, tx *exactmem.Tx) (durable.Outcome, error) {
	return func(ctx context.Context, tx *exactmem.Tx) (durable.Outcome, error) {
		tx.Exec(func() { l.entries.Add(1) })
		return out, fnErr
	}
}

func TestDoTx(t *testing.T) {
	ok := durable.Outcome{Code: 201, Body: []byte("receipt")}
	t.Run("commits the effect and the outcome together", func(t *testing.T) {
		s, st, _ := newExact(t)
		var l ledger
		res, err := durable.DoTx(t.Context(), s, doReq, durable.DoOptions{}, l.pay(ok, nil))
		if err != nil || res.Replayed || string(res.Outcome.Body) != "receipt" || res.Record.State != durable.KeyCompleted {
			t.Fatalf("DoTx = %+v, %v", res, err)
		}
		if l.entries.Load() != 1 || st.Commits.Load() != 1 || st.Rollbacks.Load() != 0 {
			t.Fatalf("entries %d commits %d rollbacks %d", l.entries.Load(), st.Commits.Load(), st.Rollbacks.Load())
		}
		rec, err := s.GetKey(t.Context(), doReq.KeyRef)
		if err != nil || rec.State != durable.KeyCompleted || string(rec.Outcome.Body) != "receipt" {
			t.Fatalf("stored %+v, %v", rec, err)
		}
		res, err = durable.DoTx(t.Context(), s, doReq, durable.DoOptions{}, l.pay(durable.Outcome{Code: 500}, nil))
		if err != nil || !res.Replayed || l.entries.Load() != 1 {
			t.Fatalf("retry = %+v, %v (entries %d); want the replay", res, err, l.entries.Load())
		}
	})
	t.Run("function error rolls back and releases", func(t *testing.T) {
		s, st, _ := newExact(t)
		var l ledger
		boom := errors.New("declined")
		_, err := durable.DoTx(t.Context(), s, doReq, durable.DoOptions{}, l.pay(ok, boom))
		if err != boom {
			t.Fatalf("DoTx = %v, want fn's error unchanged", err)
		}
		if l.entries.Load() != 0 || st.Rollbacks.Load() != 1 || st.Commits.Load() != 0 {
			t.Fatalf("entries %d commits %d rollbacks %d", l.entries.Load(), st.Commits.Load(), st.Rollbacks.Load())
		}
		assertReleased(t, s, doReq.KeyRef)
	})
	t.Run("panic rolls back and releases", func(t *testing.T) {
		s, st, _ := newExact(t)
		func() {
			defer func() {
				if recover() == nil {
					t.Fatal("the panic did not continue")
				}
			}()
			durable.DoTx(t.Context(), s, doReq, durable.DoOptions{}, func(ctx context.Context, tx *exactmem.Tx) (durable.Outcome, error) {
				tx.Exec(func() { t.Error("the effect applied") })
				panic("boom")
			})
		}()
		if st.Rollbacks.Load() != 1 || st.Commits.Load() != 0 {
			t.Fatalf("commits %d rollbacks %d", st.Commits.Load(), st.Rollbacks.Load())
		}
		assertReleased(t, s, doReq.KeyRef)
	})
	t.Run("wrong transaction type", func(t *testing.T) {
		s, st, _ := newExact(t)
		ran := false
		_, err := durable.DoTx(t.Context(), s, doReq, durable.DoOptions{}, func(context.Context, *strings.Builder) (durable.Outcome, error) {
			ran = true
			return ok, nil
		})
		checkCode(t, err, contract.InvalidArgument)
		if ran || !strings.Contains(err.Error(), "*strings.Builder") || !strings.Contains(err.Error(), "*exactmem.Tx") {
			t.Fatalf("ran %v, error %q: want no run and both types named", ran, err)
		}
		if st.Rollbacks.Load() != 1 {
			t.Fatalf("rollbacks %d", st.Rollbacks.Load())
		}
		assertReleased(t, s, doReq.KeyRef)
	})
	t.Run("durable.Tx and any", func(t *testing.T) {
		s, _, _ := newExact(t)
		if _, err := durable.DoTx(t.Context(), s, doReq, durable.DoOptions{}, func(_ context.Context, tx durable.Tx) (durable.Outcome, error) {
			if _, isRaw := tx.Raw().(*exactmem.Tx); !isRaw {
				t.Errorf("Raw = %T", tx.Raw())
			}
			return ok, nil
		}); err != nil {
			t.Fatal(err)
		}
		req := doReq
		req.Key = "charge-2"
		if _, err := durable.DoTx(t.Context(), s, req, durable.DoOptions{}, func(_ context.Context, tx any) (durable.Outcome, error) {
			if _, isRaw := tx.(*exactmem.Tx); !isRaw {
				t.Errorf("tx = %T", tx)
			}
			return ok, nil
		}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("commit reply lost after it applied", func(t *testing.T) {
		s, st, _ := newExact(t)
		st.CommitFault = func() (bool, error) {
			return true, &contract.Error{Code: contract.OutcomeUnknown, Msg: "injected: commit reply lost"}
		}
		var l ledger
		_, err := durable.DoTx(t.Context(), s, doReq, durable.DoOptions{}, l.pay(ok, nil))
		checkCode(t, err, contract.OutcomeUnknown)
		st.CommitFault = nil
		res, err := durable.DoTx(t.Context(), s, doReq, durable.DoOptions{}, l.pay(ok, nil))
		if err != nil || !res.Replayed || l.entries.Load() != 1 {
			t.Fatalf("retry = %+v, %v (entries %d); want the replay of the committed outcome", res, err, l.entries.Load())
		}
	})
	t.Run("commit reply lost before it applied keeps the claim", func(t *testing.T) {
		s, st, _ := newExact(t)
		st.CommitFault = func() (bool, error) {
			return false, &contract.Error{Code: contract.OutcomeUnknown, Msg: "injected: commit reply lost"}
		}
		var l ledger
		_, err := durable.DoTx(t.Context(), s, doReq, durable.DoOptions{}, l.pay(ok, nil))
		checkCode(t, err, contract.OutcomeUnknown)
		st.CommitFault = nil
		_, err = durable.DoTx(t.Context(), s, doReq, durable.DoOptions{}, l.pay(ok, nil))
		if !errors.Is(err, durable.ErrInFlight) || l.entries.Load() != 0 {
			t.Fatalf("retry = %v (entries %d); want ErrInFlight while the claim lives, never a second run at once", err, l.entries.Load())
		}
	})
	t.Run("commit that certainly failed releases", func(t *testing.T) {
		s, st, _ := newExact(t)
		st.CommitFault = func() (bool, error) {
			return false, &contract.Error{Code: contract.Unavailable, Msg: "injected: not sent"}
		}
		var l ledger
		_, err := durable.DoTx(t.Context(), s, doReq, durable.DoOptions{}, l.pay(ok, nil))
		checkCode(t, err, contract.Unavailable)
		assertReleased(t, s, doReq.KeyRef)
	})
	t.Run("a plain commit error may have applied", func(t *testing.T) {
		s, st, _ := newExact(t)
		st.CommitFault = func() (bool, error) { return false, errors.New("connection reset") }
		var l ledger
		_, err := durable.DoTx(t.Context(), s, doReq, durable.DoOptions{}, l.pay(ok, nil))
		checkCode(t, err, contract.OutcomeUnknown)
		if rec, err := s.GetKey(t.Context(), doReq.KeyRef); err != nil || rec.State != durable.KeyClaimed {
			t.Fatalf("GetKey = %+v, %v; want the claim kept", rec, err)
		}
	})
	t.Run("begin fails", func(t *testing.T) {
		s, st, _ := newExact(t)
		st.BeginErr = &contract.Error{Code: contract.Unavailable, Msg: "injected"}
		ran := false
		_, err := durable.DoTx(t.Context(), s, doReq, durable.DoOptions{}, func(context.Context, *exactmem.Tx) (durable.Outcome, error) {
			ran = true
			return ok, nil
		})
		checkCode(t, err, contract.Unavailable)
		if ran {
			t.Fatal("fn ran")
		}
		assertReleased(t, s, doReq.KeyRef)
	})
	t.Run("a stale claim is fenced and nothing commits", func(t *testing.T) {
		s, st, _ := newExact(t)
		var l ledger
		_, err := durable.DoTx(t.Context(), s, doReq, durable.DoOptions{}, func(ctx context.Context, tx *exactmem.Tx) (durable.Outcome, error) {
			tx.Exec(func() { l.entries.Add(1) })
			// An operator deletes the claim while fn runs.
			if _, err := s.DeleteRecord(ctx, durable.KindKey, doReq.Scope, doReq.Key); err != nil {
				t.Error(err)
			}
			return ok, nil
		})
		checkCode(t, err, contract.Fenced)
		if l.entries.Load() != 0 || st.Commits.Load() != 0 || st.Rollbacks.Load() != 1 {
			t.Fatalf("entries %d commits %d rollbacks %d", l.entries.Load(), st.Commits.Load(), st.Rollbacks.Load())
		}
	})
	t.Run("renewals stop before the completion", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s, _, _ := newExact(t)
			req := doReq
			req.TTL = 3 * time.Second
			_, err := durable.DoTx(t.Context(), s, req, durable.DoOptions{}, func(ctx context.Context, tx *exactmem.Tx) (durable.Outcome, error) {
				time.Sleep(5 * time.Second) // two renewals
				return ok, ctx.Err()
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	})
}
