package redis

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/outcomecodec"
	goredis "github.com/redis/go-redis/v9"
)

var _ contract.TxCompleter = (*Backend)(nil)

// ScopeKey returns the name of a Redis key of the caller's in scope's
// cluster slot: "<prefix>:{<scope's tag>}:u:<name>", with the same hash tag
// as the scope's records (see the package documentation's key layout).
// Durable never reads, lists, cleans up or deletes these keys; they are
// the caller's. A [Tx] whose completion is in scope may write them: build
// every key a transaction's commands touch with ScopeKey and the
// completion's scope, so that the whole transaction is one slot (on a
// Redis Cluster, EXEC refuses a transaction that spans slots).
func (b *Backend) ScopeKey(scope contract.Scope, name string) string {
	return b.base(scope) + "u:" + name
}

// Tx is the transaction that [Backend.BeginTx] begins, and its Raw: the
// caller's own Redis commands, recorded with Queue, and at most one
// completion (CompleteKeyTx), sent together at Commit as one MULTI/EXEC on
// the node of the completion's slot, after WATCH of the key's record (and
// of the fence's lease record). Nothing is sent before Commit but the
// reads that check the claim. A Tx is not safe for concurrent use.
//
//	tx.Queue(func(p goredis.Pipeliner) {
//		incr = p.Incr(ctx, b.ScopeKey(scope, "counter"))
//	})
//
// The commands' results are in their Cmds (incr.Val()) once Commit returned
// nil.
type Tx struct {
	b *Backend

	mu    sync.Mutex
	queue []func(goredis.Pipeliner)
	comp  *pendingCompletion
	state int // txOpen, txCommitted, txRolledBack, txSpent
}

const (
	txOpen = iota
	txCommitted
	txRolledBack
	txSpent // a Commit failed after EXEC may have run
)

// pendingCompletion is what CompleteKeyTx checked and Commit stores.
type pendingCompletion struct {
	c    contract.Completion
	base string
	rec  string // the key's record
	slot int
	done bool // the token had already completed the key: Commit writes no completion
	blob []byte
	ca   int64 // CompletedAt, ExpiresAt, ForgetAt in µs (the CompleteKeyTx's reading of the clock)
	ea   int64
	fa   int64
}

// Raw returns the Tx itself: [Store.DoTx] with a function taking a *Tx,
// or TxAs[*redis.Tx], reach it.
func (t *Tx) Raw() any { return t }

// Queue records fn, which queues the caller's own commands on p (a
// pipeline that Commit sends inside MULTI/EXEC, after the caller's earlier
// ones and before the completion's writes). fn runs once, at Commit,
// before anything is sent; keep the Cmds it queues to read their results
// after Commit returned nil.
// Queue sends nothing. After Commit or Rollback it does nothing.
func (t *Tx) Queue(fn func(p goredis.Pipeliner)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.state == txOpen && fn != nil {
		t.queue = append(t.queue, fn)
	}
}

// ScopeKey is [Backend.ScopeKey] of the Tx's backend.
func (t *Tx) ScopeKey(scope contract.Scope, name string) string { return t.b.ScopeKey(scope, name) }

// Rollback discards the queued commands and the completion: nothing was
// sent, so the claim is as it was. After a Commit that returned nil, or a
// Rollback, it does nothing and returns nil; after a Commit that may have
// applied (OutcomeUnknown, Unknown) it only ends the Tx.
func (t *Tx) Rollback(ctx context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.state == txOpen || t.state == txSpent {
		t.state = txRolledBack
		t.queue, t.comp = nil, nil
	}
	return nil
}

// BeginTx implements contract.TxCompleter: it returns a [Tx], which sends
// nothing until Commit (ctx is unused).
func (b *Backend) BeginTx(ctx context.Context) (contract.Tx, error) {
	if b.closed.Load() {
		return nil, errClosed()
	}
	return &Tx{b: b}, nil
}

// keyCheck reads the key's record and judges, on the clock (ARGV[2]),
// whether token still holds the claim, by CompleteKey's rule, and the
// fence, if any. It writes nothing. ARGV: base, now, key, token, fence
// resource, fence owner, fence token, tolerance. Replies: 'fencedkey',
// 'fenced', or 'ok'/'done' (the claim is the token's, or the token has
// completed the key), the clock's reading, then key_reply.
var keyCheck = script(`
local k = KEYS[1]
local now = clock(ARGV[2])
local r = keyrec(k)
if not r or not key_live(r, now) or r.t ~= ARGV[4] then return {'fencedkey'} end
if r.st == 'd' then return cat({'done', f(now)}, key_reply(r, now)) end
if ARGV[5] ~= '' and not fence_ok(ARGV[5], ARGV[6], ARGV[7], now, tonumber(ARGV[8])) then return {'fenced'} end
return cat({'ok', f(now)}, key_reply(r, now))
`)

// check runs keyCheck for p's completion with s (the backend, or a Tx
// of the slot's node inside WATCH) and returns its verdict, the clock's
// reading and the record.
func (b *Backend) check(ctx context.Context, s goredis.Scripter, p *pendingCompletion) (string, int64, contract.KeyRecord, error) {
	c := p.c
	fr, fo, ft := fenceArgs(c.Fence)
	keys := []string{p.rec}
	args := []any{p.base, b.now(), c.Key, c.Token, fr, fo, ft, b.tol()}
	var v any
	var err error
	if s == nil {
		v, err = b.run(ctx, keyCheck, false, keys, args...)
	} else {
		v, err = keyCheck.Run(ctx, s, keys, args...).Result()
	}
	if err != nil {
		return "", 0, contract.KeyRecord{}, err
	}
	r := asReply(v)
	switch verdict := r.str(); verdict {
	case "fencedkey":
		return "", 0, contract.KeyRecord{}, errFencedKey()
	case "fenced":
		return "", 0, contract.KeyRecord{}, &contract.Error{Code: contract.Fenced, Msg: "fence is not valid"}
	case "ok", "done":
		now := r.int()
		rec, err := decodeKey(r, c.KeyRef)
		if err != nil {
			return "", 0, contract.KeyRecord{}, err
		}
		return verdict, now, rec, nil
	}
	return "", 0, contract.KeyRecord{}, corrupt("idempotency key")
}

// txOf returns the backend's *Tx in tx: a *Tx, or a value whose Raw
// returns one (the Store's wrapper).
func (b *Backend) txOf(tx any) (*Tx, error) {
	t, ok := tx.(*Tx)
	if !ok {
		if r, isRaw := tx.(interface{ Raw() any }); isRaw {
			t, ok = r.Raw().(*Tx)
		}
	}
	if !ok || t == nil {
		return nil, invalid("CompleteKeyTx needs a *redis.Tx from BeginTx")
	}
	if t.b != b {
		return nil, invalid("CompleteKeyTx needs a *redis.Tx from this backend's BeginTx")
	}
	return t, nil
}

// CompleteKeyTx implements contract.TxCompleter: it checks now, on the
// key's node and clock, that c.Token holds the claim (and that c.Fence, if
// set, is valid) — Fenced at once if not — and records the completion in
// tx (a [Tx] from BeginTx, or a value whose Raw returns one), to be
// written at Commit together with the queued commands. It returns the
// record a commit stores: its CompletedAt is this call's reading of the
// clock, and Commit stores exactly these times. A retried CompleteKeyTx
// in a new Tx with the same token, once the first committed, returns the
// stored record (as CompleteKey does); that Tx's Commit then sends its
// queued commands and no completion, as a PostgreSQL transaction would
// commit the caller's statements again.
//
// Unlike PostgreSQL, nothing is locked: a reclaim of the key does not wait
// for the Tx. Commit instead fails with Fenced, applying nothing, if the
// key's record (or the fence's lease record) changed between this check
// and EXEC; the effect and the completion are applied together or not at
// all, and never under a reclaimed claim.
//
// One completion per Tx: a second is InvalidArgument. A Tx that is
// committed or rolled back, of another backend, or not a *Tx is
// InvalidArgument.
func (b *Backend) CompleteKeyTx(ctx context.Context, tx any, c contract.Completion) (contract.KeyRecord, error) {
	if b.closed.Load() {
		return contract.KeyRecord{}, errClosed()
	}
	t, err := b.txOf(tx)
	if err != nil {
		return contract.KeyRecord{}, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.state != txOpen:
		return contract.KeyRecord{}, invalid("transaction is already committed or rolled back")
	case t.comp != nil:
		return contract.KeyRecord{}, invalid("a Tx holds one completion; begin another Tx for another key")
	}
	base := b.base(c.Scope)
	p := &pendingCompletion{c: c, base: base, rec: base + "k:" + c.Key}
	p.slot = keySlot(p.rec)
	verdict, now, rec, err := b.check(ctx, nil, p)
	if err != nil {
		return contract.KeyRecord{}, err
	}
	if verdict == "done" {
		p.done = true
		t.comp = p
		return rec, nil
	}
	p.blob = outcomecodec.AppendOutcome(make([]byte, 0, outcomecodec.OutcomeLen(&c.Outcome)), &c.Outcome)
	p.ca = now
	p.ea = now + c.Retain.Microseconds()
	p.fa = now + max(c.Retain, c.Tombstone).Microseconds()
	// The record the commit stores, as GetKey will read it back.
	out, rest, err := outcomecodec.DecodeOutcome(p.blob)
	if err != nil || len(rest) != 0 {
		return contract.KeyRecord{}, &contract.Error{Code: contract.InvalidArgument, Msg: "outcome cannot be encoded", Err: err}
	}
	rec.LeaseUntil = time.Time{}
	rec.CompletedAt, rec.ExpiresAt, rec.ForgetAt = microTime(p.ca), microTime(p.ea), microTime(p.fa)
	if p.ea <= now {
		rec.State, rec.Outcome = contract.KeyExpired, &contract.Outcome{Code: c.Outcome.Code}
	} else {
		rec.State, rec.Outcome = contract.KeyCompleted, out
	}
	t.comp = p
	return rec, nil
}

func microTime(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.UnixMicro(n).UTC()
}

func micros(n int64) string { return strconv.FormatInt(n, 10) }

// CommandError is the cause (errors.As) of a Commit error whose
// transaction ran — the completion, if the Tx held one, is stored — but
// in which one of the caller's queued commands failed at run time: Redis
// does not roll a transaction back, so the caller's other commands applied.
type CommandError struct {
	Index int    // the failed command's position among the caller's queued commands, from 0
	Name  string // its name (for example "incr")
	Err   error  // the server's error, which may quote the command's arguments
}

// Error names the command, not its arguments nor the server's message
// (which may quote them): see Err.
func (e *CommandError) Error() string {
	return "redis: queued command " + strconv.Itoa(e.Index) + " (" + e.Name + ") failed"
}

func (e *CommandError) Unwrap() error { return e.Err }

// Commit sends, on one connection of the node of the completion's slot:
// WATCH of the key's record (and of the fence's lease record), the
// re-check of the claim (and fence) by CompleteKey's rule on the
// server's clock, then MULTI, the queued commands, the completion's
// writes and the PUBLISH that wakes WaitKey, and EXEC (with Options.Wait,
// then WAIT on the same connection). A Tx without a completion sends its
// queued commands alone in MULTI/EXEC, on the node of the first command's
// key.
//
// Before sending anything, every argument of the queued commands that
// starts with the prefix followed by "{" (a key built by ScopeKey, or a
// name of one of durable's own keys) must hash to the completion's slot:
// otherwise Commit returns InvalidArgument and nothing is sent. Other
// arguments are not checked; on a Redis Cluster a key of theirs in
// another slot makes the server refuse the transaction (CROSSSLOT or
// MOVED): InvalidArgument, nothing applied. MULTI, EXEC, DISCARD, WATCH
// and UNWATCH cannot be queued (InvalidArgument).
//
// Errors:
//   - Fenced: the claim (or fence) no longer holds, or the key's record
//     or the fence's lease record changed since WATCH (EXEC aborted):
//     nothing was applied.
//   - InvalidArgument, Unavailable: nothing was applied (a command refused
//     when queued, a connection that could not be made, the Tx already
//     rolled back).
//   - OutcomeUnknown: the connection failed or ctx ended after EXEC may
//     have been sent, or fewer replicas than Options.Wait acknowledged it.
//     All of the transaction applied or none of it: a retried
//     CompleteKeyTx with the token tells which.
//   - Unknown, with a [*CommandError] as its cause: the transaction ran
//     (the completion is stored: a retry of the request replays its
//     outcome), but the caller's queued command Index failed at run time
//     (a wrong type, a value not an integer) and Redis does not roll back,
//     so the caller's other commands applied. (A Store reports a failed
//     Commit of code Unknown as OutcomeUnknown.)
//
// After Commit returned nil, a second Commit returns nil; after Rollback,
// or after a Commit that failed with OutcomeUnknown or Unknown (it may
// have applied), Commit is InvalidArgument and sends nothing. After any
// other error nothing was applied: Commit may be called again (the queued
// functions run again), or Rollback.
func (t *Tx) Commit(ctx context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch t.state {
	case txCommitted:
		return nil
	case txRolledBack:
		return invalid("transaction is already rolled back")
	case txSpent:
		return invalid("an earlier Commit of this transaction failed after EXEC may have run; begin another")
	}
	b := t.b
	if b.closed.Load() {
		return errClosed()
	}
	if err := ctx.Err(); err != nil {
		return &contract.Error{Code: contract.Canceled, Msg: "context ended", Err: err}
	}
	// Record the caller's commands once, to check them before sending.
	rec := b.rdb.Pipeline()
	for _, fn := range t.queue {
		fn(rec)
	}
	cmds := append([]goredis.Cmder(nil), rec.Cmds()...)
	rec.Discard()
	if len(cmds) == 0 && t.comp == nil {
		t.state = txCommitted
		return nil
	}
	slot := -1
	if t.comp != nil {
		slot = t.comp.slot
	}
	route := ""
	for i, cmd := range cmds {
		args := cmd.Args()
		if len(args) == 0 {
			return invalid("queued command " + strconv.Itoa(i) + " is empty")
		}
		switch strings.ToLower(cmd.Name()) {
		case "multi", "exec", "discard", "watch", "unwatch":
			return invalid("queued command " + strconv.Itoa(i) + " is a transaction command; Commit sends MULTI and EXEC itself")
		}
		for _, a := range args[1:] {
			s, ok := argString(a)
			if !ok {
				continue
			}
			if route == "" {
				route = s
			}
			if !strings.HasPrefix(s, b.prefix+"{") {
				continue
			}
			if slot < 0 {
				slot = keySlot(s)
			} else if keySlot(s) != slot {
				return invalid("queued command " + strconv.Itoa(i) + " names a key of the prefix outside the completion's cluster slot: build every key with ScopeKey and the completion's scope")
			}
		}
	}
	if t.comp != nil {
		route = t.comp.rec
	}
	if route == "" {
		return invalid("the queued commands name no key: nothing tells which node to send them to")
	}
	err := b.commit(ctx, route, t.comp, cmds)
	switch contract.CodeOf(err) {
	case contract.OutcomeUnknown, contract.Unknown:
		// It may have applied: never send it again.
		t.state = txSpent
	}
	if err == nil {
		t.state = txCommitted
	}
	return err
}

func argString(a any) (string, bool) {
	switch v := a.(type) {
	case string:
		return v, true
	case []byte:
		return string(v), true
	}
	return "", false
}

// commit runs WATCH, the check, MULTI … EXEC (and WAIT) on route's node,
// again (at most 4 times) while the cluster redirects it before EXEC.
func (b *Backend) commit(ctx context.Context, route string, p *pendingCompletion, cmds []goredis.Cmder) error {
	var last error
	for attempt := 0; attempt < 4; attempt++ {
		node, err := b.node(ctx, route)
		if err != nil {
			return b.fail(ctx, err, false)
		}
		var watch []string
		if p != nil {
			watch = append(watch, p.rec)
			if p.c.Fence != nil {
				watch = append(watch, p.base+"l:"+p.c.Fence.Resource)
			}
		}
		sent := false
		err = node.Watch(ctx, func(tx *goredis.Tx) error {
			var e error
			sent, e = b.exec(ctx, tx, p, cmds)
			return e
		}, watch...)
		if err == nil {
			return nil
		}
		var ce *contract.Error
		if errors.As(err, &ce) {
			return err
		}
		if !sent && b.cluster != nil && redirected(err) && ctx.Err() == nil {
			// MOVED or ASK before MULTI: learn the slot map and go again.
			last = err
			b.cluster.ReloadState(ctx)
			time.Sleep(time.Duration(attempt*50) * time.Millisecond)
			continue
		}
		return b.fail(ctx, err, sent)
	}
	return b.fail(ctx, last, false)
}

// exec runs inside WATCH on tx's connection. sent reports whether MULTI
// … EXEC may have been sent.
func (b *Backend) exec(ctx context.Context, tx *goredis.Tx, p *pendingCompletion, cmds []goredis.Cmder) (sent bool, err error) {
	if p != nil {
		verdict, _, _, err := b.check(ctx, tx, p)
		if err != nil {
			return false, err
		}
		if (verdict == "done") != p.done {
			// The token completed the key with CompleteKey meanwhile.
			return false, &contract.Error{Code: contract.Fenced, Msg: "the key changed since CompleteKeyTx; nothing was applied"}
		}
	}
	pipe := tx.TxPipeline()
	if len(cmds) > 0 {
		_ = pipe.BatchProcess(ctx, cmds...)
	}
	var ours []goredis.Cmder
	if p != nil && !p.done {
		c, base, key := p.c, p.base, p.c.Key
		ours = append(ours,
			pipe.HSet(ctx, p.rec, "st", "d", "ca", micros(p.ca), "ea", micros(p.ea), "fa", micros(p.fa),
				"oc", strconv.Itoa(c.Outcome.Code), "o", p.blob),
			pipe.HDel(ctx, p.rec, "lu"),
			pipe.ZRem(ctx, base+"i:kc", key),
			pipe.ZRem(ctx, base+"i:kx", key),
			pipe.ZAdd(ctx, base+"i:kf", goredis.Z{Score: float64(p.fa), Member: key}),
			pipe.ZAdd(ctx, base+"i:ke", goredis.Z{Score: float64(p.ea), Member: key}),
			pipe.Publish(ctx, base+"c:"+key, "1"),
		)
	}
	_, err = pipe.Exec(ctx)
	if err != nil {
		return b.execError(ctx, err, cmds, ours)
	}
	if b.opts.Wait > 0 {
		w := tx.Do(ctx, "WAIT", b.opts.Wait, b.opts.WaitTimeout.Milliseconds())
		if err := w.Err(); err != nil {
			return true, &contract.Error{Code: contract.OutcomeUnknown, Msg: "the transaction applied on the primary but WAIT failed: replicas may not have it", Err: err}
		}
		if n, err := w.Int64(); err != nil || n < int64(b.opts.Wait) {
			return true, &contract.Error{Code: contract.OutcomeUnknown,
				Msg: "the transaction applied on the primary but fewer replicas than wait acknowledged it within wait_timeout; a failover may lose it"}
		}
	}
	return true, nil
}

// execError classifies a failed MULTI … EXEC.
func (b *Backend) execError(ctx context.Context, err error, cmds, ours []goredis.Cmder) (bool, error) {
	if errors.Is(err, goredis.TxFailedErr) {
		return true, &contract.Error{Code: contract.Fenced, Msg: "the key's record or the fence's lease changed before EXEC (reclaimed, released, completed or cleaned up); nothing was applied", Err: err}
	}
	var rerr goredis.Error
	if !errors.As(err, &rerr) || errors.Is(err, goredis.ErrClosed) {
		// The connection failed: EXEC may have run.
		return true, b.fail(ctx, err, true)
	}
	// The first command's own error: after EXECABORT, go-redis gives the
	// commands that were queued fine the EXECABORT error itself.
	first := func(list []goredis.Cmder) (int, error) {
		for i, c := range list {
			if e := c.Err(); e != nil && !goredis.IsExecAbortError(e) {
				return i, e
			}
		}
		return -1, nil
	}
	ui, uerr := first(cmds)
	oi, oerr := first(ours)
	if goredis.IsExecAbortError(err) {
		// A command was refused when queued: EXEC discarded everything.
		if oerr != nil && uerr == nil {
			return false, b.fail(ctx, oerr, false)
		}
		if uerr != nil {
			msg := "queued command " + strconv.Itoa(ui) + " was refused by the server when queued (a wrong argument, an unknown command, or a key on another node); nothing was applied"
			if ce := b.fail(ctx, uerr, false); contract.CodeOf(ce) != contract.Unknown && !redirected(uerr) {
				return false, ce
			}
			return false, &contract.Error{Code: contract.InvalidArgument, Msg: msg, Err: &CommandError{Index: ui, Name: cmds[ui].Name(), Err: uerr}}
		}
		return false, b.fail(ctx, err, false)
	}
	// EXEC itself refused (CROSSSLOT, …): go-redis gives its error to
	// every command, and nothing ran. (Had every command failed at run
	// time with one same error, nothing would have applied either.)
	refused := true
	for _, list := range [][]goredis.Cmder{cmds, ours} {
		for _, c := range list {
			if e := c.Err(); e == nil || e.Error() != err.Error() {
				refused = false
			}
		}
	}
	if refused || uerr == nil && oerr == nil {
		if goredis.HasErrorPrefix(err, "CROSSSLOT") {
			return false, invalid("the transaction's keys span cluster slots: build every key with ScopeKey and the completion's scope; nothing was applied")
		}
		return false, b.fail(ctx, err, false)
	}
	if oerr != nil {
		return true, &contract.Error{Code: contract.Unknown, Msg: "the transaction ran but write " + strconv.Itoa(oi) + " of the completion failed (a key under the prefix holds the wrong type?); inspect the key", Err: oerr}
	}
	return true, &contract.Error{Code: contract.Unknown,
		Msg: "the transaction ran and the completion is stored (a retry replays its outcome), but queued command " + strconv.Itoa(ui) + " failed and Redis does not roll back: the other commands applied",
		Err: &CommandError{Index: ui, Name: cmds[ui].Name(), Err: uerr}}
}

// keySlot is the Redis Cluster hash slot of key: CRC16 (XMODEM) of its
// hash tag (the bytes between the first "{" and the next "}", if not
// empty) or of the whole key, modulo 16384.
func keySlot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for k := 0; k < len(key); k++ {
		crc ^= uint16(key[k]) << 8
		for n := 0; n < 8; n++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}
