package readmetest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/backends/postgres"
	"github.com/durable-go/durable/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// root is the module root, where the READMEs' commands run.
const root = "../.."

// readmes are the files whose ```sh blocks are checked.
func readmes(t *testing.T) []string {
	files, err := filepath.Glob(filepath.Join(root, "examples", "*", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{filepath.Join(root, "README.md")}, files...)
}

// command is one line of a ```sh block, without its trailing comment.
type command struct {
	file string
	line int
	text string
}

var trailingComment = regexp.MustCompile(`\s+#\s.*$`)

// commands returns every command of the ```sh blocks of the READMEs.
func commands(t *testing.T) []command {
	var out []command
	for _, f := range readmes(t) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		file := strings.TrimPrefix(f, root+"/")
		var block []command // the commands of the open ```sh block
		in := false
		sc := bufio.NewScanner(bytes.NewReader(data))
		for n := 1; sc.Scan(); n++ {
			line := sc.Text()
			switch {
			case !in && strings.HasPrefix(line, "```sh"):
				in, block = true, nil
			case in && strings.HasPrefix(line, "```"):
				in = false
				// A block that is one of the scripts is one command.
				var lines []string
				for _, c := range block {
					lines = append(lines, c.text)
				}
				if script := strings.Join(lines, "\n"); len(block) > 1 && scripts[script] {
					block = []command{{file: file, line: block[0].line, text: script}}
				}
				out = append(out, block...)
			case in:
				text := strings.TrimSpace(trailingComment.ReplaceAllString(line, ""))
				if text != "" && !strings.HasPrefix(text, "#") {
					block = append(block, command{file: file, line: n, text: text})
				}
			}
		}
	}
	return out
}

// deployScript is the README's deploy script: migrate only when the schema
// needs it, stop on any other failure.
const deployScript = "durable migrate status; rc=$?\n" +
	"if [ $rc -eq 3 ]; then durable migrate up; elif [ $rc -ne 0 ]; then exit $rc; fi"

// scripts are the ```sh blocks whose lines run together, as one command.
var scripts = map[string]bool{deployScript: true}

// skipped are the commands that cannot run here, each with the reason.
var skipped = map[string]string{
	"go test -race -count=1 ./... ./backends/etcd/... ./backends/redis/internal/compare/... ./middleware/grpcidem/...": "the whole test suite, which includes this test: CI runs it",
	"go install github.com/durable-go/durable/cmd/durable@latest":                                                      "installs the published release from the network; the durable commands below run a CLI built from this tree",
	"export DURABLE_DSN='postgres://app@db/app'":                                                                       "names the reader's server; the durable commands run with DURABLE_DSN set to a throwaway schema of the test server instead",
	"go run ./examples/httpapi -dsn 'postgres://app@localhost/app?schema=durable'":                                     "needs the reader's server at localhost; examples/httpapi's own tests run the Postgres path against the test server",
}

// env is what the runnable commands share: the environment they run in.
type env struct {
	t    *testing.T
	top  *testing.T // the whole test: background servers live as long as it
	ctx  context.Context
	bin  string // directory of a durable CLI built from this tree
	dsn  string // DURABLE_DSN: a throwaway schema on the test server
	srv  *pgtest.Server
	vars []string
	// httpapi is the example server, once started.
	httpapi *exec.Cmd
}

// run runs text with sh in the module root and returns its output.
func (e *env) run(text string, timeout time.Duration) (string, error) {
	return e.runIn(root, text, timeout)
}

// runIn runs text with sh in dir and returns its output.
func (e *env) runIn(dir, text string, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(e.ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", text)
	cmd.Dir = dir
	cmd.Env = e.vars
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// runners run the commands that can run here; each fails t on failure.
var runners = map[string]func(e *env, text string){
	"go run ./examples/quickstart": func(e *env, text string) {
		e.mustRun(text, 2*time.Minute)
	},
	"durable migrate status":    durableCLI,
	"durable doctor":            durableCLI,
	"durable cleanup --dry-run": durableCLI,
	"durable inspect workflow order-42 --tenant acme --json": func(e *env, text string) {
		if out := e.mustRun(text, 2*time.Minute); !strings.Contains(out, `"order-42"`) {
			e.t.Errorf("%s: the output does not show order-42:\n%s", text, out)
		}
	},
	"durable inspect workflows --tenant acme --status running --limit 50": func(e *env, text string) {
		if out := e.mustRun(text, 2*time.Minute); !strings.Contains(out, "order-42") {
			e.t.Errorf("%s: the list does not show order-42:\n%s", text, out)
		}
	},
	"durable inspect keys --tenant acme --state claimed": func(e *env, text string) {
		if out := e.mustRun(text, 2*time.Minute); !strings.Contains(out, "charge-order-42") || !strings.Contains(out, "claimed") {
			e.t.Errorf("%s: the list does not show the key in flight:\n%s", text, out)
		}
	},
	"durable inspect leases --tenant acme --held": func(e *env, text string) {
		if out := e.mustRun(text, 2*time.Minute); !strings.Contains(out, "worker-1") {
			e.t.Errorf("%s: the list does not show the lease held:\n%s", text, out)
		}
	},
	"durable migrate sql --schema durable > 0001_durable.sql": func(e *env, text string) {
		// In a directory of its own: the file must not land in the tree.
		dir := e.t.TempDir()
		if out, err := e.runIn(dir, text, time.Minute); err != nil {
			e.t.Errorf("%s: %v\n%s", text, err, out)
			return
		}
		sql, err := os.ReadFile(filepath.Join(dir, "0001_durable.sql"))
		if err != nil || !strings.Contains(string(sql), `CREATE TABLE "durable".workflows`) {
			e.t.Errorf("%s wrote %d bytes (%v), want the schema-qualified migrations", text, len(sql), err)
		}
	},
	"durable migrate sql up --version 2 --schema durable": func(e *env, text string) {
		if out := e.mustRun(text, time.Minute); !strings.Contains(out, `ALTER TABLE "durable".workflows`) {
			e.t.Errorf("%s: not migration 2:\n%s", text, out)
		}
	},
	"durable version": func(e *env, text string) {
		if out := e.mustRun(text, time.Minute); strings.TrimSpace(out) == "" {
			e.t.Errorf("%s printed nothing", text)
		}
	},
	deployScript: func(e *env, text string) {
		// On a schema that does not exist yet: status exits 3, so the
		// script migrates, and then the schema is current.
		fresh := *e
		fresh.vars = append(e.vars[:len(e.vars):len(e.vars)], "DURABLE_DSN="+e.srv.DSN()+"&schema="+e.srv.Schema(e.t))
		out, err := fresh.run("durable migrate status", time.Minute)
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 {
			e.t.Errorf("durable migrate status on a missing schema: %v, want exit status 3\n%s", err, out)
		}
		fresh.mustRun(text, 2*time.Minute)
		if out, err := fresh.run("durable migrate status", time.Minute); err != nil {
			e.t.Errorf("durable migrate status after the deploy script: %v\n%s", err, out)
		}
		// On the current schema of the other commands: nothing to do.
		e.mustRun(text, 2*time.Minute)
	},
	"durable bench --concurrency 16 --duration 10s": durableCLI,
	"durable ui":                                      durableUI,
	`durable ui --dsn "$DURABLE_DSN"`:                 durableUI,
	`durable ui --dsn "$DURABLE_DSN" --allow-actions`: durableUI,
	"go run ./examples/httpapi": func(e *env, text string) {
		e.httpapi = e.startServer(text, "127.0.0.1:8080")
	},
	"curl -s localhost:8080/metrics | grep '^durable_'": func(e *env, text string) {
		if e.httpapi == nil {
			e.t.Fatalf("%s needs go run ./examples/httpapi first", text)
		}
		// One payment first, so that the Store has counted something.
		req, _ := http.NewRequest("POST", "http://127.0.0.1:8080/payments", strings.NewReader(`{"amount": 500, "currency": "eur"}`))
		req.Header.Set("Idempotency-Key", `"readme-1"`)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			e.t.Fatal(err)
		}
		resp.Body.Close()
		if out := e.mustRun(text, 30*time.Second); !strings.Contains(out, "durable_claims_total") {
			e.t.Errorf("%s: no durable_claims_total in\n%s", text, out)
		}
	},
}

// durableUI serves the console on the README's address (stopping the
// example server that held it, if any), checks the overview of tenant acme
// and its mode, and stops it.
func durableUI(e *env, text string) {
	if e.httpapi != nil {
		stopServer(e.httpapi)
		e.httpapi = nil
	}
	cmd := e.startServer(text, "127.0.0.1:8080")
	defer stopServer(cmd)
	resp, err := http.Get("http://127.0.0.1:8080/?tenant=acme")
	if err != nil {
		e.t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	mode := "read-only"
	if strings.Contains(text, "--allow-actions") {
		mode = "actions allowed"
	}
	if resp.StatusCode != 200 || !strings.Contains(string(body), "order-42") || !strings.Contains(string(body), mode) {
		e.t.Errorf("%s: GET / = %d, want the overview of tenant acme (%s) with order-42:\n%s", text, resp.StatusCode, mode, body)
	}
}

// stopServer stops a server startServer started, and what it started.
func stopServer(cmd *exec.Cmd) {
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	_ = cmd.Wait()
}

func durableCLI(e *env, text string) {
	e.mustRun(text, 2*time.Minute)
}

func (e *env) mustRun(text string, timeout time.Duration) string {
	e.t.Helper()
	out, err := e.run(text, timeout)
	if err != nil {
		e.t.Errorf("%s: %v\n%s", text, err, out)
	}
	return out
}

// startServer starts text in the background, waits until addr accepts
// connections, and stops it (with everything it started) when the test
// ends.
func (e *env) startServer(text, addr string) *exec.Cmd {
	e.t.Helper()
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		e.t.Fatalf("%s: %s is already in use", text, addr)
	}
	cmd := exec.Command("sh", "-c", text)
	cmd.Dir = root
	cmd.Env = e.vars
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	e.top.Cleanup(func() { stopServer(cmd) })
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return cmd
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%s: %s did not accept connections in 2 min:\n%s", text, addr, out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestEveryREADMECommandRunsOrIsListed runs, in order, every command of the
// READMEs' ```sh blocks that can run here, and fails on a command it
// neither runs nor lists in skipped with a reason (and on a listed command
// no README has any more).
func TestEveryREADMECommandRunsOrIsListed(t *testing.T) {
	cmds := commands(t)
	seen := map[string]bool{}
	for _, c := range cmds {
		seen[c.text] = true
		_, run := runners[c.text]
		_, skip := skipped[c.text]
		if !run && !skip {
			t.Errorf("%s:%d: %q is neither run by this test nor listed in skipped with a reason", c.file, c.line, c.text)
		}
	}
	for text := range runners {
		if !seen[text] {
			t.Errorf("runners has %q, which no README has any more", text)
		}
	}
	for text := range skipped {
		if !seen[text] {
			t.Errorf("skipped lists %q, which no README has any more", text)
		}
	}
	if t.Failed() {
		return
	}

	e := &env{t: t, top: t, ctx: t.Context()}
	e.bin = t.TempDir()
	if out, err := exec.Command("go", "build", "-o", filepath.Join(e.bin, "durable"), filepath.Join(root, "cmd", "durable")).CombinedOutput(); err != nil {
		t.Fatalf("building the CLI: %v\n%s", err, out)
	}
	srv := pgtest.Require(t)
	e.srv = srv
	schema := srv.Schema(t)
	e.dsn = srv.DSN() + "&schema=" + schema
	e.vars = append(os.Environ(), "PATH="+e.bin+string(os.PathListSeparator)+os.Getenv("PATH"), "DURABLE_DSN="+e.dsn)
	seedInspect(t, e.dsn)

	for _, c := range cmds {
		if why, ok := skipped[c.text]; ok {
			t.Logf("%s:%d: not run: %s: %s", c.file, c.line, c.text, why)
			continue
		}
		t.Run(fmt.Sprintf("%s:%d", c.file, c.line), func(t *testing.T) {
			sub := *e
			sub.t = t
			runners[c.text](&sub, c.text)
			e.httpapi = sub.httpapi
		})
	}
}

// seedInspect creates the schema and the records the README inspects:
// workflow order-42, a key in flight and a lease held, of tenant acme.
func seedInspect(t *testing.T, dsn string) {
	store, err := durable.Open(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	if _, err := store.CreateWorkflow(t.Context(), durable.Workflow{Scope: durable.TenantScope("acme"), ID: "order-42", Status: durable.StatusRunning, Snapshot: []byte(`{"step":1}`)}); err != nil {
		t.Fatal(err)
	}
	acme := durable.TenantScope("acme")
	if _, err := store.ClaimKey(t.Context(), durable.ClaimRequest{KeyRef: durable.KeyRef{Scope: acme, Key: "charge-order-42"}, Fingerprint: "fp", TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.AcquireLease(t.Context(), durable.LeaseRequest{Scope: acme, Resource: "order-42", Owner: "worker-1", TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
}

var _ = postgres.DefaultSchema // registers the postgres scheme
