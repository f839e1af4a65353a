package durable_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/backends/memory"
)

type order struct {
	Items []string `json:"items"`
	Paid  bool     `json:"paid"`
	Count int      `json:"count"`
}

func TestStepJSONRetriesConflictsFromAFreshDecode(t *testing.T) {
	ctx := context.Background()
	s, _ := memStore(t, memory.Options{})
	if _, err := durable.CreateJSON(ctx, s, durable.Workflow{ID: "o1"}, order{Items: []string{"a"}}); err != nil {
		t.Fatal(err)
	}
	calls := 0
	wf, got, err := durable.StepJSON(ctx, s, "", "o1", durable.StepOptions{}, func(cur durable.Workflow, o *order) (durable.Status, error) {
		calls++
		if calls == 1 {
			// Another writer commits between this round's read and write.
			if _, err := s.UpdateWorkflow(ctx, durable.Update{ID: "o1", ExpectStatus: cur.Status, ExpectRevision: cur.Revision,
				Status: durable.StatusRunning, Snapshot: []byte(`{"items":["a","b"]}`)}); err != nil {
				t.Fatal(err)
			}
		}
		o.Items = append(o.Items, "c")
		o.Paid = true
		return "", nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if calls != 2 {
		t.Fatalf("apply ran %d times, want 2 (one conflict)", calls)
	}
	if wf.Revision != 3 || wf.Status != durable.StatusRunning {
		t.Fatalf("written %d %s, want revision 3 and the other writer's status kept", wf.Revision, wf.Status)
	}
	if strings.Join(got.Items, ",") != "a,b,c" || !got.Paid {
		t.Fatalf("returned %+v, want the other writer's items plus c", got)
	}
	_, stored, err := durable.GetJSON[order](ctx, s, "", "o1")
	if err != nil || strings.Join(stored.Items, ",") != "a,b,c" || !stored.Paid {
		t.Fatalf("GetJSON = %+v, %v", stored, err)
	}
}

func TestStepJSONLosesNoUpdateUnderContention(t *testing.T) {
	ctx := context.Background()
	s, _ := memStore(t, memory.Options{})
	if _, err := s.CreateWorkflow(ctx, durable.Workflow{ID: "n"}); err != nil {
		t.Fatal(err)
	}
	const workers, each = 8, 20
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range each {
				_, _, err := durable.StepJSON(ctx, s, "", "n", durable.StepOptions{MaxAttempts: 1000}, func(_ durable.Workflow, o *order) (durable.Status, error) {
					o.Count++
					return durable.StatusRunning, nil
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	_, o, err := durable.GetJSON[order](ctx, s, "", "n")
	if err != nil || o.Count != workers*each {
		t.Fatalf("count = %d, %v; want %d", o.Count, err, workers*each)
	}
}

func TestStepJSONEmptySnapshotIsTheZeroValue(t *testing.T) {
	ctx := context.Background()
	s, _ := memStore(t, memory.Options{})
	for _, snap := range [][]byte{nil, {}} {
		id := "empty-" + map[bool]string{true: "nil", false: "zero"}[snap == nil]
		if _, err := s.CreateWorkflow(ctx, durable.Workflow{ID: id, Snapshot: snap}); err != nil {
			t.Fatal(err)
		}
		if _, o, err := durable.GetJSON[order](ctx, s, "", id); err != nil || o.Items != nil || o.Paid || o.Count != 0 {
			t.Fatalf("GetJSON on an empty snapshot = %+v, %v; want the zero order", o, err)
		}
		wf, o, err := durable.StepJSON(ctx, s, "", id, durable.StepOptions{}, func(_ durable.Workflow, o *order) (durable.Status, error) {
			if o.Items != nil || o.Paid || o.Count != 0 {
				t.Errorf("apply got %+v, want the zero order", *o)
			}
			o.Count = 1
			return durable.StatusRunning, nil
		})
		if err != nil || o.Count != 1 || string(wf.Snapshot) != `{"items":null,"paid":false,"count":1}` {
			t.Fatalf("StepJSON = %s, %+v, %v", wf.Snapshot, o, err)
		}
	}
}

func TestStepJSONDecodeErrorIsASnapshotErrorAndWritesNothing(t *testing.T) {
	ctx := context.Background()
	s, _ := memStore(t, memory.Options{})
	if _, err := s.CreateWorkflow(ctx, durable.Workflow{ID: "bad", Snapshot: []byte("not json")}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateWorkflow(ctx, durable.Workflow{ID: "mistyped", Snapshot: []byte(`{"count":"seven"}`)}); err != nil {
		t.Fatal(err)
	}
	_, _, err := durable.StepJSON(ctx, s, "", "bad", durable.StepOptions{}, func(durable.Workflow, *order) (durable.Status, error) {
		t.Error("apply called on a snapshot that does not decode")
		return "", nil
	})
	var syn *json.SyntaxError
	if !errors.As(err, &syn) {
		t.Fatalf("StepJSON err = %v, want a wrapped *json.SyntaxError", err)
	}
	var se *durable.SnapshotError
	if !errors.As(err, &se) || se.ID != "bad" || se.Revision != 1 || se.Op != "StepJSON" {
		t.Fatalf("StepJSON err = %#v, want a *SnapshotError for workflow bad at revision 1", err)
	}
	// The text names the operation and the type, never the id or the
	// snapshot (json's message quotes a character of it).
	if msg := err.Error(); msg != "durable: StepJSON: the snapshot (revision 1) is not the JSON of a durable_test.order" {
		t.Fatalf("error text %q", msg)
	}
	_, _, err = durable.GetJSON[order](ctx, s, "", "mistyped")
	var typ *json.UnmarshalTypeError
	if !errors.As(err, &typ) || !strings.Contains(err.Error(), "GetJSON: the snapshot (revision 1)") || strings.Contains(err.Error(), "mistyped") || strings.Contains(err.Error(), "seven") {
		t.Fatalf("GetJSON err = %v, want a wrapped *json.UnmarshalTypeError without the id or the value", err)
	}
	if wf, _ := s.GetWorkflow(ctx, "", "bad"); wf.Revision != 1 {
		t.Fatalf("revision %d after a decode error, want 1 (no write)", wf.Revision)
	}
}

func TestStepJSONPassesStepErrorsThrough(t *testing.T) {
	ctx := context.Background()
	s, _ := memStore(t, memory.Options{})
	noop := func(durable.Workflow, *order) (durable.Status, error) { return "", nil }
	if _, _, err := durable.StepJSON(ctx, s, "", "missing", durable.StepOptions{}, noop); !errors.Is(err, durable.ErrNotFound) {
		t.Fatalf("missing workflow: %v, want ErrNotFound", err)
	}
	durable.CreateJSON(ctx, s, durable.Workflow{ID: "done", Status: durable.StatusSucceeded}, order{Paid: true})
	if _, _, err := durable.StepJSON(ctx, s, "", "done", durable.StepOptions{}, noop); !errors.Is(err, durable.ErrTerminal) {
		t.Fatalf("terminal workflow: %v, want ErrTerminal", err)
	}
	boom := errors.New("boom")
	durable.CreateJSON(ctx, s, durable.Workflow{ID: "o"}, order{})
	if _, _, err := durable.StepJSON(ctx, s, "", "o", durable.StepOptions{}, func(durable.Workflow, *order) (durable.Status, error) {
		return "", boom
	}); err != boom {
		t.Fatalf("apply's error: %v, want it unchanged", err)
	}
	if _, _, err := durable.StepJSON[order](ctx, s, "", "o", durable.StepOptions{}, nil); !errors.Is(err, durable.ErrInvalidArgument) {
		t.Fatalf("nil apply: %v, want ErrInvalidArgument", err)
	}
	if _, err := durable.CreateJSON(ctx, s, durable.Workflow{ID: "chan"}, make(chan int)); err == nil || !strings.Contains(err.Error(), "could not be encoded as JSON") {
		t.Fatalf("CreateJSON of an unencodable value: %v", err)
	}
}
