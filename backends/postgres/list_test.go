package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/pgtest"
)

// openListBackend opens a backend of client tc on a fresh schema with its
// own test clock.
func openListBackend(t *testing.T, tc testClient) (*Backend, *testClock, *pgtest.Server, string) {
	t.Helper()
	srv := pgtest.Require(t)
	schema := srv.Schema(t)
	clock := newTestClock()
	b, err := tc.open(t.Context(), srv.DSN()+"&pool_max_conns=2", Options{Schema: schema, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b, clock, srv, schema
}

// pageKeys lists every key of q by pages of limit, following the cursor,
// and checks that no page is longer than the limit.
func pageKeys(t *testing.T, b *Backend, q contract.KeyListQuery, limit int) []contract.KeyRecord {
	t.Helper()
	var all []contract.KeyRecord
	q.Limit = limit
	for range 100 {
		page, err := b.ListKeys(t.Context(), q)
		if err != nil {
			t.Fatalf("ListKeys(%+v): %v", q, err)
		}
		if len(page) > limit {
			t.Fatalf("ListKeys(%+v) returned %d records", q, len(page))
		}
		if len(page) == 0 {
			if page != nil {
				t.Errorf("an empty page is %#v, want nil", page)
			}
			return all
		}
		all = append(all, page...)
		q.After = page[len(page)-1].Key
	}
	t.Fatal("ListKeys never ended")
	return nil
}

// pageLeases is pageKeys for leases.
func pageLeases(t *testing.T, b *Backend, q contract.LeaseListQuery, limit int) []contract.Lease {
	t.Helper()
	var all []contract.Lease
	q.Limit = limit
	for range 100 {
		page, err := b.ListLeases(t.Context(), q)
		if err != nil {
			t.Fatalf("ListLeases(%+v): %v", q, err)
		}
		if len(page) > limit {
			t.Fatalf("ListLeases(%+v) returned %d records", q, len(page))
		}
		if len(page) == 0 {
			if page != nil {
				t.Errorf("an empty page is %#v, want nil", page)
			}
			return all
		}
		all = append(all, page...)
		q.After = page[len(page)-1].Resource
	}
	t.Fatal("ListLeases never ended")
	return nil
}

func keyNames(recs []contract.KeyRecord) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.Key
	}
	return out
}

func leaseNames(ls []contract.Lease) []string {
	out := make([]string, len(ls))
	for i, l := range ls {
		out[i] = l.Resource
	}
	return out
}

// TestListKeys: on every client library, ListKeys pages through one
// scope's keys in byte order ("B" before "a") with the cursor, filters by
// state, lists abandoned claims but not completed keys past their
// retention, never lists another scope's keys, and returns each record as
// GetKey does.
func TestListKeys(t *testing.T) {
	for _, tc := range dsnClients {
		t.Run(tc.name, func(t *testing.T) {
			b, clock, _, _ := openListBackend(t, tc)
			ctx := t.Context()
			const scope = contract.Scope("t")
			claim := func(scope contract.Scope, key string, ttl time.Duration) contract.Claim {
				t.Helper()
				c, err := b.ClaimKey(ctx, contract.ClaimRequest{KeyRef: contract.KeyRef{Scope: scope, Key: key}, Fingerprint: "fp-" + key, WorkflowID: "wf-" + key, TTL: ttl})
				if err != nil || c.Kind != contract.ClaimNew {
					t.Fatalf("ClaimKey(%s/%s) = %+v, %v", scope, key, c, err)
				}
				return c
			}
			complete := func(c contract.Claim, retain time.Duration) {
				t.Helper()
				if _, err := b.CompleteKey(ctx, contract.Completion{KeyRef: c.Record.KeyRef, Token: c.Token, Retain: retain,
					Outcome: contract.Outcome{Code: 201, Header: map[string][]string{"X": {c.Record.Key}}, Body: []byte("body-" + c.Record.Key), Ref: "ref"}}); err != nil {
					t.Fatal(err)
				}
			}
			// Completed 1 minute's retention, past it after the clock moves.
			complete(claim(scope, "gone", 10*time.Second), time.Minute)
			// An abandoned claim: its lease passes, it is still listed.
			claim(scope, "abandoned", 10*time.Second)
			clock.advance(2 * time.Minute)
			for _, k := range []string{"a", "b", "a-1", "0"} {
				claim(scope, k, time.Hour)
			}
			// Completed, with a retention that holds.
			for _, k := range []string{"B", "a.1", "Z"} {
				complete(claim(scope, k, time.Hour), time.Hour)
			}
			claim("u", "a", time.Hour)  // another scope
			claim("t2", "B", time.Hour) // a scope whose name extends "t"
			claim("", "top", time.Hour) // the unscoped namespace

			all := []string{"0", "B", "Z", "a", "a-1", "a.1", "abandoned", "b"} // byte order
			if !slices.IsSorted(all) {
				t.Fatal("the expectation is not in byte order")
			}
			for _, limit := range []int{1, 2, 3, 100} {
				got := pageKeys(t, b, contract.KeyListQuery{Scope: scope}, limit)
				if names := keyNames(got); !slices.Equal(names, all) {
					t.Errorf("limit %d: listed %q, want %q", limit, names, all)
				}
			}
			// Limit 0 is no limit.
			got, err := b.ListKeys(ctx, contract.KeyListQuery{Scope: scope})
			if err != nil || !slices.Equal(keyNames(got), all) {
				t.Fatalf("ListKeys(no limit) = %q, %v", keyNames(got), err)
			}
			// Each record is GetKey's.
			for _, rec := range got {
				want, err := b.GetKey(ctx, rec.KeyRef)
				if err != nil {
					t.Fatalf("GetKey(%s): %v", rec.Key, err)
				}
				if !reflect.DeepEqual(rec, want) {
					t.Errorf("listed %+v\nGetKey  %+v", rec, want)
				}
				if rec.Scope != scope {
					t.Errorf("listed %q in scope %q", rec.Key, rec.Scope)
				}
			}
			if _, err := b.GetKey(ctx, contract.KeyRef{Scope: scope, Key: "gone"}); contract.CodeOf(err) != contract.NotFound {
				t.Errorf("GetKey(gone) = %v: the expired key should count as absent", err)
			}
			// Records do not share their outcome bytes.
			completed := pageKeys(t, b, contract.KeyListQuery{Scope: scope, State: contract.KeyCompleted}, 2)
			if names := keyNames(completed); !slices.Equal(names, []string{"B", "Z", "a.1"}) {
				t.Errorf("completed: %q", names)
			}
			for _, rec := range completed {
				if rec.Outcome == nil || string(rec.Outcome.Body) != "body-"+rec.Key || rec.Outcome.Header["X"][0] != rec.Key {
					t.Errorf("completed %s: outcome %+v", rec.Key, rec.Outcome)
				}
			}
			claimed := pageKeys(t, b, contract.KeyListQuery{Scope: scope, State: contract.KeyClaimed}, 1)
			if names := keyNames(claimed); !slices.Equal(names, []string{"0", "a", "a-1", "abandoned", "b"}) {
				t.Errorf("claimed: %q", names)
			}
			for _, rec := range claimed {
				if rec.Outcome != nil || rec.LeaseUntil.IsZero() {
					t.Errorf("claimed %s: %+v", rec.Key, rec)
				}
			}
			// A cursor between keys, and past the end.
			if got := pageKeys(t, b, contract.KeyListQuery{Scope: scope, After: "a-"}, 10); !slices.Equal(keyNames(got), []string{"a-1", "a.1", "abandoned", "b"}) {
				t.Errorf("after a-: %q", keyNames(got))
			}
			if got := pageKeys(t, b, contract.KeyListQuery{Scope: scope, After: "b"}, 10); len(got) != 0 {
				t.Errorf("after b: %q", keyNames(got))
			}
			// Other scopes see only their own.
			for sc, want := range map[contract.Scope][]string{"u": {"a"}, "t2": {"B"}, "": {"top"}, "none": nil} {
				if got := pageKeys(t, b, contract.KeyListQuery{Scope: sc}, 10); !slices.Equal(keyNames(got), want) {
					t.Errorf("scope %q: %q, want %q", sc, keyNames(got), want)
				}
			}
			// Once the retention of the completed keys passes, they go.
			clock.advance(2 * time.Hour)
			if got := pageKeys(t, b, contract.KeyListQuery{Scope: scope}, 3); !slices.Equal(keyNames(got), []string{"0", "a", "a-1", "abandoned", "b"}) {
				t.Errorf("after the retention: %q", keyNames(got))
			}
			if got := pageKeys(t, b, contract.KeyListQuery{Scope: scope, State: contract.KeyCompleted}, 3); len(got) != 0 {
				t.Errorf("completed after the retention: %q", keyNames(got))
			}
		})
	}
}

// TestListLeases: on every client library, ListLeases pages through one
// scope's leases in byte order with the cursor, never lists a released
// lease, lists expired ones unless Held, and with Held only those that
// expire after the injected clock's now (a lease expiring exactly now is
// not held); each lease is as GetLease returns it.
func TestListLeases(t *testing.T) {
	for _, tc := range dsnClients {
		t.Run(tc.name, func(t *testing.T) {
			b, clock, _, _ := openListBackend(t, tc)
			ctx := t.Context()
			const scope = contract.Scope("t")
			acquire := func(scope contract.Scope, res string, ttl time.Duration) contract.Lease {
				t.Helper()
				l, err := b.AcquireLease(ctx, contract.LeaseRequest{Scope: scope, Resource: res, Owner: "o-" + res, TTL: ttl})
				if err != nil {
					t.Fatalf("AcquireLease(%s/%s): %v", scope, res, err)
				}
				return l
			}
			acquire(scope, "expired", 10*time.Second)
			acquire(scope, "edge", 30*time.Second) // expires exactly at the check
			released := acquire(scope, "released", time.Hour)
			if ok, err := b.ReleaseLease(ctx, released); err != nil || !ok {
				t.Fatalf("ReleaseLease = %v, %v", ok, err)
			}
			acquire(scope, "a", time.Hour)
			acquire(scope, "B", time.Hour)
			acquire(scope, "b", time.Hour)
			acquire(scope, "A-1", time.Hour)
			acquire("u", "a", time.Hour)
			acquire("", "top", time.Hour)
			clock.advance(30 * time.Second)

			all := []string{"A-1", "B", "a", "b", "edge", "expired"}
			held := []string{"A-1", "B", "a", "b"}
			for _, limit := range []int{1, 2, 4, 100} {
				if got := pageLeases(t, b, contract.LeaseListQuery{Scope: scope}, limit); !slices.Equal(leaseNames(got), all) {
					t.Errorf("limit %d: %q, want %q", limit, leaseNames(got), all)
				}
				if got := pageLeases(t, b, contract.LeaseListQuery{Scope: scope, Held: true}, limit); !slices.Equal(leaseNames(got), held) {
					t.Errorf("held, limit %d: %q, want %q", limit, leaseNames(got), held)
				}
			}
			got, err := b.ListLeases(ctx, contract.LeaseListQuery{Scope: scope})
			if err != nil || !slices.Equal(leaseNames(got), all) {
				t.Fatalf("ListLeases(no limit) = %q, %v", leaseNames(got), err)
			}
			for _, l := range got {
				want, err := b.GetLease(ctx, scope, l.Resource)
				if err != nil {
					t.Fatalf("GetLease(%s): %v", l.Resource, err)
				}
				if l != want {
					t.Errorf("listed %+v\nGetLease %+v", l, want)
				}
			}
			if got := pageLeases(t, b, contract.LeaseListQuery{Scope: scope, Held: true, After: "B"}, 10); !slices.Equal(leaseNames(got), []string{"a", "b"}) {
				t.Errorf("held after B: %q", leaseNames(got))
			}
			for sc, want := range map[contract.Scope][]string{"u": {"a"}, "": {"top"}, "none": nil} {
				if got := pageLeases(t, b, contract.LeaseListQuery{Scope: sc}, 10); !slices.Equal(leaseNames(got), want) {
					t.Errorf("scope %q: %q, want %q", sc, leaseNames(got), want)
				}
			}
			// A microsecond earlier, "edge" was still held.
			clock.advance(-time.Microsecond)
			if got := pageLeases(t, b, contract.LeaseListQuery{Scope: scope, Held: true}, 10); !slices.Equal(leaseNames(got), []string{"A-1", "B", "a", "b", "edge"}) {
				t.Errorf("held a microsecond earlier: %q", leaseNames(got))
			}
			// A released lease taken again is listed again.
			acquire(scope, "released", time.Hour)
			if got := pageLeases(t, b, contract.LeaseListQuery{Scope: scope, Held: true, After: "edge"}, 10); !slices.Equal(leaseNames(got), []string{"released"}) {
				t.Errorf("held after edge: %q", leaseNames(got))
			}
		})
	}
}

// TestListKeysCorrupt: a key whose stored outcome cannot be decoded fails
// the page that holds it with ErrCorrupt (not retryable, no user data in
// the message), as GetKey does; a page without it (a cursor past it, or
// the claimed filter) still lists.
func TestListKeysCorrupt(t *testing.T) {
	for _, tc := range dsnClients {
		t.Run(tc.name, func(t *testing.T) {
			b, _, srv, schema := openListBackend(t, tc)
			ctx := context.Background()
			s, err := durable.New(b)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			for _, key := range []string{"secret-key-1", "secret-key-2"} {
				ref := durable.KeyRef{Key: key}
				c, err := s.ClaimKey(ctx, durable.ClaimRequest{KeyRef: ref, Fingerprint: "fp-secret", TTL: time.Minute})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := s.CompleteKey(ctx, durable.Completion{KeyRef: ref, Token: c.Token,
					Outcome: durable.Outcome{Code: 201, Header: map[string][]string{"Location": {"/secret"}}, Body: []byte("secret body")}}); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := s.ClaimKey(ctx, durable.ClaimRequest{KeyRef: durable.KeyRef{Key: "secret-key-3"}, Fingerprint: "fp-secret", TTL: time.Minute}); err != nil {
				t.Fatal(err)
			}
			if err := srv.Exec(ctx, `UPDATE "`+schema+`".idempotency_keys SET outcome_header = '\x02ff'::bytea WHERE key = 'secret-key-1'`); err != nil {
				t.Fatal(err)
			}
			_, err = s.ListKeys(ctx, durable.KeyListQuery{})
			checkCorrupt(t, "ListKeys", err)
			// The error names the record, for an operator's tool to offer
			// its delete.
			if ref, ok := durable.CorruptRecord(err); !ok || ref != (durable.RecordRef{Kind: durable.KindKey, ID: "secret-key-1"}) {
				t.Errorf("CorruptRecord(ListKeys's error) = %+v, %v; want the key secret-key-1", ref, ok)
			}
			_, err = s.ListKeys(ctx, durable.KeyListQuery{State: durable.KeyCompleted, Limit: 1})
			checkCorrupt(t, "ListKeys(completed)", err)
			if got, err := s.ListKeys(ctx, durable.KeyListQuery{After: "secret-key-1"}); err != nil || !slices.Equal(keyNames(got), []string{"secret-key-2", "secret-key-3"}) {
				t.Errorf("ListKeys after the damaged key = %q, %v", keyNames(got), err)
			}
			if got, err := s.ListKeys(ctx, durable.KeyListQuery{State: durable.KeyClaimed}); err != nil || !slices.Equal(keyNames(got), []string{"secret-key-3"}) {
				t.Errorf("ListKeys(claimed) = %q, %v", keyNames(got), err)
			}
		})
	}
}

// TestListStatementsScanThePrimaryKey: each list statement reads its
// table's primary key in order and stops at the limit: an index scan, no
// sort, on a table large enough for the planner to care, with most leases
// expired (the held filter) and most keys claimed (the state filter).
func TestListStatementsScanThePrimaryKey(t *testing.T) {
	b, _, srv := newTestBackend(t, Options{})
	ctx := t.Context()
	pool := newPool(t, srv.DSN())
	q := quoteIdent(b.schema)
	for _, stmt := range []string{
		`INSERT INTO ` + q + `.idempotency_keys (scope, key, fingerprint, workflow_id, state, token, lease_until, created_at,
			completed_at, expires_at, outcome_code)
		SELECT 's', 'k-' || i, 'fp', '', CASE WHEN i % 10 = 0 THEN 'completed' ELSE 'claimed' END, 'tok',
			CASE WHEN i % 10 = 0 THEN NULL ELSE now() + interval '1 hour' END, now(),
			CASE WHEN i % 10 = 0 THEN now() END, CASE WHEN i % 10 = 0 THEN now() + interval '1 hour' END,
			CASE WHEN i % 10 = 0 THEN 200 END
		FROM generate_series(1, 2000) i`,
		`INSERT INTO ` + q + `.leases (scope, resource, owner, token, acquired_at, expires_at, released)
		SELECT 's', 'r-' || i, 'o', i, now(), CASE WHEN i % 10 = 0 THEN now() + interval '1 hour' ELSE now() - interval '1 hour' END, i % 7 = 0
		FROM generate_series(1, 2000) i`,
		`ANALYZE ` + q + `.idempotency_keys`,
		`ANALYZE ` + q + `.leases`,
	} {
		if _, err := pool.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name  string
		s     *statement
		args  []any
		index string
	}{
		{"ListKeys", qListKeys.statement, qListKeys.args(listKeysParams{Scope: "s", After: "k-1", Limit: pageLimit(10)}), "idempotency_keys_pkey"},
		{"ListKeys/State", qListKeys.statement, qListKeys.args(listKeysParams{Scope: "s", After: "k-1", Limit: pageLimit(10), State: contract.KeyCompleted}), "idempotency_keys_pkey"},
		{"ListLeases", qListLeases.statement, qListLeases.args(listLeasesParams{Scope: "s", After: "r-1", Limit: pageLimit(10)}), "leases_pkey"},
		{"ListLeasesHeld", qListLeasesHeld.statement, qListLeasesHeld.args(listLeasesHeldParams{Scope: "s", After: "r-1", Limit: pageLimit(10)}), "leases_pkey"},
	} {
		var plan []byte
		if err := pool.QueryRow(ctx, `EXPLAIN (FORMAT JSON) `+c.s.sql(b.st), c.args...).Scan(&plan); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var doc []map[string]any
		if err := json.Unmarshal(plan, &doc); err != nil {
			t.Fatal(err)
		}
		var nodes []string
		var walk func(n map[string]any)
		walk = func(n map[string]any) {
			nodes = append(nodes, fmt.Sprintf("%v %v", n["Node Type"], n["Index Name"]))
			if kids, ok := n["Plans"].([]any); ok {
				for _, k := range kids {
					walk(k.(map[string]any))
				}
			}
		}
		walk(doc[0]["Plan"].(map[string]any))
		if s := strings.Join(nodes, "; "); !strings.Contains(s, "Index Scan "+c.index) || strings.Contains(s, "Sort") {
			t.Errorf("%s: plan %s, want an index scan of %s and no sort", c.name, s, c.index)
		}
	}
}
