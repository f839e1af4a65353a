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

// TestClaimKeyFunctionIsTheRule: the body of durable_claim_key, which
// migration 000004 fixed (a change needs a new migration), decides with
// the predicate that ClaimKey's statement uses: its DO UPDATE's WHERE is
// claimTakeover over the function's frame (the stored row k and the row
// it would insert, excluded) with the seen token, up to white space; and
// it returns the taken codes that claimResult reads.
func TestClaimKeyFunctionIsTheRule(t *testing.T) {
	text, err := os.ReadFile("migrations/000004_claim_key_function.up.sql")
	if err != nil {
		t.Fatal(err)
	}
	body := string(text)
	m := regexp.MustCompile(`(?s)ON CONFLICT \(scope, key\) DO UPDATE SET.*?\n\s*WHERE (.*?)\n\s*RETURNING (.*?);\s*RETURN (.*?);`).FindStringSubmatch(body)
	if m == nil {
		t.Fatal("migration 000004 has no DO UPDATE … WHERE … RETURNING … RETURN …: the test cannot find the function's predicate")
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
	// would insert is v_now, the claim's time.
	for _, frag := range []string{"VALUES (p_scope, p_key, p_fingerprint, p_workflow_id, 'claimed', p_token, v_now + make_interval(secs => p_ttl), v_now)",
		"v_now timestamptz := coalesce(p_now, now());"} {
		if !strings.Contains(squash(body), frag) {
			t.Errorf("durable_claim_key lacks %q", frag)
		}
	}
}

// TestClaimKeyFollowsTheRule runs ClaimKey's statement on a stored row of
// every kind (no row; a claim held, at the edge of the tolerance, or
// abandoned; a completed record live, at the end of its retention, or
// past it; each for the same request, the same with no workflow named,
// and two other requests) and checks that the facts it reads are the
// row's, and that it takes the key (through durable_claim_key) exactly
// when claimrule.Decide says New or Reclaim, and otherwise answers what
// Decide says without calling the function (the row is left unlocked).
func TestClaimKeyFollowsTheRule(t *testing.T) {
	b, clock, _ := newTestBackend(t, Options{})
	ctx := t.Context()
	q := quoteIdent(b.schema)
	now := clock.now()
	tol := b.tol
	type kind struct {
		name      string
		completed bool
		at        time.Time // lease_until of a claim, expires_at of a completed record
		live      bool
		lapsed    bool
	}
	kinds := []kind{
		{"held", false, now.Add(10 * time.Second), true, false},
		{"at the tolerance", false, now.Add(-tol), true, false},
		{"abandoned", false, now.Add(-tol - time.Microsecond), true, true},
		{"completed", true, now.Add(time.Microsecond), true, false},
		{"completed at its retention", true, now, false, false},
		{"completed past its retention", true, now.Add(-time.Hour), false, false},
	}
	requests := []struct {
		fp, wf string
		match  bool
	}{{"fp", "wf", true}, {"fp", "", true}, {"other", "wf", false}, {"fp", "other", false}}

	run := func(key, fp, wf string) (claimKeyRow, contract.ClaimRequest) {
		t.Helper()
		req := contract.ClaimRequest{KeyRef: contract.KeyRef{Scope: "s", Key: key}, Fingerprint: fp, WorkflowID: wf, TTL: 30 * time.Second}
		var r claimKeyRow
		if _, err := qClaimKey.one(ctx, b, b.claimKeyParams(req, "new-"+key), &r); err != nil {
			t.Fatal(err)
		}
		return r, req
	}
	check := func(name string, want claimrule.Facts, r claimKeyRow, req contract.ClaimRequest) {
		t.Helper()
		if got := r.facts(); got != want {
			t.Errorf("%s: the statement reads facts %05b, want %05b", name, got, want)
		}
		o := claimrule.Decide(want)
		wantTaken := map[claimrule.Outcome]int64{claimrule.New: claimTakenNew, claimrule.Reclaim: claimTakenReclaim}[o]
		if r.taken != wantTaken {
			t.Errorf("%s: taken = %d, want %d (the rule says %v)", name, r.taken, wantTaken, o)
		}
		c, err, decided := claimResult(req, &r, "new-"+req.Key)
		wantKind := map[claimrule.Outcome]contract.ClaimKind{claimrule.New: contract.ClaimNew, claimrule.Reclaim: contract.ClaimReclaimed,
			claimrule.Replay: contract.ClaimCompleted, claimrule.InFlight: contract.ClaimInFlight}
		switch {
		case !decided:
			t.Errorf("%s: claimResult did not decide", name)
		case o == claimrule.Conflict && contract.CodeOf(err) != contract.KeyConflict,
			o != claimrule.Conflict && (err != nil || c.Kind != wantKind[o]):
			t.Errorf("%s: claimResult = %v, %v; the rule says %v", name, c.Kind, err, o)
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
	r, req := run("none", "fp", "wf")
	check("no record", 0, r, req)
	for i, k := range kinds {
		for j, rq := range requests {
			key := fmt.Sprintf("k-%d-%d", i, j)
			var err error
			if k.completed {
				_, err = b.Pool().Exec(ctx, `INSERT INTO `+q+`.idempotency_keys (scope, key, fingerprint, workflow_id, state, token,
					created_at, completed_at, expires_at, outcome_code) VALUES ('s', $1, 'fp', 'wf', 'completed', 'tok', $2, $2, $3, 200)`,
					key, now.Add(-2*time.Hour), k.at)
			} else {
				_, err = b.Pool().Exec(ctx, `INSERT INTO `+q+`.idempotency_keys (scope, key, fingerprint, workflow_id, state, token,
					lease_until, created_at) VALUES ('s', $1, 'fp', 'wf', 'claimed', 'tok', $2, $3)`,
					key, k.at, now.Add(-time.Hour))
			}
			if err != nil {
				t.Fatal(err)
			}
			want := claimrule.Stored{Live: k.live, Lapsed: k.lapsed, Match: rq.match, Completed: k.completed}.Facts()
			if claimrule.SameRequest("fp", "wf", rq.fp, rq.wf) != rq.match {
				t.Fatalf("request %+v: claimrule.SameRequest disagrees with the case", rq)
			}
			before := version(key)
			r, req := run(key, rq.fp, rq.wf)
			if after := version(key); !claimrule.Decide(want).Takes() && after != before {
				t.Errorf("%s, request %s/%s: the answer changed the row's xmin/xmax from %s to %s: it called durable_claim_key, which locked the row",
					k.name, rq.fp, rq.wf, before, after)
			}
			check(fmt.Sprintf("%s, request %s/%s", k.name, rq.fp, rq.wf), want, r, req)
		}
	}
}
