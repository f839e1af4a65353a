package sqlite

import (
	"context"
	"errors"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durable-go/durable/contract"
)

type abortKey struct{}

// A member whose failure ends the whole transaction (as SQLite does after
// SQLITE_FULL or an I/O error: simulated by a ROLLBACK in its body) makes
// its savepoint unusable: the batch is rolled back and every member runs
// again alone, so the members before it are applied once, not lost, and
// the failed one gets its error.
func TestCoalesceBatchAbortRunsMembersAlone(t *testing.T) {
	ctx := t.Context()
	b, err := NewBackend(ctx, Options{Path: filepath.Join(t.TempDir(), "abort.db"), Synchronous: "normal"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	errAbort := errors.New("transaction aborted")
	var aborted atomic.Int32
	b.testAfterBody = func(ctx context.Context) error {
		if ctx.Value(abortKey{}) == nil {
			return nil
		}
		aborted.Add(1)
		_, _ = b.wc.ExecContext(context.Background(), "ROLLBACK")
		return errAbort
	}
	entered, release := make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	var mu sync.Mutex
	var sizes []int
	b.testFlush = func(ctx context.Context, n int) {
		mu.Lock()
		sizes = append(sizes, n)
		mu.Unlock()
		if first.CompareAndSwap(false, true) {
			close(entered)
			<-release
		}
	}
	blocked := make(chan error, 1)
	go func() {
		_, err := b.CreateWorkflow(ctx, contract.Workflow{ID: "blocker", Status: "running"})
		blocked <- err
	}()
	<-entered
	const n = 5
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			c := ctx
			if i == 2 {
				c = context.WithValue(ctx, abortKey{}, true)
			}
			_, errs[i] = b.CreateWorkflow(c, contract.Workflow{ID: "w" + strconv.Itoa(i), Status: "running"})
		})
	}
	time.Sleep(100 * time.Millisecond)
	close(release)
	wg.Wait()
	if err := <-blocked; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if len(sizes) < 2 || sizes[1] < 3 {
		t.Fatalf("no batch with the aborting member (flush sizes %v)", sizes)
	}
	mu.Unlock()
	if aborted.Load() < 2 {
		t.Errorf("the aborting member ran %d times, want once in the batch and once alone", aborted.Load())
	}
	for i := range n {
		_, gerr := b.GetWorkflow(ctx, "", "w"+strconv.Itoa(i))
		if i == 2 {
			if !errors.Is(errs[i], errAbort) || contract.CodeOf(gerr) != contract.NotFound {
				t.Errorf("aborting member: %v, read %v", errs[i], gerr)
			}
			continue
		}
		if errs[i] != nil || gerr != nil {
			t.Errorf("member %d: %v, read %v", i, errs[i], gerr)
		}
	}
}
