package exactlyonce

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/durable-go/durable"
	_ "github.com/durable-go/durable/backends/postgres"
	_ "github.com/durable-go/durable/backends/sqlite"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib"
	_ "github.com/lib/pq"
	_ "modernc.org/sqlite"
)

// The child process: it opens the store named by its environment and runs
// every key once through Do or DoTx, the effect being one row in the
// payments table, until every key is done or the parent kills it. Each
// key it finishes is printed as "DONE <key> <payment id>".

const (
	envChild   = "DURABLE_EO_CHILD"   // "1" in the child
	envStore   = "DURABLE_EO_STORE"   // the store's DSN
	envDriver  = "DURABLE_EO_DRIVER"  // pgx, pq, pgx-stdlib or sqlite
	envEffects = "DURABLE_EO_EFFECTS" // the effects database: a postgres DSN, or the SQLite file
	envTable   = "DURABLE_EO_TABLE"   // the payments table, qualified
	envMode    = "DURABLE_EO_MODE"    // tx or plain
	envKeys    = "DURABLE_EO_KEYS"    // how many keys
	envWorkers = "DURABLE_EO_WORKERS" // how many at once
)

// effects writes one payment: on its own (plain) or in the transaction
// DoTx hands it (tx).
type effects struct {
	driver, table string
	pool          *pgxpool.Pool // driver pgx
	db            *sql.DB       // the others
}

func (e *effects) insertSQL() string {
	if e.driver == "sqlite" {
		return `INSERT INTO ` + e.table + ` (key, pid) VALUES (?, ?) RETURNING id`
	}
	return `INSERT INTO ` + e.table + ` (key, pid) VALUES ($1, $2) RETURNING id`
}

func (e *effects) plain(ctx context.Context, key string) (int64, error) {
	var id int64
	if e.pool != nil {
		err := e.pool.QueryRow(ctx, e.insertSQL(), key, os.Getpid()).Scan(&id)
		return id, err
	}
	err := e.db.QueryRowContext(ctx, e.insertSQL(), key, os.Getpid()).Scan(&id)
	return id, err
}

func outcomeOf(id int64) durable.Outcome {
	return durable.Outcome{Code: 201, Body: []byte(strconv.FormatInt(id, 10))}
}

func runChild() int {
	ctx := context.Background()
	driver, mode := os.Getenv(envDriver), os.Getenv(envMode)
	nkeys, _ := strconv.Atoi(os.Getenv(envKeys))
	workers, _ := strconv.Atoi(os.Getenv(envWorkers))
	store, err := durable.Open(ctx, os.Getenv(envStore))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child: open store:", err)
		return 2
	}
	defer store.Close()
	e := &effects{driver: driver, table: os.Getenv(envTable)}
	switch driver {
	case "pgx":
		e.pool, err = pgxpool.New(ctx, os.Getenv(envEffects))
	case "pq":
		e.db, err = sql.Open("postgres", os.Getenv(envEffects))
	case "pgx-stdlib":
		e.db, err = sql.Open("pgx", os.Getenv(envEffects))
	case "sqlite":
		e.db, err = sql.Open("sqlite", "file:"+os.Getenv(envEffects)+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "child: open effects:", err)
		return 2
	}
	var out sync.Mutex
	keys := make(chan int)
	var wg sync.WaitGroup
	failed := make(chan error, workers)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range keys {
				key := fmt.Sprintf("pay-%04d", k)
				id, err := runKey(ctx, store, e, mode, key)
				if err != nil {
					failed <- fmt.Errorf("%s: %w", key, err)
					return
				}
				out.Lock()
				fmt.Printf("DONE %s %d\n", key, id)
				out.Unlock()
			}
		}()
	}
	go func() {
		defer close(keys)
		for k := range nkeys {
			select {
			case keys <- k:
			case err := <-failed:
				failed <- err
				return
			}
		}
	}()
	wg.Wait()
	select {
	case err := <-failed:
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	default:
		return 0
	}
}

// runKey runs key once, retrying what is retryable (a claim still held by
// a killed predecessor waits for its TTL), and returns the payment id of
// the key's outcome (run now or replayed).
func runKey(ctx context.Context, store *durable.Store, e *effects, mode, key string) (int64, error) {
	req := durable.ClaimRequest{KeyRef: durable.KeyRef{Key: key}, Fingerprint: "pay:" + key, TTL: store.MinTTL()}
	opts := durable.DoOptions{MaxWait: 20 * time.Second}
	deadline := time.Now().Add(90 * time.Second)
	for {
		var res durable.DoResult
		var err error
		switch {
		case mode == "plain":
			res, err = store.Do(ctx, req, opts, func(ctx context.Context) (durable.Outcome, error) {
				id, err := e.plain(ctx, key)
				return outcomeOf(id), err
			})
		case e.pool != nil:
			res, err = durable.DoTx(ctx, store, req, opts, func(ctx context.Context, tx pgx.Tx) (durable.Outcome, error) {
				var id int64
				err := tx.QueryRow(ctx, e.insertSQL(), key, os.Getpid()).Scan(&id)
				return outcomeOf(id), err
			})
		default:
			res, err = durable.DoTx(ctx, store, req, opts, func(ctx context.Context, tx *sql.Tx) (durable.Outcome, error) {
				var id int64
				err := tx.QueryRowContext(ctx, e.insertSQL(), key, os.Getpid()).Scan(&id)
				return outcomeOf(id), err
			})
		}
		if err == nil {
			return strconv.ParseInt(string(res.Outcome.Body), 10, 64)
		}
		// On the transactional path a claim lost while fn ran (its
		// renewal came too late on a loaded machine: the TTL is the
		// minimum) rolled fn's transaction back, so the request is
		// retried, as its client would: nothing of it committed.
		lost := mode != "plain" && errors.Is(err, durable.ErrFenced)
		if time.Now().After(deadline) || !(durable.Retryable(err) || errors.Is(err, durable.ErrInFlight) || lost) {
			return 0, err
		}
		time.Sleep(20 * time.Millisecond)
	}
}
