package contract_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/durable-go/durable/contract"
)

func TestTokensExhausted(t *testing.T) {
	cause := errors.New("driver text that must not be printed")
	for _, c := range []error{nil, cause} {
		err := error(contract.TokensExhausted(c))
		if !errors.Is(err, contract.ErrTokensExhausted) {
			t.Errorf("errors.Is(%v, ErrTokensExhausted) = false", err)
		}
		if !errors.Is(err, contract.ErrMisconfigured) || contract.CodeOf(err) != contract.Misconfigured {
			t.Errorf("code = %v, want misconfigured", contract.CodeOf(err))
		}
		if contract.Retryable(err) {
			t.Errorf("Retryable = true, want false")
		}
		if c != nil && !errors.Is(err, cause) {
			t.Errorf("the cause is not in the chain")
		}
		if msg := err.Error(); strings.Contains(msg, "driver text") || !strings.Contains(msg, "fencing-token counter is at its maximum") {
			t.Errorf("Error() = %q", msg)
		}
	}
	if errors.Is(&contract.Error{Code: contract.Misconfigured, Msg: "bad DSN"}, contract.ErrTokensExhausted) {
		t.Errorf("another Misconfigured error matches ErrTokensExhausted")
	}
}
