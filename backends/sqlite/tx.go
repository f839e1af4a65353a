package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"sync"

	"github.com/durable-go/durable/contract"
)

// Transactional completion (contract.TxCompleter): an idempotency key's
// outcome stored in the same SQLite transaction as the caller's own
// effect. See "Transactional completion" in the package documentation for
// what holds the write lock when, and what that means for renewals.

var _ contract.TxCompleter = (*Backend)(nil)

// BeginTx implements contract.TxCompleter: it begins a transaction on the
// backend's write connection, BEGIN IMMEDIATE, so it holds the database's
// write lock (waiting for another process's, like every write, up to the
// busy timeout, and no longer than ctx) and the write connection until it
// ends. Its Raw is the *sql.Tx for the caller's statements. It lasts until
// Commit or Rollback (or until the backend closes, which rolls it back),
// not until ctx ends: ctx bounds the beginning only, so a caller's
// operation timeout around BeginTx does not end the transaction.
// Meanwhile every other write of this backend (and of other connections
// to the file) waits for it: see the package documentation.
func (b *Backend) BeginTx(ctx context.Context) (contract.Tx, error) {
	if err := b.lockWriter(ctx); err != nil {
		return nil, err
	}
	// database/sql ends a transaction with the context it began with:
	// that is tctx, which ctx cancels only while the transaction begins.
	tctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel)
	var tx *sql.Tx
	begin := func() error {
		var err error
		tx, err = b.wc.BeginTx(tctx, nil) // BEGIN IMMEDIATE: the write DSN's _txlock
		return err
	}
	var err error
	if b.goBusy {
		err = b.retryBusy(ctx, func() error { return b.waitBusy(ctx, begin) })
	} else {
		err = b.retryBusy(ctx, begin)
	}
	if !stop() && err == nil {
		// ctx ended as the transaction began: it is being rolled back.
		_ = tx.Rollback()
		b.rollback()
		err = ctx.Err()
	}
	if err != nil {
		cancel()
		b.unlockWriter()
		return nil, classify(ctx, err)
	}
	t := &txn{b: b, tx: tx, cancel: cancel, ended: make(chan struct{})}
	b.cur.Store(t)
	go t.watch(tctx)
	return t, nil
}

// txn is a transaction of BeginTx. It holds the write connection (b.wsem)
// from BeginTx until watch sees it end.
type txn struct {
	b      *Backend
	tx     *sql.Tx
	cancel context.CancelFunc // ends the transaction's context: watch then releases the connection
	ended  chan struct{}      // closed once the write connection is released

	mu        sync.Mutex // held by Commit and Rollback while they run
	committed bool
	over      bool              // committed or rolled back
	completed []contract.KeyRef // keys CompleteKeyTx completed in it: their waiters are woken on commit
}

// watch waits for the end of the transaction (its context, ended by
// Commit and Rollback, or Close) and releases the write connection.
func (t *txn) watch(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-t.b.done:
		t.cancel()
	}
	// database/sql rolls the transaction back when its context ends;
	// Rollback makes sure (it returns ErrTxDone after a commit).
	_ = t.tx.Rollback()
	t.mu.Lock() // wait for a Commit or Rollback in progress
	committed := t.committed
	t.over = true
	t.mu.Unlock()
	if !committed {
		// A COMMIT that failed (SQLITE_BUSY in a rollback-journal mode)
		// leaves SQLite's transaction open on the connection, which
		// database/sql no longer knows: end it before anyone else uses
		// the connection.
		t.b.rollback()
	}
	t.b.cur.CompareAndSwap(t, nil)
	close(t.ended)
	t.b.unlockWriter()
}

// Raw implements contract.Tx: the *sql.Tx.
func (t *txn) Raw() any { return t.tx }

// Commit implements contract.Tx. It returns once the write connection is
// released. A COMMIT that fails with SQLITE_BUSY (possible only in the
// rollback-journal modes, waiting for readers) is rolled back:
// Unavailable, nothing stored. Any other failure of the COMMIT is
// OutcomeUnknown.
func (t *txn) Commit(ctx context.Context) error {
	t.mu.Lock()
	if t.over {
		t.mu.Unlock()
		if t.committed {
			return nil
		}
		return &contract.Error{Code: contract.InvalidArgument, Msg: "the transaction has already ended (rolled back, or the backend closed)"}
	}
	err := t.tx.Commit()
	t.over = true
	t.committed = err == nil
	done := t.completed
	t.mu.Unlock()
	t.cancel()
	<-t.ended
	if err == nil {
		for _, k := range done {
			t.b.hub.notify(k)
		}
		return nil
	}
	switch {
	case errors.Is(err, sql.ErrTxDone), errors.Is(err, context.Canceled):
		// database/sql had rolled it back (Close) before COMMIT was sent.
		return &contract.Error{Code: contract.Closed, Msg: "backend closed; the transaction was rolled back", Err: err}
	case isBusy(err):
		return &contract.Error{Code: contract.Unavailable, Msg: "commit could not get the database's lock; the transaction was rolled back" + codeSuffix(err), Err: err}
	}
	return &contract.Error{Code: contract.OutcomeUnknown, Msg: "commit failed after it was sent" + codeSuffix(err), Err: err}
}

// Rollback implements contract.Tx. After Commit, or after the
// transaction ended otherwise, it does nothing and returns nil.
func (t *txn) Rollback(ctx context.Context) error {
	t.mu.Lock()
	if t.over {
		t.mu.Unlock()
		return nil
	}
	err := t.tx.Rollback()
	t.over = true
	t.mu.Unlock()
	t.cancel()
	<-t.ended
	if err != nil && !errors.Is(err, sql.ErrTxDone) {
		return classify(context.WithoutCancel(ctx), err)
	}
	return nil
}

// CompleteKeyTx implements contract.TxCompleter. tx is a Tx from this
// backend's BeginTx (or its Raw *sql.Tx), or the caller's own *sql.Tx on
// the same database file, opened with modernc's "sqlite" driver (see the
// package documentation). One statement checks that c.Token holds the
// claim (and c.Fence, if set) and writes the outcome; when it changes
// nothing, a read in the same transaction says why: Fenced, or for a
// completion already committed with that token, the stored record (or
// its tombstone). From that statement until the transaction ends, it
// holds the database's write lock, so no reclaim can take the key: a
// reclaim waits, and then sees the outcome (commit) or the claim as it
// was (rollback).
//
// Waiters (WaitKey) in this process are woken when a BeginTx transaction
// commits; a commit of the caller's own transaction is seen by their
// polling.
func (b *Backend) CompleteKeyTx(ctx context.Context, tx any, c contract.Completion) (contract.KeyRecord, error) {
	if err := b.check(ctx); err != nil {
		return contract.KeyRecord{}, err
	}
	var own *txn
	var stx *sql.Tx
	switch v := tx.(type) {
	case *txn:
		if v.b != b {
			return contract.KeyRecord{}, invalid("the transaction was begun by another backend")
		}
		own, stx = v, v.tx
	case *sql.Tx:
		if cur := b.cur.Load(); cur != nil && cur.tx == v {
			own, stx = cur, v
			break
		}
		if err := b.sameFile(ctx, v); err != nil {
			return contract.KeyRecord{}, err
		}
		stx = v
	default:
		return contract.KeyRecord{}, invalid("CompleteKeyTx takes a Tx from BeginTx or a *sql.Tx on the backend's database file")
	}
	q := func(ctx context.Context, query string, args []any, dest ...any) (bool, error) {
		err := stx.QueryRowContext(ctx, query, args...).Scan(dest...)
		if errors.Is(err, sql.ErrNoRows) {
			return false, nil
		}
		return err == nil, err
	}
	out, completed, err := b.complete(ctx, q, c, encodeHeader(c.Outcome.Header), b.now())
	switch {
	case err == errNoop:
	case errors.Is(err, sql.ErrTxDone):
		return contract.KeyRecord{}, invalid("the transaction has already ended")
	case err != nil:
		return contract.KeyRecord{}, classify(ctx, err)
	}
	if completed && own != nil {
		own.mu.Lock()
		own.completed = append(own.completed, c.KeyRef)
		own.mu.Unlock()
	}
	return out, nil
}

// sameFile checks that tx is a transaction on this backend's database
// file: the file SQLite reports for tx's main database is the backend's
// (the same file, by device and inode, whatever path named it).
func (b *Backend) sameFile(ctx context.Context, tx *sql.Tx) error {
	if b.memory {
		return invalid("an in-memory database is private to its backend: complete in a transaction from BeginTx")
	}
	var file string
	err := tx.QueryRowContext(ctx, `SELECT file FROM pragma_database_list WHERE name = 'main'`).Scan(&file)
	if errors.Is(err, sql.ErrTxDone) {
		return invalid("the transaction has already ended")
	}
	if err != nil {
		return classify(ctx, err)
	}
	notOurs := invalid("the transaction is not on this backend's database file (open the same file with the \"sqlite\" driver, or use BeginTx)")
	if file == "" {
		return notOurs // a temporary or in-memory database
	}
	theirs, err1 := os.Stat(file)
	ours, err2 := os.Stat(b.path)
	if err1 != nil || err2 != nil || !os.SameFile(theirs, ours) {
		return notOurs
	}
	return nil
}
