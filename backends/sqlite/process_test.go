package sqlite_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/durable-go/durable"
)

// The multi-process tests re-execute the test binary: with
// DURABLE_SQLITE_CHILD set, TestMain runs a child's role instead of the
// tests (see runChild) and exits.
func TestMain(m *testing.M) {
	if role := os.Getenv("DURABLE_SQLITE_CHILD"); role != "" {
		if err := runChild(role, os.Getenv("DURABLE_SQLITE_PATH"), os.Getenv("DURABLE_SQLITE_ARGS")); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// envInt reads a soak knob: an integer environment variable, or def.
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// child starts the test binary as a child in role on the database path.
func child(t *testing.T, role, path, args string) (*exec.Cmd, io.ReadCloser) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), "DURABLE_SQLITE_CHILD="+role, "DURABLE_SQLITE_PATH="+path, "DURABLE_SQLITE_ARGS="+args)
	cmd.Stderr = &lockedBuffer{}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, out
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func openPath(ctx context.Context, path, params string) (*durable.Store, error) {
	dsn := "sqlite://" + path
	if params != "" {
		dsn += "?" + params
	}
	return durable.Open(ctx, dsn)
}

func runChild(role, path, args string) error {
	ctx := context.Background()
	switch role {
	case "race":
		return childRace(ctx, path, args)
	case "crash":
		return childCrash(ctx, path, args)
	}
	return fmt.Errorf("unknown role %q", role)
}

// childRace waits for the start file, then races for every round's
// workflow, key and lease, and takes and releases the hot lease, printing
// what it won.
func childRace(ctx context.Context, path, args string) error {
	f := strings.Fields(args)
	id, rounds := f[0], mustAtoi(f[1])
	s, err := openPath(ctx, path, "tolerance=1s")
	if err != nil {
		return err
	}
	defer s.Close()
	for {
		if _, err := os.Stat(path + ".go"); err == nil {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	w := bufio.NewWriter(os.Stdout)
	defer w.Flush()
	for r := range rounds {
		_, err := s.UpdateWorkflow(ctx, durable.Update{ID: fmt.Sprintf("w-%d", r), ExpectStatus: durable.StatusRunning,
			ExpectRevision: 1, Status: durable.StatusRunning, Snapshot: []byte(id)})
		switch {
		case err == nil:
			fmt.Fprintf(w, "cas %d\n", r)
		case !errors.Is(err, durable.ErrConflict):
			return fmt.Errorf("update round %d: %w", r, err)
		}
		c, err := s.ClaimKey(ctx, durable.ClaimRequest{KeyRef: durable.KeyRef{Key: fmt.Sprintf("k-%d", r)}, Fingerprint: "fp", TTL: time.Hour})
		if err != nil {
			return fmt.Errorf("claim round %d: %w", r, err)
		}
		if c.Kind == durable.ClaimNew {
			fmt.Fprintf(w, "claim %d\n", r)
		}
		l, err := s.AcquireLease(ctx, durable.LeaseRequest{Resource: fmt.Sprintf("r-%d", r), Owner: "o-" + id, TTL: time.Hour})
		switch {
		case err == nil:
			fmt.Fprintf(w, "lease %d %d\n", r, l.Token)
		case !errors.Is(err, durable.ErrLeaseBusy):
			return fmt.Errorf("lease round %d: %w", r, err)
		}
		l, err = s.AcquireLease(ctx, durable.LeaseRequest{Resource: "hot", Owner: "o-" + id, TTL: time.Hour})
		switch {
		case err == nil:
			fmt.Fprintf(w, "hot %d\n", l.Token)
			if ok, err := s.ReleaseLease(ctx, l); err != nil || !ok {
				return fmt.Errorf("release hot: %v %v", ok, err)
			}
		case !errors.Is(err, durable.ErrLeaseBusy):
			return fmt.Errorf("hot lease round %d: %w", r, err)
		}
		// A permit of a semaphore of 2: held until released (its TTL
		// is long), so a release that fails means another process was
		// granted the same permit meanwhile.
		l, err = s.AcquirePermit(ctx, durable.PermitRequest{Resource: "sem", Owner: "o-" + id, TTL: time.Hour, Permits: 2, Value: id})
		switch {
		case err == nil:
			fmt.Fprintf(w, "permit %s %d\n", l.Resource, l.Token)
			if g, err := s.GetLease(ctx, "", l.Resource); err != nil || g.Token != l.Token || g.Value != id {
				return fmt.Errorf("permit %s read back as %+v, %v", l.Resource, g, err)
			}
			if ok, err := s.ReleaseLease(ctx, l); err != nil || !ok {
				return fmt.Errorf("release permit %s: %v %v (granted to another process meanwhile?)", l.Resource, ok, err)
			}
		case !errors.Is(err, durable.ErrLeaseBusy):
			return fmt.Errorf("permit round %d: %w", r, err)
		}
	}
	return nil
}

func mustAtoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		panic(err)
	}
	return n
}

// TestProcessesRace runs several processes racing on one file: exactly one
// winner per compare-and-set, per claim and per lease, no permit of a
// semaphore granted to two processes at once, and fencing tokens that
// never repeat and grow with every grant. DURABLE_SQLITE_PROCS and
// DURABLE_SQLITE_ROUNDS make it longer.
func TestProcessesRace(t *testing.T) {
	procs, rounds := envInt("DURABLE_SQLITE_PROCS", 4), envInt("DURABLE_SQLITE_ROUNDS", 25)
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "race.db")
	s, err := openPath(ctx, path, "tolerance=1s")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for r := range rounds {
		if _, err := s.CreateWorkflow(ctx, durable.Workflow{ID: fmt.Sprintf("w-%d", r), Status: durable.StatusRunning}); err != nil {
			t.Fatal(err)
		}
	}
	outs := make([]string, procs)
	var wg sync.WaitGroup
	cmds := make([]*exec.Cmd, procs)
	for i := range procs {
		cmd, out := child(t, "race", path, fmt.Sprintf("%d %d", i, rounds))
		cmds[i] = cmd
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, _ := io.ReadAll(out)
			outs[i] = string(b)
		}()
	}
	// Children open the file (and migrate it, a no-op) before the start.
	if err := os.WriteFile(path+".go", nil, 0o600); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("child %d: %v\n%s", i, err, cmd.Stderr.(*lockedBuffer).String())
		}
	}
	cas, claims, leases := map[int]int{}, map[int]int{}, map[int]int{}
	seen := map[int64]bool{}
	var maxToken int64
	hot, permitGrants := 0, 0
	for i, out := range outs {
		var lastHot int64
		for line := range strings.Lines(out) {
			f := strings.Fields(line)
			switch f[0] {
			case "cas":
				cas[mustAtoi(f[1])]++
			case "claim":
				claims[mustAtoi(f[1])]++
			case "lease", "hot", "permit":
				tok, _ := strconv.ParseInt(f[len(f)-1], 10, 64)
				if seen[tok] {
					t.Errorf("token %d issued twice", tok)
				}
				seen[tok] = true
				maxToken = max(maxToken, tok)
				if f[0] == "permit" {
					permitGrants++
				} else if f[0] == "lease" {
					leases[mustAtoi(f[1])]++
				} else {
					if tok <= lastHot {
						t.Errorf("child %d: hot token %d after %d", i, tok, lastHot)
					}
					lastHot = tok
					hot++
				}
			}
		}
	}
	for r := range rounds {
		if cas[r] != 1 || claims[r] != 1 || leases[r] != 1 {
			t.Errorf("round %d: %d CAS winners, %d new claims, %d lease grants; want exactly 1 each", r, cas[r], claims[r], leases[r])
		}
		w, err := s.GetWorkflow(ctx, durable.Scope(""), fmt.Sprintf("w-%d", r))
		if err != nil || w.Revision != 2 {
			t.Errorf("round %d: workflow revision %d (%v), want 2", r, w.Revision, err)
		}
	}
	if hot == 0 || permitGrants == 0 {
		t.Errorf("%d grants of the hot lease, %d of permits; want some of each", hot, permitGrants)
	}
	// The next grant's token is greater than every token issued.
	l, err := s.AcquireLease(ctx, durable.LeaseRequest{Resource: "hot", Owner: "parent", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if l.Token <= maxToken || int(l.Token) != len(seen)+1 {
		t.Errorf("parent's token %d after %d tokens (max %d); want %d", l.Token, len(seen), maxToken, len(seen)+1)
	}
	t.Logf("%d processes × %d rounds: %d tokens issued, %d hot-lease grants, %d permit grants", procs, rounds, len(seen), hot, permitGrants)
}

// crashSnapshot is the snapshot of write i: its number and a body of
// 4 KiB, so that a torn write would show.
func crashSnapshot(i int) []byte {
	b := bytes.Repeat([]byte{byte(i)}, 4096)
	return append([]byte(fmt.Sprintf("write-%08d:", i)), b...)
}

// childCrash writes in a loop, forever, printing each acknowledged write:
// workflow c-i created with its snapshot, and workflow "counter" moved to
// revision i+2 in its own transaction.
func childCrash(ctx context.Context, path, params string) error {
	s, err := openPath(ctx, path, params)
	if err != nil {
		return err
	}
	defer s.Close()
	for i := 0; ; i++ {
		if _, err := s.CreateWorkflow(ctx, durable.Workflow{ID: fmt.Sprintf("c-%d", i), Status: durable.StatusRunning, Snapshot: crashSnapshot(i)}); err != nil {
			return err
		}
		if _, err := s.UpdateWorkflow(ctx, durable.Update{ID: "counter", ExpectStatus: durable.StatusRunning,
			ExpectRevision: int64(i + 1), Status: durable.StatusRunning, Snapshot: crashSnapshot(i)}); err != nil {
			return err
		}
		// One write(2) per line: the parent reads every line printed
		// before the kill.
		if _, err := fmt.Fprintf(os.Stdout, "ack %d\n", i); err != nil {
			return err
		}
	}
}

// TestCrashLosesNothing kills a child with SIGKILL in the middle of its
// write loop, then reopens the file: every acknowledged write is there,
// whole, and nothing else but at most the one write in flight.
// DURABLE_SQLITE_CRASH_ROUNDS repeats it.
func TestCrashLosesNothing(t *testing.T) {
	rounds := envInt("DURABLE_SQLITE_CRASH_ROUNDS", 3)
	for _, mode := range []string{"full", "normal"} {
		t.Run("synchronous="+mode, func(t *testing.T) {
			for round := range rounds {
				crashOnce(t, round, "synchronous="+mode)
			}
		})
	}
}

func crashOnce(t *testing.T, round int, params string) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "crash.db")
	s, err := openPath(ctx, path, params)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateWorkflow(ctx, durable.Workflow{ID: "counter", Status: durable.StatusRunning}); err != nil {
		t.Fatal(err)
	}
	s.Close()

	cmd, out := child(t, "crash", path, params)
	sc := bufio.NewScanner(out)
	acked := -1
	killAt := 30 + 17*round
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 && f[0] == "ack" {
			acked = mustAtoi(f[1])
		}
		if acked >= killAt {
			break
		}
	}
	if acked < killAt {
		_ = cmd.Wait()
		t.Fatalf("child stopped after ack %d: %s", acked, cmd.Stderr.(*lockedBuffer).String())
	}
	// Kill it mid-loop: it is writing the next records right now (after
	// a pause that varies by round, to land at varied points of a write).
	time.Sleep(time.Duration(round%4) * 700 * time.Microsecond)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for sc.Scan() { // acks printed before the kill
		if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == "ack" {
			acked = mustAtoi(f[1])
		}
	}
	_ = cmd.Wait()

	s, err = openPath(ctx, path, params)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ws, err := s.ListWorkflows(ctx, durable.ListQuery{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var created []int
	for _, w := range ws {
		if w.ID == "counter" {
			// Updated once per acknowledged write, maybe once more.
			n := int(w.Revision) - 2
			if n < acked || n > acked+1 {
				t.Errorf("counter at revision %d after ack %d", w.Revision, acked)
			}
			if !bytes.Equal(w.Snapshot, crashSnapshot(n)) {
				t.Errorf("counter's snapshot is not write %d's", n)
			}
			continue
		}
		i := mustAtoi(strings.TrimPrefix(w.ID, "c-"))
		if !bytes.Equal(w.Snapshot, crashSnapshot(i)) {
			t.Errorf("workflow %s: snapshot torn or wrong (%d bytes)", w.ID, len(w.Snapshot))
		}
		created = append(created, i)
	}
	slices.Sort(created)
	for i := 0; i <= acked; i++ {
		if !slices.Contains(created, i) {
			t.Errorf("acknowledged write %d is lost", i)
		}
	}
	if len(created) > acked+2 {
		t.Errorf("%d workflows after ack %d: more than the one in flight", len(created), acked)
	}
	t.Logf("killed after ack %d; found %d created workflows", acked, len(created))
}
