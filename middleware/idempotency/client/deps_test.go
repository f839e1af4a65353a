package client_test

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestImportsOnlyTheStandardLibrary keeps the package's promise: a client
// of any HTTP API can use the kit without pulling durable's dependencies
// (the store, its backends, OpenTelemetry) into its build.
func TestImportsOnlyTheStandardLibrary(t *testing.T) {
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := exec.LookPath(goTool); err != nil {
		if goTool, err = exec.LookPath("go"); err != nil {
			t.Fatalf("the go tool is needed to list the package's dependencies: not in GOROOT/bin nor on PATH: %v", err)
		}
	}
	const self = "github.com/durable-go/durable/middleware/idempotency/client"
	cmd := exec.CommandContext(t.Context(), goTool, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", self)
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("go list -deps %s: %v\n%s", self, err, stderr)
	}
	sawSelf := false
	for _, p := range strings.Fields(string(out)) {
		if p == self {
			sawSelf = true
			continue
		}
		t.Errorf("package client depends on %s, which is not in the standard library", p)
	}
	if !sawSelf {
		t.Fatalf("go list -deps did not list %s itself; output:\n%s", self, out)
	}
}
