package exactlyonce

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/internal/pgtest"
)

func TestMain(m *testing.M) {
	if os.Getenv(envChild) == "1" {
		os.Exit(runChild())
	}
	pgtest.Main(m)
}

// killRounds is how many times each configuration's child is killed.
func killRounds(t *testing.T) int {
	n := 10
	if s := os.Getenv("DURABLE_KILL_ROUNDS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			t.Fatalf("DURABLE_KILL_ROUNDS=%q: want a positive count", s)
		}
		n = v
	}
	return n
}

// config is one database and client library the kill test runs on.
type config struct {
	driver  string
	store   string // the store's DSN
	effects string // the effects database, as the child opens it
	table   string // the payments table, qualified
	// count returns, per key, how many payments were recorded and the ids.
	count func(ctx context.Context) (map[string][]int64, error)
}

const (
	killKeys    = 120
	killWorkers = 4
)

// TestKillBetweenEffectAndCompletion: see the package doc. Each kill lands
// at a random point of a child's life; keys whose claim the killed child
// held are taken over by a later child once the claim's TTL (the minimum,
// 1.1 s) has passed.
func TestKillBetweenEffectAndCompletion(t *testing.T) {
	rounds := killRounds(t)
	type named struct {
		name string
		mk   func(t *testing.T) config
	}
	var configs []named
	srv := pgtest.Require(t)
	for _, driver := range []string{"pgx", "pq", "pgx-stdlib"} {
		configs = append(configs, named{driver, func(t *testing.T) config { return postgresConfig(t, srv, driver) }})
	}
	configs = append(configs, named{"sqlite", sqliteConfig})
	var mu sync.Mutex
	var lines []string
	for _, cfg := range configs {
		for _, mode := range []string{"tx", "plain"} {
			t.Run(cfg.name+"/"+mode, func(t *testing.T) {
				t.Parallel()
				c := cfg.mk(t)
				kills, doubles, lost := runKills(t, c, mode, rounds)
				line := fmt.Sprintf("KILLS driver=%s mode=%s kills=%d keys=%d double-effects=%d lost-outcomes=%d", c.driver, mode, kills, killKeys, doubles, lost)
				t.Log(line)
				mu.Lock()
				lines = append(lines, line)
				mu.Unlock()
				if mode == "tx" && (doubles != 0 || lost != 0) {
					t.Errorf("transactional path: %d double effects and %d lost outcomes, want 0 and 0", doubles, lost)
				}
			})
		}
	}
	t.Cleanup(func() {
		if path := os.Getenv("DURABLE_FAULT_SUMMARY"); path != "" && len(lines) > 0 {
			f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644)
			if err != nil {
				t.Errorf("summary: %v", err)
				return
			}
			defer f.Close()
			fmt.Fprintln(f, strings.Join(lines, "\n"))
		}
	})
}

func postgresConfig(t *testing.T, srv *pgtest.Server, driver string) config {
	schema := srv.Schema(t)
	table := `"` + schema + `".payments`
	ctx := t.Context()
	if err := srv.Exec(ctx, `CREATE SCHEMA "`+schema+`"; CREATE TABLE `+table+` (id bigserial PRIMARY KEY, key text NOT NULL, pid int NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("pgx", srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return config{
		driver: driver, table: table, effects: srv.DSN(),
		store: srv.DSN() + "&schema=" + schema + "&driver=" + driver + "&tolerance=100ms",
		count: func(ctx context.Context) (map[string][]int64, error) { return paymentsOf(ctx, db, table) },
	}
}

func sqliteConfig(t *testing.T) config {
	path := filepath.Join(t.TempDir(), "pay.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := db.Exec(`CREATE TABLE payments (id INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT NOT NULL, pid INTEGER NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return config{
		driver: "sqlite", table: "payments", effects: path,
		store: "sqlite://" + path + "?tolerance=100ms",
		count: func(ctx context.Context) (map[string][]int64, error) { return paymentsOf(ctx, db, "payments") },
	}
}

// paymentsOf returns the ids of the payments in table, per key.
func paymentsOf(ctx context.Context, db *sql.DB, table string) (map[string][]int64, error) {
	rows, err := db.QueryContext(ctx, `SELECT key, id FROM `+table+` ORDER BY id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	m := map[string][]int64{}
	for rows.Next() {
		var k string
		var id int64
		if err := rows.Scan(&k, &id); err != nil {
			return nil, err
		}
		m[k] = append(m[k], id)
	}
	return m, rows.Err()
}

// runKills kills a child rounds times at random points, then lets a last
// child finish every key, and counts the keys with more than one payment
// (double effects) and the keys whose stored outcome names no payment of
// theirs, or that have no stored outcome (lost outcomes).
func runKills(t *testing.T, c config, mode string, rounds int) (kills, doubles, lost int) {
	ctx := t.Context()
	for r := range rounds {
		// Let the child get going (opening the store takes tens of
		// milliseconds; a child that waits out a predecessor's claims
		// takes longer), then kill it somewhere in its work.
		delay := time.Duration(40+rand.IntN(400)) * time.Millisecond
		_, exited, err := runChildFor(ctx, c, mode, delay)
		if err != nil {
			t.Fatalf("round %d: %v", r, err)
		}
		if !exited {
			kills++
		}
	}
	out, exited, err := runChildFor(ctx, c, mode, 3*time.Minute)
	if err != nil || !exited {
		t.Fatalf("last child: exited %v, %v\n%s", exited, err, out)
	}
	done := map[string]int64{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 3 && f[0] == "DONE" {
			id, _ := strconv.ParseInt(f[2], 10, 64)
			done[f[1]] = id
		}
	}
	pays, err := c.count(ctx)
	if err != nil {
		t.Fatal(err)
	}
	store, err := durable.Open(ctx, c.store)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	for k := range killKeys {
		key := fmt.Sprintf("pay-%04d", k)
		ids := pays[key]
		if len(ids) > 1 {
			doubles++
		}
		rec, err := store.GetKey(ctx, durable.KeyRef{Key: key})
		if err != nil || rec.State != durable.KeyCompleted || rec.Outcome == nil {
			t.Logf("%s: no stored outcome (%v)", key, err)
			lost++
			continue
		}
		id, _ := strconv.ParseInt(string(rec.Outcome.Body), 10, 64)
		if !containsID(ids, id) || done[key] != id {
			t.Logf("%s: stored outcome names payment %d, the last child saw %d, payments %v", key, id, done[key], ids)
			lost++
		}
	}
	return kills, doubles, lost
}

func containsID(ids []int64, id int64) bool {
	for _, v := range ids {
		if v == id {
			return true
		}
	}
	return false
}

// runChildFor starts a child on c and kills it with SIGKILL after d unless
// it exits first. It returns the child's standard output and whether it
// exited on its own (with status 0; another status is an error).
func runChildFor(ctx context.Context, c config, mode string, d time.Duration) ([]byte, bool, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, false, err
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(),
		envChild+"=1", envStore+"="+c.store, envDriver+"="+c.driver, envEffects+"="+c.effects,
		envTable+"="+c.table, envMode+"="+mode,
		envKeys+"="+strconv.Itoa(killKeys), envWorkers+"="+strconv.Itoa(killWorkers))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		return nil, false, err
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case err := <-waited:
		if err != nil {
			return stdout.Bytes(), true, fmt.Errorf("child failed: %v\n%s", err, stderr.String())
		}
		return stdout.Bytes(), true, nil
	case <-timer.C:
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-waited
		return stdout.Bytes(), false, nil
	case <-ctx.Done():
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-waited
		return nil, false, ctx.Err()
	}
}
