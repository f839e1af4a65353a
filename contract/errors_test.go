package contract_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/durable-go/durable/contract"
)

func TestErrorIsMatchesSentinelByCode(t *testing.T) {
	err := &contract.Error{Code: contract.Conflict, Op: "UpdateWorkflow", Msg: "workflow changed"}
	if !errors.Is(err, contract.ErrConflict) {
		t.Fatal("errors.Is(conflict, ErrConflict) = false")
	}
	if errors.Is(err, contract.ErrNotFound) {
		t.Fatal("errors.Is(conflict, ErrNotFound) = true")
	}
	wrapped := fmt.Errorf("outer: %w", err)
	if !errors.Is(wrapped, contract.ErrConflict) || contract.CodeOf(wrapped) != contract.Conflict {
		t.Fatal("wrapped error lost its code")
	}
	// A non-sentinel *Error is not a target that matches other errors.
	other := &contract.Error{Code: contract.Conflict, Msg: "x"}
	if errors.Is(err, other) {
		t.Fatal("non-sentinel target matched")
	}
}

func TestContextErrorsStayVisible(t *testing.T) {
	err := &contract.Error{Code: contract.OutcomeUnknown, Op: "CompleteKey", Err: context.Canceled}
	if !errors.Is(err, context.Canceled) || !errors.Is(err, contract.ErrOutcomeUnknown) {
		t.Fatal("cause or code lost")
	}
	if !strings.Contains(err.Error(), "context canceled") {
		t.Fatalf("Error() = %q, want it to say the context was canceled", err.Error())
	}
	if contract.CodeOf(context.DeadlineExceeded) != contract.Canceled {
		t.Fatal("bare context error is not Canceled")
	}
}

func TestErrorTextHidesCause(t *testing.T) {
	cause := errors.New(`pq: password authentication failed for user "bob" dsn=postgres://bob:hunter2@db/x SELECT secret`)
	err := &contract.Error{Code: contract.Unavailable, Op: "GetKey", Msg: "database unreachable", Err: cause}
	for _, leak := range []string{"hunter2", "postgres://", "SELECT", "bob"} {
		if strings.Contains(err.Error(), leak) {
			t.Fatalf("Error() %q leaks %q", err.Error(), leak)
		}
	}
	if !errors.Is(err, cause) {
		t.Fatal("cause not reachable")
	}
	if got, want := err.Error(), "durable: GetKey: unavailable: database unreachable"; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
}

func TestConflictDetailsArePrinted(t *testing.T) {
	err := &contract.Error{Code: contract.Conflict, Op: "UpdateWorkflow", Msg: "workflow changed",
		Details: &contract.Details{ExpectedStatus: "running", ActualStatus: "running", ExpectedRevision: 3, ActualRevision: 4}}
	want := `durable: UpdateWorkflow: conflict: workflow changed (status expected "running", actual "running"; revision expected 3, actual 4)`
	if err.Error() != want {
		t.Fatalf("Error() = %q\nwant      %q", err.Error(), want)
	}
}

func TestCodeOfAndRetryable(t *testing.T) {
	cases := []struct {
		err       error
		code      contract.Code
		retryable bool
	}{
		{nil, contract.Unknown, false},
		{errors.New("x"), contract.Unknown, false},
		{contract.ErrUnavailable, contract.Unavailable, true},
		{&contract.Error{Code: contract.OutcomeUnknown}, contract.OutcomeUnknown, true},
		{contract.ErrConflict, contract.Conflict, false},
		{contract.ErrLeaseBusy, contract.LeaseBusy, false},
		{context.Canceled, contract.Canceled, false},
	}
	for _, c := range cases {
		if got := contract.CodeOf(c.err); got != c.code {
			t.Errorf("CodeOf(%v) = %v, want %v", c.err, got, c.code)
		}
		if got := contract.Retryable(c.err); got != c.retryable {
			t.Errorf("Retryable(%v) = %v, want %v", c.err, got, c.retryable)
		}
	}
}

func TestCodeNames(t *testing.T) {
	seen := map[string]bool{}
	for c := contract.Unknown; c <= contract.Canceled; c++ {
		s := c.String()
		if s == "" || strings.HasPrefix(s, "code(") || seen[s] {
			t.Errorf("code %d has a bad or duplicate name %q", int(c), s)
		}
		seen[s] = true
	}
	if got := contract.Code(99).String(); got != "code(99)" {
		t.Errorf("Code(99).String() = %q", got)
	}
}

func TestStatusTerminal(t *testing.T) {
	for _, s := range []contract.Status{contract.StatusSucceeded, contract.StatusFailed, contract.StatusClosed} {
		if !s.Terminal() {
			t.Errorf("%s not terminal", s)
		}
	}
	for _, s := range []contract.Status{contract.StatusPending, contract.StatusRunning, "waiting_for_payment"} {
		if s.Terminal() {
			t.Errorf("%s terminal", s)
		}
	}
}

func TestLeaseFence(t *testing.T) {
	l := contract.Lease{Scope: "s", Resource: "r", Owner: "o", Token: 7}
	if f := l.Fence(); *f != (contract.Fence{Resource: "r", Owner: "o", Token: 7}) {
		t.Fatalf("Fence() = %+v", *f)
	}
}
