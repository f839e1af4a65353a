package conformance_test

import (
	"testing"

	"github.com/durable-go/durable/conformance"
)

// TestExampleHarness runs the suite with the harness of ExampleRun, so that
// the example stays a harness that passes.
func TestExampleHarness(t *testing.T) { conformance.Run(t, newHarness) }
