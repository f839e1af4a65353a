package durable

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
)

// The JSON helpers below are a typed layer over workflow snapshots: a
// workflow whose Snapshot is the JSON encoding of a T is read into a T,
// changed as a T and written back encoded, with the compare-and-set and
// retries of [Store.Step]. An empty (nil or zero-length) snapshot decodes as
// the zero T. A snapshot that is not the JSON of a T is a *SnapshotError
// that names the operation, the revision and the type; like every durable
// error, its text holds no user data (neither the workflow id nor
// encoding/json's message, which may quote the snapshot), and the
// encoding/json error stays reachable with errors.As (*json.SyntaxError,
// *json.UnmarshalTypeError).

// SnapshotError is a snapshot that could not be decoded into, or a value
// that could not be encoded as, the JSON of Type.
type SnapshotError struct {
	Op       string // "CreateJSON", "GetJSON" or "StepJSON"
	ID       string // the workflow's id (not part of Error)
	Revision int64  // the revision read; 0 when encoding a new workflow
	Type     string // the Go type, such as "main.order"
	Encode   bool   // encoding failed, not decoding
	Err      error  // the encoding/json error
}

func (e *SnapshotError) Error() string {
	if e.Encode {
		return "durable: " + e.Op + ": a " + e.Type + " could not be encoded as JSON"
	}
	return fmt.Sprintf("durable: %s: the snapshot (revision %d) is not the JSON of a %s", e.Op, e.Revision, e.Type)
}

func (e *SnapshotError) Unwrap() error { return e.Err }

// CreateJSON creates workflow w with the JSON encoding of v as its
// snapshot (w.Snapshot is replaced). See [Store.CreateWorkflow].
func CreateJSON[T any](ctx context.Context, s *Store, w Workflow, v T) (Workflow, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return Workflow{}, &SnapshotError{Op: "CreateJSON", ID: w.ID, Type: reflect.TypeFor[T]().String(), Encode: true, Err: err}
	}
	w.Snapshot = b
	return s.CreateWorkflow(ctx, w)
}

// GetJSON reads a workflow and decodes its snapshot into a T. See
// [Store.GetWorkflow].
func GetJSON[T any](ctx context.Context, s *Store, scope Scope, id string) (Workflow, T, error) {
	var v T
	w, err := s.GetWorkflow(ctx, scope, id)
	if err != nil {
		return Workflow{}, v, err
	}
	if err := decodeSnapshot("GetJSON", w, &v); err != nil {
		return Workflow{}, v, err
	}
	return w, v, nil
}

// StepJSON is [Store.Step] for a workflow whose snapshot is the JSON of a
// T. Each round reads the workflow, decodes its snapshot into a fresh T,
// calls apply with the record and a pointer to that T, and writes the T as
// apply left it (re-encoded) with the status apply returns ("" keeps the
// current status), conditional on the status and revision that were read.
// On a conflict it starts over from a new read, as Step does, so apply may
// run several times and must depend only on what it is given.
//
// It returns the written record and the T it holds. The errors are Step's
// (ErrTerminal without calling apply, ErrFenced, ErrNotFound, the last
// ErrConflict after opts.MaxAttempts rounds, ctx's), an error from apply
// unchanged, or a decode or encode error, which is returned at once without
// a write. The write has no RequestID; use Store.Step to set one.
func StepJSON[T any](ctx context.Context, s *Store, scope Scope, id string, opts StepOptions, apply func(cur Workflow, v *T) (Status, error)) (Workflow, T, error) {
	var zero T
	if apply == nil {
		return Workflow{}, zero, invalid("StepJSON", "apply must not be nil")
	}
	var last T
	w, err := s.Step(ctx, scope, id, opts, func(cur Workflow) (Change, error) {
		var v T
		if err := decodeSnapshot("StepJSON", cur, &v); err != nil {
			return Change{}, err
		}
		status, err := apply(cur, &v)
		if err != nil {
			return Change{}, err
		}
		if status == "" {
			status = cur.Status
		}
		b, err := json.Marshal(&v)
		if err != nil {
			return Change{}, &SnapshotError{Op: "StepJSON", ID: cur.ID, Revision: cur.Revision, Type: reflect.TypeFor[T]().String(), Encode: true, Err: err}
		}
		last = v
		return Change{Status: status, Snapshot: b}, nil
	})
	if err != nil {
		return w, zero, err
	}
	return w, last, nil
}

// decodeSnapshot decodes w's snapshot into v, leaving v as it is (the zero
// value) when the snapshot is empty.
func decodeSnapshot[T any](op string, w Workflow, v *T) error {
	if len(w.Snapshot) == 0 {
		return nil
	}
	if err := json.Unmarshal(w.Snapshot, v); err != nil {
		return &SnapshotError{Op: op, ID: w.ID, Revision: w.Revision, Type: reflect.TypeFor[T]().String(), Err: err}
	}
	return nil
}
