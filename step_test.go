package durable_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/backends/memory"
)

func increment(cur durable.Workflow) (durable.Change, error) {
	n, _ := strconv.Atoi(string(cur.Snapshot))
	return durable.Change{Status: durable.StatusRunning, Snapshot: []byte(strconv.Itoa(n + 1))}, nil
}

func TestStepRetriesConflictsAndLosesNoUpdate(t *testing.T) {
	ctx := context.Background()
	s, _ := memStore(t, memory.Options{})
	if _, err := s.CreateWorkflow(ctx, durable.Workflow{ID: "counter", Snapshot: []byte("0")}); err != nil {
		t.Fatal(err)
	}
	const workers, each = 8, 25
	var wg sync.WaitGroup
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < each; j++ {
				if _, err := s.Step(ctx, "", "counter", durable.StepOptions{MaxAttempts: 1000}, increment); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	w, err := s.GetWorkflow(ctx, "", "counter")
	if err != nil {
		t.Fatal(err)
	}
	if string(w.Snapshot) != strconv.Itoa(workers*each) || w.Revision != 1+workers*each {
		t.Fatalf("counter = %s at revision %d, want %d at %d", w.Snapshot, w.Revision, workers*each, 1+workers*each)
	}
}

func TestStepStopsOnTerminalFenceAndApplyError(t *testing.T) {
	ctx := context.Background()
	clock := memory.NewManualClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	s, _ := memStore(t, memory.Options{Clock: clock})
	if _, err := s.CreateWorkflow(ctx, durable.Workflow{ID: "done", Status: durable.StatusSucceeded}); err != nil {
		t.Fatal(err)
	}
	calls := 0
	_, err := s.Step(ctx, "", "done", durable.StepOptions{}, func(durable.Workflow) (durable.Change, error) {
		calls++
		return durable.Change{Status: durable.StatusRunning}, nil
	})
	if !errors.Is(err, durable.ErrTerminal) || calls != 0 {
		t.Fatalf("terminal: err=%v calls=%d", err, calls)
	}

	if _, err := s.CreateWorkflow(ctx, durable.Workflow{ID: "w", Snapshot: []byte("0")}); err != nil {
		t.Fatal(err)
	}
	bad := errors.New("invalid transition")
	if _, err := s.Step(ctx, "", "w", durable.StepOptions{}, func(durable.Workflow) (durable.Change, error) {
		return durable.Change{}, bad
	}); err != bad {
		t.Fatalf("apply error: %v", err)
	}

	l, err := s.AcquireLease(ctx, durable.LeaseRequest{Resource: "w", Owner: "a", TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Step(ctx, "", "w", durable.StepOptions{Fence: l.Fence()}, increment); err != nil {
		t.Fatalf("fenced step with a valid lease: %v", err)
	}
	clock.Advance(2 * time.Second)
	if _, err := s.Step(ctx, "", "w", durable.StepOptions{Fence: l.Fence()}, increment); !errors.Is(err, durable.ErrFenced) {
		t.Fatalf("fenced step with an expired lease: %v", err)
	}
	if _, err := s.Step(ctx, "", "missing", durable.StepOptions{}, increment); !errors.Is(err, durable.ErrNotFound) {
		t.Fatalf("missing: %v", err)
	}
	w, _ := s.GetWorkflow(ctx, "", "w")
	if string(w.Snapshot) != "1" {
		t.Fatalf("snapshot %s, want exactly one applied step", w.Snapshot)
	}
}

// conflictingBackend makes every update race with another writer.
type alwaysConflict struct{ *memory.Backend }

func (a alwaysConflict) UpdateWorkflow(ctx context.Context, u durable.Update) (durable.Workflow, error) {
	return durable.Workflow{}, &durable.Error{Code: durable.ErrConflict.Code, Msg: "injected"}
}

func TestStepGivesUpAfterMaxAttempts(t *testing.T) {
	ctx := context.Background()
	b := alwaysConflict{memory.NewStorage(memory.Options{}).Backend()}
	s, err := durable.New(b)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateWorkflow(ctx, durable.Workflow{ID: "w"}); err != nil {
		t.Fatal(err)
	}
	calls := 0
	_, err = s.Step(ctx, "", "w", durable.StepOptions{MaxAttempts: 3, MaxBackoff: time.Millisecond}, func(cur durable.Workflow) (durable.Change, error) {
		calls++
		return increment(cur)
	})
	if !errors.Is(err, durable.ErrConflict) || calls != 3 {
		t.Fatalf("err=%v calls=%d, want conflict after 3 attempts", err, calls)
	}
}
