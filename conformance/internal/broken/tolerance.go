package broken

import (
	"time"

	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/exactmem"
)

// A tolerance the backend reports but does not use (conformance/tolerances.go).
func init() {
	register("tolerance-fixed", variant{
		doc: "expiry is judged with a fixed tolerance of " + Tolerance.String() + " (as a backend that hard-codes its usual setting), " +
			"while ClockTolerance reports the configured one: right at the usual tolerance, wrong at any larger one",
		fixedTolerance: true,
		wrap: func(b *exactmem.Backend, st *state) contract.Backend {
			return reportsTolerance{b, st.tol}
		},
	})
}

// reportsTolerance reports tol, whatever tolerance its storage judges
// expiry with.
type reportsTolerance struct {
	*exactmem.Backend
	tol time.Duration
}

func (b reportsTolerance) ClockTolerance() time.Duration { return b.tol }
