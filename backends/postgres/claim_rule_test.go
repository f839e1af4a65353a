package postgres

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/claimrule"
)

// squash normalizes the whitespace of SQL text: every run of white space
// becomes one space, and none follows "(" or precedes ")".
func squash(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	return strings.NewReplacer("( ", "(", " )", ")").Replace(s)
}

// latestClaimKeyFunction returns the name and text of the last up
// migration that defines durable_claim_key: the definition a current
// schema runs.
func latestClaimKeyFunction(t *testing.T) (name, text string) {
	t.Helper()
	for _, n := range migrationFileNames(t) {
		if !strings.HasSuffix(n, ".up.sql") {
			continue
		}
		raw, err := os.ReadFile("migrations/" + n)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(raw), "CREATE OR REPLACE FUNCTION {schema}.durable_claim_key(") {
			name, text = n, string(raw)
		}
	}
	if name == "" {
		t.Fatal("no migration defines durable_claim_key")
	}
	return name, text
}

// TestClaimKeyFunctionIsTheRule: the body of durable_claim_key as the
// latest migration that defines it fixed it (a change needs a new
// migration) decides with the predicates that ClaimKey's statement uses:
// its UPDATE of the caller's own claim runs only when the statement saw
// that claim (p_seen_token = p_token), its WHERE is claimHeld over the
// function's parameters (claimInHold), and it returns claimTakenHeld (or,
// when it updated nothing, goes on to the INSERT); its DO UPDATE's WHERE is claimTakeover over the function's frame (the stored
// row k and the row it would insert, excluded) with the seen token; both up
// to white space; and it returns the taken codes that claimResult reads.
func TestClaimKeyFunctionIsTheRule(t *testing.T) {
	name, body := latestClaimKeyFunction(t)
	if name != "000005_tombstones_own_claims.up.sql" {
		t.Errorf("durable_claim_key is last defined by %s: check it here against the builders", name)
	}
	held := regexp.MustCompile(`(?s)IF p_seen_token = p_token THEN\s*UPDATE \{schema\}\.idempotency_keys AS k\s*SET lease_until = v_now \+ make_interval\(secs => p_ttl\)\s*WHERE k\.scope = p_scope AND k\.key = p_key\s*AND (.*?)\n\s*RETURNING (\d+) INTO v_kind;\s*IF FOUND THEN\s*RETURN v_kind;\s*END IF;\s*END IF;`).FindStringSubmatch(body)
	if held == nil {
		t.Fatalf("%s has no UPDATE of the caller's own claim in the form the test reads", name)
	}
	if got, want := squash(held[1]), squash(claimHeld(claimInHold)); got != want {
		t.Errorf("durable_claim_key's UPDATE WHERE differs from claimHeld(claimInHold):\n got: %s\nwant: %s", got, want)
	}
	if held[2] != strconv.Itoa(claimTakenHeld) {
		t.Errorf("durable_claim_key's UPDATE returns %s, want %d", held[2], claimTakenHeld)
	}
	m := regexp.MustCompile(`(?s)ON CONFLICT \(scope, key\) DO UPDATE SET.*?\n\s*WHERE (.*?)\n\s*RETURNING (.*?);\s*RETURN (.*?);`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("%s has no DO UPDATE … WHERE … RETURNING … RETURN …: the test cannot find the function's predicate", name)
	}
	if got, want := squash(m[1]), squash(claimTakeover(claimInFunction, "p_seen_token")); got != want {
		t.Errorf("durable_claim_key's WHERE differs from claimTakeover(claimInFunction):\n got: %s\nwant: %s", got, want)
	}
	wantRet := fmt.Sprintf("CASE WHEN k.created_at = v_now THEN %d ELSE %d END INTO v_kind", claimTakenNew, claimTakenReclaim)
	if got := squash(m[2]); got != wantRet {
		t.Errorf("durable_claim_key returns %q, want %q", got, wantRet)
	}
	if got, want := squash(m[3]), "coalesce(v_kind, "+strconv.Itoa(claimTakenNone)+")"; got != want {
		t.Errorf("durable_claim_key returns %q when it takes nothing, want %q", got, want)
	}
	// The frame's expressions are the function's: the time of the row it
	// would insert is v_now, the claim's time; the DO UPDATE's assignments
	// are ClaimKey's locked form's (qClaimKeyTake).
	for _, frag := range []string{"VALUES (p_scope, p_key, p_fingerprint, p_workflow_id, 'claimed', p_token, v_now + make_interval(secs => p_ttl), v_now)",
		"v_now timestamptz := coalesce(p_now, now());",
		"completed_at = NULL, expires_at = NULL, forget_at = NULL, outcome_code = NULL, outcome_header = NULL, outcome_body = NULL, outcome_ref = NULL, waited = k.waited AND k.state = 'claimed'"} {
		if !strings.Contains(squash(body), frag) {
			t.Errorf("durable_claim_key lacks %q", frag)
		}
	}
	if !strings.Contains(squash(qClaimKeyTake.tmpl), "completed_at = NULL, expires_at = NULL, forget_at = NULL, outcome_code = NULL, outcome_header = NULL, outcome_body = NULL, outcome_ref = NULL, waited = k.waited AND k.state = 'claimed'") {
		t.Error("qClaimKeyTake's assignments differ from durable_claim_key's DO UPDATE")
	}
}

// TestClaimKeyFollowsTheRule runs ClaimKey's statement on a stored row of
// every kind (no row; a claim held, at the edge of the tolerance, or
// abandoned; a completed record live, at the end of its retention (a
// tombstone), at the end of its tombstone, past it, or stored before
// tombstones existed; each for the same request, the same with no workflow
// named, two other requests, and the same and another request carrying the
// stored claim's token) and checks that the facts it reads are the row's,
// and that it takes the key (through durable_claim_key) exactly when
// claimrule.Decide says New, Reclaim or Held, and otherwise answers what
// Decide says without calling the function (the row is left unlocked).
// Then the locked form (qClaimKeyLock, in a transaction rolled back) reads
// the same facts on every row.
func TestClaimKeyFollowsTheRule(t *testing.T) {
	b, clock, _ := newTestBackend(t, Options{})
	ctx := t.Context()
	q := quoteIdent(b.schema)
	now := clock.now()
	tol := b.tol
	type kind struct {
		name         string
		completed    bool
		at           time.Time  // lease_until of a claim, expires_at of a completed record
		forget       *time.Time // forget_at of a completed record
		live, lapsed bool
		expired      bool
	}
	at := func(d time.Duration) *time.Time { t := now.Add(d); return &t }
	kinds := []kind{
		{"held", false, now.Add(10 * time.Second), nil, true, false, false},
		{"at the tolerance", false, now.Add(-tol), nil, true, false, false},
		{"abandoned", false, now.Add(-tol - time.Microsecond), nil, true, true, false},
		{"completed", true, now.Add(time.Microsecond), at(time.Hour), true, false, false},
		{"completed at its retention", true, now, at(time.Hour), true, false, true},
		{"tombstone", true, now.Add(-time.Hour), at(time.Microsecond), true, false, true},
		{"tombstone at its end", true, now.Add(-time.Hour), at(0), false, false, true},
		{"tombstone past its end", true, now.Add(-2 * time.Hour), at(-time.Hour), false, false, true},
		{"completed before tombstones, live", true, now.Add(time.Microsecond), nil, true, false, false},
		{"completed before tombstones, at its retention", true, now, nil, false, false, true},
	}
	requests := []struct {
		fp, wf     string
		match, own bool
	}{{"fp", "wf", true, false}, {"fp", "", true, false}, {"other", "wf", false, false}, {"fp", "other", false, false},
		{"fp", "wf", true, true}, {"other", "wf", false, true}}

	tokenOf := func(key string, own bool) string {
		if own {
			return "tok"
		}
		return "new-" + key
	}
	run := func(key, fp, wf string, own bool) (claimKeyRow, contract.ClaimRequest) {
		t.Helper()
		req := contract.ClaimRequest{KeyRef: contract.KeyRef{Scope: "s", Key: key}, Fingerprint: fp, WorkflowID: wf, TTL: 30 * time.Second}
		var r claimKeyRow
		if _, err := qClaimKey.one(ctx, b, b.claimKeyParams(req, tokenOf(key, own)), &r); err != nil {
			t.Fatal(err)
		}
		return r, req
	}
	// runLocked runs the locked form on the row and rolls back.
	runLocked := func(key, fp, wf string, own bool) claimKeyRow {
		t.Helper()
		req := contract.ClaimRequest{KeyRef: contract.KeyRef{Scope: "s", Key: key}, Fingerprint: fp, WorkflowID: wf, TTL: 30 * time.Second}
		tx, err := b.client.Begin(ctx, false)
		if err != nil {
			t.Fatal(err)
		}
		defer rollback(ctx, tx)
		var r claimKeyRow
		if _, err := tx.QueryRow(ctx, qClaimKeyLock.kind, qClaimKeyLock.sql(b.st), qClaimKeyLock.args(b.claimKeyParams(req, tokenOf(key, own))), qClaimKeyLock.dest(&r)...); err != nil {
			t.Fatal(err)
		}
		return r
	}
	check := func(name string, want claimrule.Facts, r claimKeyRow, req contract.ClaimRequest, token string) {
		t.Helper()
		if got := r.facts(); got != want {
			t.Errorf("%s: the statement reads facts %07b, want %07b", name, got, want)
		}
		o := claimrule.Decide(want)
		wantTaken := map[claimrule.Outcome]int64{claimrule.New: claimTakenNew, claimrule.Reclaim: claimTakenReclaim, claimrule.Held: claimTakenHeld}[o]
		if r.taken != wantTaken {
			t.Errorf("%s: taken = %d, want %d (the rule says %v)", name, r.taken, wantTaken, o)
		}
		c, err, decided := claimResult(req, &r, token)
		wantKind := map[claimrule.Outcome]contract.ClaimKind{claimrule.New: contract.ClaimNew, claimrule.Reclaim: contract.ClaimReclaimed,
			claimrule.Held: contract.ClaimNew, claimrule.Replay: contract.ClaimCompleted, claimrule.InFlight: contract.ClaimInFlight}
		wantErr := map[claimrule.Outcome]contract.Code{claimrule.Conflict: contract.KeyConflict, claimrule.Gone: contract.OutcomeExpired}[o]
		switch {
		case !decided:
			t.Errorf("%s: claimResult did not decide", name)
		case wantErr != 0 && contract.CodeOf(err) != wantErr,
			wantErr == 0 && (err != nil || c.Kind != wantKind[o]):
			t.Errorf("%s: claimResult = %v, %v; the rule says %v", name, c.Kind, err, o)
		case o == claimrule.Held && (c.Token != "tok" || c.Record.CreatedAt.IsZero() || c.Record.WorkflowID != "wf"):
			t.Errorf("%s: the claim handed back is %+v", name, c)
		}
	}

	// version is the row's xmin/xmax: an answer that calls
	// durable_claim_key changes it even when the function takes nothing
	// (ON CONFLICT locks the row).
	version := func(key string) (v string) {
		t.Helper()
		if err := b.Pool().QueryRow(ctx, `SELECT xmin::text || '/' || xmax::text FROM `+q+`.idempotency_keys WHERE scope = 's' AND key = $1`, key).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	r, req := run("none", "fp", "wf", false)
	check("no record", 0, r, req, "new-none")
	if r := runLocked("none-locked", "fp", "wf", false); r.taken != claimTakenNew {
		t.Errorf("the locked form on no record: taken = %d, want %d", r.taken, claimTakenNew)
	}
	insert := func(key string, k kind) {
		t.Helper()
		var err error
		if k.completed {
			_, err = b.Pool().Exec(ctx, `INSERT INTO `+q+`.idempotency_keys (scope, key, fingerprint, workflow_id, state, token,
				created_at, completed_at, expires_at, forget_at, outcome_code, outcome_ref) VALUES ('s', $1, 'fp', 'wf', 'completed', 'tok', $2, $2, $3, $4, 200, '')`,
				key, now.Add(-3*time.Hour), k.at, k.forget)
		} else {
			_, err = b.Pool().Exec(ctx, `INSERT INTO `+q+`.idempotency_keys (scope, key, fingerprint, workflow_id, state, token,
				lease_until, created_at) VALUES ('s', $1, 'fp', 'wf', 'claimed', 'tok', $2, $3)`,
				key, k.at, now.Add(-time.Hour))
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	for i, k := range kinds {
		for j, rq := range requests {
			key := fmt.Sprintf("k-%d-%d", i, j)
			insert(key, k)
			want := claimrule.Stored{Live: k.live, Lapsed: k.lapsed, Match: rq.match, Completed: k.completed,
				Expired: k.expired, Own: rq.own && !k.completed}.Facts()
			if claimrule.SameRequest("fp", "wf", rq.fp, rq.wf) != rq.match {
				t.Fatalf("request %+v: claimrule.SameRequest disagrees with the case", rq)
			}
			name := fmt.Sprintf("%s, request %s/%s own %v", k.name, rq.fp, rq.wf, rq.own)
			lr := runLocked(key, rq.fp, rq.wf, rq.own)
			if lr.taken != claimTakenNone || lr.facts() != want {
				t.Errorf("%s: the locked form reads taken %d, facts %07b; want %d, %07b", name, lr.taken, lr.facts(), claimTakenNone, want)
			}
			before := version(key)
			r, req := run(key, rq.fp, rq.wf, rq.own)
			if after := version(key); !claimrule.Decide(want).Takes() && after != before {
				t.Errorf("%s: the answer changed the row's xmin/xmax from %s to %s: it called durable_claim_key, which locked the row",
					name, before, after)
			}
			check(name, want, r, req, tokenOf(key, rq.own))
		}
	}
}
