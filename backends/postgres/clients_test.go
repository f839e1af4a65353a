package postgres

import (
	"bytes"
	"testing"
	"time"

	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/pgtest"
)

// TestValuesRoundTripOnEveryClient checks the traps that differ between
// client libraries, on each of them: times (timestamptz, read back in UTC
// to the microsecond even when the session's time zone is not UTC, and an
// injected clock with nanoseconds cut as pgx cuts them), durations (sent as
// seconds), bytea (every byte value, byte for byte; an outcome header that
// is not valid UTF-8), and NULL against empty.
func TestValuesRoundTripOnEveryClient(t *testing.T) {
	srv := pgtest.Require(t)
	// A session time zone far from UTC, with a half-hour offset.
	tz := "&options=-c%20TimeZone%3DAsia/Kolkata"
	for _, c := range []testClient{tcPgx, tcPQ, tcPQDB, tcStdlib, tcStdDB} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			schema := srv.Schema(t)
			admin := newPool(t, srv.DSN())
			if err := migratePool(ctx, admin, schema, Up); err != nil {
				t.Fatal(err)
			}
			now := time.Date(2031, 5, 6, 7, 8, 9, 123456789, time.UTC)
			nowUs := now.Truncate(time.Microsecond)
			b, err := c.open(ctx, srv.DSN()+tz, Options{Schema: schema, Migrate: MigrateVerify, Listen: ListenOff,
				Clock: contract.ClockFunc(func() time.Time { return now })})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()

			all := make([]byte, 256)
			for i := range all {
				all[i] = byte(i)
			}
			w, err := b.CreateWorkflow(ctx, contract.Workflow{ID: "wf-1", Status: "running", Snapshot: all})
			if err != nil {
				t.Fatal(err)
			}
			if !w.CreatedAt.Equal(nowUs) || w.CreatedAt.Location() != time.UTC {
				t.Errorf("CreatedAt = %v, want %v in UTC", w.CreatedAt, nowUs)
			}
			got, err := b.GetWorkflow(ctx, "", "wf-1")
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got.Snapshot, all) {
				t.Errorf("snapshot = %x, want every byte value in order", got.Snapshot)
			}
			if !got.CreatedAt.Equal(nowUs) || got.CreatedAt.Location() != time.UTC || !got.UpdatedAt.Equal(nowUs) {
				t.Errorf("read back CreatedAt %v UpdatedAt %v, want %v in UTC", got.CreatedAt, got.UpdatedAt, nowUs)
			}
			// A nil snapshot reads back empty or nil (empty ≠ nil is not
			// promised), never as something else.
			if _, err := b.CreateWorkflow(ctx, contract.Workflow{ID: "wf-2", Status: "running"}); err != nil {
				t.Fatal(err)
			}
			if got, err := b.GetWorkflow(ctx, "", "wf-2"); err != nil || len(got.Snapshot) != 0 {
				t.Errorf("nil snapshot read back as %q, %v", got.Snapshot, err)
			}
			var isNull bool
			if err := admin.QueryRow(ctx, `SELECT snapshot IS NULL FROM `+quoteIdent(schema)+`.workflows WHERE id = 'wf-2'`).Scan(&isNull); err != nil || !isNull {
				t.Errorf("a nil snapshot is stored as NULL: %v, %v", isNull, err)
			}

			// Durations as seconds: a TTL of 1.5 s and a retention of 36 h.
			cl, err := b.ClaimKey(ctx, contract.ClaimRequest{KeyRef: contract.KeyRef{Key: "k-1"}, Fingerprint: "fp", TTL: 1500 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			if want := nowUs.Add(1500 * time.Millisecond); !cl.Record.LeaseUntil.Equal(want) || cl.Record.LeaseUntil.Location() != time.UTC {
				t.Errorf("LeaseUntil = %v, want %v in UTC", cl.Record.LeaseUntil, want)
			}
			header := map[string][]string{"X-Bin": {"\xff\xfe\x00obs-text \x80"}, "X-Empty": {""}, "X-None": nil}
			body := append([]byte{0, 0xff}, all...)
			rec, err := b.CompleteKey(ctx, contract.Completion{KeyRef: cl.Record.KeyRef, Token: cl.Token,
				Outcome: contract.Outcome{Code: 299, Header: header, Body: body, Ref: "ref-ü"}, Retain: 36 * time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			if want := nowUs.Add(36 * time.Hour); !rec.ExpiresAt.Equal(want) {
				t.Errorf("ExpiresAt = %v, want %v", rec.ExpiresAt, want)
			}
			rec, err = b.GetKey(ctx, cl.Record.KeyRef)
			if err != nil {
				t.Fatal(err)
			}
			o := rec.Outcome
			if o == nil || o.Code != 299 || o.Ref != "ref-ü" || !bytes.Equal(o.Body, body) ||
				len(o.Header) != 3 || o.Header["X-Bin"][0] != header["X-Bin"][0] || o.Header["X-Empty"][0] != "" || o.Header["X-None"] != nil {
				t.Errorf("outcome read back as %+v", o)
			}
			if !rec.CompletedAt.Equal(nowUs) || rec.CompletedAt.Location() != time.UTC || !rec.LeaseUntil.IsZero() {
				t.Errorf("CompletedAt %v, LeaseUntil %v", rec.CompletedAt, rec.LeaseUntil)
			}
			// No header and no body: NULL, read back as nil.
			cl2, err := b.ClaimKey(ctx, contract.ClaimRequest{KeyRef: contract.KeyRef{Key: "k-2"}, Fingerprint: "fp", TTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := b.CompleteKey(ctx, contract.Completion{KeyRef: cl2.Record.KeyRef, Token: cl2.Token, Outcome: contract.Outcome{Code: 204}, Retain: time.Hour}); err != nil {
				t.Fatal(err)
			}
			if rec, err := b.GetKey(ctx, cl2.Record.KeyRef); err != nil || rec.Outcome == nil || rec.Outcome.Header != nil || len(rec.Outcome.Body) != 0 {
				t.Errorf("outcome without header and body read back as %+v, %v", rec.Outcome, err)
			}

			// Tokens are int64 end to end.
			if _, err := admin.Exec(ctx, `SELECT setval($1::regclass, $2)`, quoteIdent(schema)+".lease_tokens", int64(1)<<53+1); err != nil {
				t.Fatal(err)
			}
			l, err := b.AcquireLease(ctx, contract.LeaseRequest{Resource: "r", Owner: "o", TTL: 2500 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			if l.Token != int64(1)<<53+2 || !l.ExpiresAt.Equal(nowUs.Add(2500*time.Millisecond)) {
				t.Errorf("lease = %+v", l)
			}
			if err := b.FenceTx(ctx, nil, "", l.Fence()); contract.CodeOf(err) != contract.InvalidArgument {
				t.Errorf("FenceTx(nil) = %v", err)
			}
		})
	}
}
