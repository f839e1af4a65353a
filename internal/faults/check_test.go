package faults

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/faultmodel"
	"github.com/durable-go/durable/internal/pgtest"
)

func slogJSON(w io.Writer) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func asSQLState(err error, target *interface{ SQLState() string }) bool {
	return errors.As(err, target)
}

func opStrings(ops []*faultmodel.Op) []string {
	out := make([]string, len(ops))
	for i, o := range ops {
		out[i] = o.String()
	}
	return out
}

// violatePart records a violation with the whole history of a partition.
func (e *env) violatePart(h *hist, kind, part, msg string, ops []*faultmodel.Op) {
	e.mu.Lock()
	e.viols = append(e.viols, violation{driver: e.driver, scenario: e.sc.name, history: h.n, kind: kind,
		msg: msg, part: part, ops: opStrings(ops)})
	e.mu.Unlock()
}

// --- linearizability ---

func checkLinearizable(e *env, h *hist) {
	parts := faultmodel.ByPart(h.rec.Snapshot())
	names := make([]string, 0, len(parts))
	for p := range parts {
		names = append(names, p)
	}
	sort.Strings(names)
	for _, part := range names {
		k, ok := h.partKind(part)
		if !ok {
			continue // Do: checked by checkDo
		}
		ops := parts[part]
		res, info := faultmodel.LinCheck(k, ops, 30*time.Second)
		e.stats.add("lin.partitions", 1)
		switch res {
		case porcupine.Ok:
			e.stats.add("lin.ok", 1)
		case porcupine.Unknown:
			e.stats.add("lin.timeout", 1)
		case porcupine.Illegal:
			e.stats.add("lin.illegal", 1)
			path := filepath.Join(artifacts(e.t), fmt.Sprintf("lin-%s-%s-h%d-%s.html", e.driver, e.sc.name, h.n, part))
			if err := porcupine.VisualizePath(faultmodel.Model(k), info, path); err != nil {
				path = "(visualization failed: " + err.Error() + ")"
			}
			e.violatePart(h, "linearizability", part, fmt.Sprintf(
				"the history of %s (%d ops) is not linearizable against the model; visualization: %s", part, len(ops), path), ops)
		}
	}
}

// --- the database after the run ---

type leaseRow struct {
	owner    string
	token    int64
	released bool
	expires  time.Time
}

type wfRow struct {
	rev int64
	ref string
}

type keyRow struct {
	state, token, fp string
	ref              *string
}

func checkDatabase(e *env, cl *pgtest.Private, schema string, hists []*hist) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := cl.Connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	like := e.sc.name + "-h%"
	leases := map[string]leaseRow{}
	rows, err := conn.Query(ctx, `SELECT resource, owner, token, released, expires_at FROM "`+schema+`".leases WHERE scope = $1 AND resource LIKE $2`, string(scope), like)
	if err != nil {
		return err
	}
	for rows.Next() {
		var r string
		var l leaseRow
		if err := rows.Scan(&r, &l.owner, &l.token, &l.released, &l.expires); err != nil {
			return err
		}
		leases[r] = l
	}
	if err := rows.Err(); err != nil {
		return err
	}
	wfs := map[string]wfRow{}
	rows, err = conn.Query(ctx, `SELECT id, revision, request_id FROM "`+schema+`".workflows WHERE scope = $1 AND id LIKE $2`, string(scope), like)
	if err != nil {
		return err
	}
	for rows.Next() {
		var id string
		var w wfRow
		if err := rows.Scan(&id, &w.rev, &w.ref); err != nil {
			return err
		}
		wfs[id] = w
	}
	if err := rows.Err(); err != nil {
		return err
	}
	keys := map[string]keyRow{}
	rows, err = conn.Query(ctx, `SELECT key, state, token, fingerprint, outcome_ref FROM "`+schema+`".idempotency_keys WHERE scope = $1 AND key LIKE $2`, string(scope), like)
	if err != nil {
		return err
	}
	for rows.Next() {
		var k string
		var r keyRow
		if err := rows.Scan(&k, &r.state, &r.token, &r.fp, &r.ref); err != nil {
			return err
		}
		keys[k] = r
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for _, h := range hists {
		parts := faultmodel.ByPart(h.rec.Snapshot())
		for _, r := range h.leases {
			row, ok := leases[r]
			checkLeaseRow(e, h, r, parts[r], row, ok)
			w, ok := wfs[r]
			checkWorkflowRow(e, h, r, parts[r], w, ok, true)
		}
		for _, sem := range h.sems {
			checkPermitRows(e, h, sem, parts[sem], leases)
			w, ok := wfs[sem]
			checkWorkflowRow(e, h, sem, parts[sem], w, ok, true)
		}
		for _, w := range h.wfs {
			row, ok := wfs[w]
			checkWorkflowRow(e, h, w, parts[w], row, ok, false)
		}
		for _, k := range h.keys {
			row, ok := keys[k]
			checkKeyRow(e, h, k, parts[k], row, ok)
		}
		for _, k := range h.dos {
			row, ok := keys[k]
			checkDoRow(e, h, k, row, ok)
		}
	}
	return nil
}

// checkPermitRows checks the lease row of each permit of semaphore sem
// as checkLeaseRow checks a lease's, and that no row exists for a permit
// beyond its number of permits (an N+1th holder).
func checkPermitRows(e *env, h *hist, sem string, ops []*faultmodel.Op, rows map[string]leaseRow) {
	n := h.permits[sem]
	for r, row := range rows {
		if base, m, ok := contract.SplitPermit(r); ok && base == sem && m > n {
			e.violatePart(h, "permit-out-of-range", sem, fmt.Sprintf("semaphore %s of %d permits has a lease row for permit %d (owner %s, token %d)",
				sem, n, m, row.owner, row.token), ops)
		}
	}
	for m := 1; m <= n; m++ {
		r := contract.PermitResource(sem, m)
		row, ok := rows[r]
		checkLeaseRow(e, h, r, permitOps(ops, m), row, ok)
	}
}

// permitOps returns the ops of a semaphore partition that may concern the
// lease of permit m: every AcquirePermit that was not acknowledged with
// another permit, and the calls on permit m.
func permitOps(ops []*faultmodel.Op, m int) []*faultmodel.Op {
	var out []*faultmodel.Op
	for _, o := range ops {
		switch {
		case o.In.Kind == faultmodel.AcquirePermit:
			if o.Out.O != faultmodel.OK || o.Out.Permit == m {
				out = append(out, o)
			}
		case o.In.Permit == m:
			out = append(out, o)
		}
	}
	return out
}

// isAcquire reports whether o asked for a grant: AcquireLease, or
// AcquirePermit on a semaphore.
func isAcquire(o *faultmodel.Op) bool {
	return o.In.Kind == faultmodel.Acquire || o.In.Kind == faultmodel.AcquirePermit
}

func maybeApplied(o *faultmodel.Op) bool {
	return o.Out.O == faultmodel.Unknown || o.Out.O == faultmodel.Bad
}
func notApplied(o *faultmodel.Op) bool {
	return o.Out.O == faultmodel.NotApplied || o.Out.O == faultmodel.Fail
}

// checkLeaseRow compares the stored lease of r with what the calls were
// told; ops are the calls that may concern it (for a permit: permitOps).
func checkLeaseRow(e *env, h *hist, r string, ops []*faultmodel.Op, row leaseRow, present bool) {
	var acked []*faultmodel.Op
	for _, o := range ops {
		if isAcquire(o) && o.Out.O == faultmodel.OK {
			acked = append(acked, o)
		}
	}
	if !present {
		if len(acked) > 0 {
			e.violatePart(h, "acked-absent", r, fmt.Sprintf("lease %s: %d acknowledged grants but no lease row (rows are only deleted by Cleanup, which never ran)", r, len(acked)), ops)
		}
		return
	}
	var writer *faultmodel.Op
	for _, o := range ops {
		if isAcquire(o) && o.In.Owner == row.owner {
			writer = o
		}
	}
	switch {
	case writer == nil:
		e.violatePart(h, "unexplained-write", r, fmt.Sprintf("lease %s: the row's owner %s made no AcquireLease call (nor an AcquirePermit that could have been granted this permit)", r, row.owner), ops)
	case notApplied(writer):
		e.violatePart(h, "not-applied-present", r, fmt.Sprintf("lease %s: %s #%d reported %s (%v) but the lease was granted: row owner=%s token=%d released=%v",
			r, writer.In.Kind, writer.ID, writer.Out.Code, writer.Err, row.owner, row.token, row.released), ops)
	case writer.Out.O == faultmodel.OK && writer.Out.Token != row.token:
		e.violatePart(h, "acked-mismatch", r, fmt.Sprintf("lease %s: %s #%d returned token %d, the row has %d", r, writer.In.Kind, writer.ID, writer.Out.Token, row.token), ops)
	}
	for _, a := range acked {
		if a.Out.Token > row.token {
			e.violatePart(h, "acked-absent", r, fmt.Sprintf("lease %s: acknowledged grant #%d (token %d) is neither present nor superseded: the row has token %d", r, a.ID, a.Out.Token, row.token), ops)
		}
	}
	var releases []*faultmodel.Op
	for _, o := range ops {
		if o.In.Kind == faultmodel.Release && o.In.Owner == row.owner && o.In.Token == row.token {
			releases = append(releases, o)
		}
	}
	explained := false
	for _, o := range releases {
		if o.Out.O == faultmodel.OK && o.Out.Bool || maybeApplied(o) {
			explained = true
		}
		if !row.released && o.Out.O == faultmodel.OK && o.Out.Bool {
			e.violatePart(h, "acked-absent", r, fmt.Sprintf("lease %s: ReleaseLease #%d was acknowledged but the lease row is not released", r, o.ID), ops)
		}
	}
	if !row.released {
		// Acknowledged renewals (and the grant) are present or superseded:
		// the stored expiry is at least the latest one acknowledged.
		for _, o := range ops {
			if (o.In.Kind == faultmodel.Renew || isAcquire(o)) && o.Out.O == faultmodel.OK && o.Out.Owner == row.owner &&
				o.Out.Token == row.token && o.Out.Exp > row.expires.UnixMicro() {
				e.violatePart(h, "acked-absent", r, fmt.Sprintf("lease %s: %s #%d acknowledged expiry %s but the row expires at %s",
					r, o.In.Kind, o.ID, time.UnixMicro(o.Out.Exp).UTC().Format(time.RFC3339Nano), row.expires.UTC().Format(time.RFC3339Nano)), ops)
			}
		}
	}
	if row.released && !explained {
		e.violatePart(h, "not-applied-present", r, fmt.Sprintf("lease %s (owner %s, token %d) is released, but every ReleaseLease of that grant reported not applied", r, row.owner, row.token), ops)
	}
}

func checkWorkflowRow(e *env, h *hist, w string, ops []*faultmodel.Op, row wfRow, present, setup bool) {
	var acked, unknown int64
	var maxRev int64
	ackedCreate := false
	for _, o := range ops {
		switch o.In.Kind {
		case faultmodel.Update, faultmodel.FencedUpdate:
			if o.Out.O == faultmodel.OK {
				acked++
				maxRev = max(maxRev, o.Out.Rev)
			} else if maybeApplied(o) {
				unknown++
			}
		case faultmodel.Create:
			if o.Out.O == faultmodel.OK {
				ackedCreate = true
			}
		}
	}
	if !present {
		if setup || ackedCreate || acked > 0 {
			e.violatePart(h, "acked-absent", w, fmt.Sprintf("workflow %s: acknowledged but absent", w), ops)
		}
		return
	}
	if !(setup && row.ref == faultmodel.InitRef) {
		var writer *faultmodel.Op
		for _, o := range ops {
			if (o.In.Kind == faultmodel.Update || o.In.Kind == faultmodel.FencedUpdate || o.In.Kind == faultmodel.Create) && o.In.Ref == row.ref {
				writer = o
			}
		}
		switch {
		case writer == nil:
			e.violatePart(h, "unexplained-write", w, fmt.Sprintf("workflow %s: stored request id %q matches no call", w, row.ref), ops)
		case notApplied(writer):
			e.violatePart(h, "not-applied-present", w, fmt.Sprintf("workflow %s: %s #%d reported %s (%v) but its write is the stored revision %d",
				w, writer.In.Kind, writer.ID, writer.Out.Code, writer.Err, row.rev), ops)
		}
	}
	if maxRev > row.rev {
		e.violatePart(h, "acked-absent", w, fmt.Sprintf("workflow %s: an acknowledged update returned revision %d but the stored revision is %d", w, maxRev, row.rev), ops)
	}
	applied := row.rev - 1
	switch {
	case applied > acked+unknown:
		var na []string
		for _, o := range ops {
			if (o.In.Kind == faultmodel.Update || o.In.Kind == faultmodel.FencedUpdate) && notApplied(o) && o.Out.O == faultmodel.NotApplied {
				na = append(na, fmt.Sprintf("#%d", o.ID))
			}
		}
		e.violatePart(h, "not-applied-present", w, fmt.Sprintf("workflow %s: revision %d means %d applied updates, but only %d were acknowledged and %d had an unknown outcome: %d update(s) reported as not applied did apply (candidates reported Unavailable/Canceled: %s)",
			w, row.rev, applied, acked, unknown, applied-acked-unknown, strings.Join(na, " ")), ops)
	case applied < acked:
		e.violatePart(h, "acked-absent", w, fmt.Sprintf("workflow %s: %d updates were acknowledged but the revision %d counts only %d", w, acked, row.rev, applied), ops)
	}
}

func checkKeyRow(e *env, h *hist, k string, ops []*faultmodel.Op, row keyRow, present bool) {
	ackedTokens := map[string]*faultmodel.Op{}
	var unknownClaims, naClaims []*faultmodel.Op
	for _, o := range ops {
		if o.In.Kind != faultmodel.Claim {
			continue
		}
		switch {
		case o.Out.O == faultmodel.OK && o.Out.Claim.Owned():
			ackedTokens[o.Out.KToken] = o
		case maybeApplied(o):
			unknownClaims = append(unknownClaims, o)
		case o.Out.O == faultmodel.NotApplied:
			naClaims = append(naClaims, o)
		}
	}
	tokenOps := func(kd faultmodel.Kind, tok string) []*faultmodel.Op {
		var out []*faultmodel.Op
		for _, o := range ops {
			if o.In.Kind == kd && o.In.KeyToken == tok {
				out = append(out, o)
			}
		}
		return out
	}
	ids := func(os []*faultmodel.Op) string {
		var s []string
		for _, o := range os {
			s = append(s, fmt.Sprintf("#%d(%s)", o.ID, o.Out.Code))
		}
		return strings.Join(s, " ")
	}
	if !present {
		for tok, c := range ackedTokens {
			released := false
			for _, o := range tokenOps(faultmodel.ReleaseKey, tok) {
				if o.Out.O == faultmodel.OK && o.Out.Bool || maybeApplied(o) {
					released = true
				}
			}
			if !released {
				e.violatePart(h, "acked-absent", k, fmt.Sprintf("key %s: claim #%d was acknowledged (token %s) and never released, but the key has no record", k, c.ID, faultmodel.Short(tok)), ops)
			}
		}
		return
	}
	if _, ok := ackedTokens[row.token]; !ok && len(unknownClaims) == 0 {
		e.violatePart(h, "not-applied-present", k, fmt.Sprintf("key %s: the record (%s) holds claim token %s that no caller was told about, and no claim had an unknown outcome; claims reported not applied: %s",
			k, row.state, faultmodel.Short(row.token), ids(naClaims)), ops)
	}
	switch row.state {
	case "claimed":
		if _, ok := ackedTokens[row.token]; ok {
			for _, o := range tokenOps(faultmodel.ReleaseKey, row.token) {
				if o.Out.O == faultmodel.OK && o.Out.Bool {
					e.violatePart(h, "acked-absent", k, fmt.Sprintf("key %s: ReleaseKey #%d was acknowledged but the claim is still stored", k, o.ID), ops)
				}
			}
			for _, o := range tokenOps(faultmodel.Complete, row.token) {
				if o.Out.O == faultmodel.OK {
					e.violatePart(h, "acked-absent", k, fmt.Sprintf("key %s: CompleteKey #%d was acknowledged but the key is still claimed", k, o.ID), ops)
				}
			}
		}
	case "completed":
		ref := ""
		if row.ref != nil {
			ref = *row.ref
		}
		var writer *faultmodel.Op
		for _, o := range ops {
			if o.In.Kind == faultmodel.Complete && o.In.Ref == ref {
				writer = o
			}
		}
		switch {
		case writer == nil:
			e.violatePart(h, "unexplained-write", k, fmt.Sprintf("key %s: stored outcome ref %q matches no CompleteKey", k, ref), ops)
		case notApplied(writer):
			e.violatePart(h, "not-applied-present", k, fmt.Sprintf("key %s: CompleteKey #%d reported %s (%v) but its outcome is stored", k, writer.ID, writer.Out.Code, writer.Err), ops)
		}
		for _, o := range ops {
			if o.In.Kind == faultmodel.Complete && o.Out.O == faultmodel.OK && o.Out.Ref != ref {
				e.violatePart(h, "acked-absent", k, fmt.Sprintf("key %s: CompleteKey #%d acknowledged outcome %q but %q is stored", k, o.ID, o.Out.Ref, ref), ops)
			}
		}
	}
}

// --- Store.Do ---

// checkDo checks what every Do call returned against the handler runs.
func checkDo(e *env, h *hist) {
	dr := h.runs
	dr.mu.Lock()
	defer dr.mu.Unlock()
	for _, k := range h.dos {
		refs := map[string][]int{}
		var ops []string
		for _, c := range dr.calls {
			if c.key != k {
				continue
			}
			ops = append(ops, fmt.Sprintf("%s runs=%v", c.op, c.runs))
			if c.ref == "" {
				continue
			}
			refs[c.ref] = append(refs[c.ref], c.id)
			run := dr.runs[c.ref]
			switch {
			case run == nil || run.key != k || !run.ok:
				e.violateDo(h, "do-outcome", fmt.Sprintf("Do call %d on %s returned outcome %q that no successful run of this key produced", c.id, k, c.ref), []string{c.op.String()})
			case !c.replayed && !contains(c.runs, c.ref):
				e.violateDo(h, "do-outcome", fmt.Sprintf("Do call %d on %s returned Replayed=false with outcome %q of another call's run", c.id, k, c.ref), []string{c.op.String()})
			}
		}
		e.stats.add("do.keys", 1)
		// Once a call has returned the key's stored outcome, the key is
		// completed for good (retention 24 h): no run may start after.
		var first *doCall
		for _, c := range dr.calls {
			if c.key == k && c.ref != "" && (first == nil || c.op.End < first.op.End) {
				first = c
			}
		}
		if first != nil {
			for _, run := range dr.byKey[k] {
				if run.start > first.op.End {
					e.violateDo(h, "do-at-most-once", fmt.Sprintf("Do ran the handler for %s again (run %s, client %d, at %v) after call %d had returned its stored outcome %q at %v",
						k, run.id, run.client, run.start, first.id, first.ref, first.op.End), ops)
				}
			}
		}
		if len(refs) > 1 {
			e.violateDo(h, "do-idempotency", fmt.Sprintf("Do returned %d different outcomes for key %s: %v", len(refs), k, refs), ops)
		}
	}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// checkDoRow compares a Do key's stored record with what the calls said.
func checkDoRow(e *env, h *hist, k string, row keyRow, present bool) {
	dr := h.runs
	dr.mu.Lock()
	defer dr.mu.Unlock()
	var acked []*doCall
	calls := map[int]*doCall{}
	var ops []string
	for _, c := range dr.calls {
		if c.key != k {
			continue
		}
		calls[c.id] = c
		ops = append(ops, fmt.Sprintf("%s runs=%v", c.op, c.runs))
		if c.ref != "" {
			acked = append(acked, c)
		}
	}
	if !present || row.state != "completed" {
		for _, c := range acked {
			e.violateDo(h, "acked-absent", fmt.Sprintf("Do call %d on %s returned outcome %q but the key is not completed (record present=%v state=%q)", c.id, k, c.ref, present, row.state), ops)
		}
		return
	}
	ref := ""
	if row.ref != nil {
		ref = *row.ref
	}
	run := dr.runs[ref]
	if run == nil || !run.ok {
		e.violateDo(h, "unexplained-write", fmt.Sprintf("Do key %s: stored outcome %q was produced by no successful run", k, ref), ops)
		return
	}
	if c := calls[run.call]; c != nil && c.op != nil && notApplied(c.op) {
		e.violateDo(h, "not-applied-present", fmt.Sprintf("Do key %s: call %d reported %s (%v) but its run's outcome %q is stored", k, c.id, c.op.Out.Code, c.op.Err, ref), ops)
	}
	for _, c := range acked {
		if c.ref != ref {
			e.violateDo(h, "acked-absent", fmt.Sprintf("Do call %d on %s returned outcome %q but %q is stored", c.id, k, c.ref, ref), ops)
		}
	}
}

// --- holders ---

// holding is an interval in which a grant surely held: from when a caller
// learnt of it — its AcquireLease or AcquirePermit returned it, or a
// GetLease showed it — until its owner began to release it or was told
// that it no longer held it (a renewal, or a fenced write with its fence,
// refused as Fenced). Nothing expires within a history, and only the
// owner's release ends a grant before it expires, so the grant held
// throughout, if the backend's answers were honest.
type holding struct {
	permit   int // 0: a plain lease
	owner    string
	token    int64
	from, to time.Duration // [from, to) since the run's base time
	since    *faultmodel.Op
}

// holdings returns the holdings of one lease or semaphore partition.
func holdings(ops []*faultmodel.Op) []*holding {
	type key struct {
		permit int
		owner  string
		token  int64
	}
	m := map[key]*holding{}
	var out []*holding
	for _, o := range ops {
		if o.Out.O != faultmodel.OK {
			continue
		}
		var k key
		switch o.In.Kind {
		case faultmodel.Acquire:
			k = key{0, o.In.Owner, o.Out.Token}
		case faultmodel.AcquirePermit:
			k = key{o.Out.Permit, o.In.Owner, o.Out.Token}
		case faultmodel.GetLease:
			k = key{o.In.Permit, o.Out.Owner, o.Out.Token}
		default:
			continue
		}
		switch hd := m[k]; {
		case hd == nil:
			hd = &holding{permit: k.permit, owner: k.owner, token: k.token, from: o.End, to: math.MaxInt64, since: o}
			m[k] = hd
			out = append(out, hd)
		case o.End < hd.from:
			hd.from, hd.since = o.End, o
		}
	}
	for _, o := range ops {
		switch {
		case o.In.Kind == faultmodel.Release:
		case (o.In.Kind == faultmodel.Renew || o.In.Kind == faultmodel.FencedUpdate) && o.Out.O == faultmodel.Fail && o.Out.Code == contract.Fenced:
		default:
			continue
		}
		if hd := m[key{o.In.Permit, o.In.Owner, o.In.Token}]; hd != nil && o.Start < hd.to {
			hd.to = o.Start
		}
	}
	return out
}

// checkHolders: at no instant were the callers told that more than N
// grants of a semaphore of N permits held at once (1 for a lease), nor
// two grants of one permit — counted over holdings, which only ever
// understate how long a grant held. The linearizability check implies
// this; this check states it directly, and its maximum (max-holders in the
// summary) shows that the semaphores were full under the faults.
func checkHolders(e *env, h *hist) {
	parts := faultmodel.ByPart(h.rec.Snapshot())
	for _, r := range h.leases {
		checkHolderCount(e, h, r, 1, parts[r])
	}
	for _, s := range h.sems {
		most := checkHolderCount(e, h, s, h.permits[s], parts[s])
		e.stats.setMax("permits.max-holders", int64(most))
	}
}

// checkHolderCount checks one partition of n permits and returns the most
// holdings that overlapped.
func checkHolderCount(e *env, h *hist, part string, n int, ops []*faultmodel.Op) int {
	type event struct {
		at    time.Duration
		start bool
		hd    *holding
	}
	var evs []event
	for _, hd := range holdings(ops) {
		if hd.from < hd.to {
			evs = append(evs, event{hd.from, true, hd}, event{hd.to, false, hd})
		}
	}
	sort.Slice(evs, func(i, j int) bool {
		if evs[i].at != evs[j].at {
			return evs[i].at < evs[j].at
		}
		return !evs[i].start && evs[j].start // [from, to): ends first
	})
	active := map[*holding]bool{}
	most := 0
	reported := false
	for _, ev := range evs {
		if !ev.start {
			delete(active, ev.hd)
			continue
		}
		active[ev.hd] = true
		most = max(most, len(active))
		if reported {
			continue
		}
		samePermit := false
		for other := range active {
			if other != ev.hd && other.permit == ev.hd.permit {
				samePermit = true
			}
		}
		if len(active) <= n && !samePermit {
			continue
		}
		reported = true
		var hs []*holding
		for other := range active {
			hs = append(hs, other)
		}
		sort.Slice(hs, func(i, j int) bool { return hs[i].from < hs[j].from })
		var lines []string
		for _, hd := range hs {
			lines = append(lines, fmt.Sprintf("permit %d: %s token %d held from %.3fms (shown by #%d) to %s", hd.permit, hd.owner, hd.token,
				float64(hd.from)/1e6, hd.since.ID, describeEnd(hd.to)))
		}
		what := fmt.Sprintf("%d grants held at once", len(active))
		if samePermit {
			what = fmt.Sprintf("two grants of permit %d held at once", ev.hd.permit)
		}
		e.violatePart(h, "holders", part, fmt.Sprintf("%s of %d permits: at %.3fms %s, as the callers were told:\n      %s",
			part, n, float64(ev.at)/1e6, what, strings.Join(lines, "\n      ")), ops)
	}
	return most
}

func describeEnd(to time.Duration) string {
	if to == math.MaxInt64 {
		return "the end"
	}
	return fmt.Sprintf("%.3fms", float64(to)/1e6)
}

// --- fencing tokens ---

// checkTokens: over the acknowledged grants (and leases read back), a grant
// that began after another ended has a larger token — per token resource
// (the contract: a semaphore's permits share one sequence, so a permit's
// grant is compared with every grant and read of every permit of the
// semaphore; a read only with grants and reads of the same permit), and
// across resources (the backend's documented global sequence).
func checkTokens(driver string, grants []grantRec) []violation {
	var out []violation
	v := func(g grantRec, msg string, other grantRec) {
		out = append(out, violation{driver: driver, scenario: g.op.Scenario, history: g.op.History, kind: "token-order",
			msg: msg, part: g.resource, ops: []string{other.op.String(), g.op.String()}})
	}
	byRes := map[string][]grantRec{}
	for _, g := range grants {
		tr := contract.TokenResource(g.resource)
		byRes[tr] = append(byRes[tr], g)
	}
	for _, gs := range byRes {
		for _, a := range gs {
			for _, b := range gs {
				if !a.end.Before(b.start) {
					continue
				}
				switch {
				case isAcquire(b.op) && b.token <= a.token:
					v(b, fmt.Sprintf("resource %s: grant with token %d began after a grant (or read) of %s with token %d had ended", b.resource, b.token, a.resource, a.token), a)
				case b.op.In.Kind == faultmodel.GetLease && b.resource == a.resource && b.token < a.token:
					v(b, fmt.Sprintf("resource %s: GetLease read token %d after token %d had been granted", b.resource, b.token, a.token), a)
				}
			}
		}
	}
	// Global: acquisitions only.
	var acq []grantRec
	for _, g := range grants {
		if isAcquire(g.op) {
			acq = append(acq, g)
		}
	}
	byEnd := append([]grantRec(nil), acq...)
	sort.Slice(byEnd, func(i, j int) bool { return byEnd[i].end.Before(byEnd[j].end) })
	byStart := append([]grantRec(nil), acq...)
	sort.Slice(byStart, func(i, j int) bool { return byStart[i].start.Before(byStart[j].start) })
	var maxG grantRec
	i := 0
	for _, b := range byStart {
		for i < len(byEnd) && byEnd[i].end.Before(b.start) {
			if byEnd[i].token > maxG.token {
				maxG = byEnd[i]
			}
			i++
		}
		if maxG.op != nil && b.token <= maxG.token && contract.TokenResource(b.resource) != contract.TokenResource(maxG.resource) {
			v(b, fmt.Sprintf("global token sequence: grant on %s got token %d after a grant on %s had returned token %d", b.resource, b.token, maxG.resource, maxG.token), maxG)
		}
	}
	return out
}

// --- logs ---

func checkLogs(e *env, logs string) {
	lines := strings.Split(strings.TrimSpace(logs), "\n")
	if logs == "" {
		lines = nil
	}
	e.stats.add("log.lines", int64(len(lines)))
	for _, l := range lines {
		for _, s := range []string{e.password, "postgres://"} {
			if strings.Contains(l, s) {
				what := s
				if s == e.password {
					what = "the password"
				}
				e.violate(nil, "log-leak", fmt.Sprintf("a log line contains %s: %s", what, strings.ReplaceAll(l, e.password, "<PASSWORD>")), nil)
			}
		}
	}
	if dir := os.Getenv("DURABLE_FAULT_ARTIFACTS"); dir != "" && logs != "" {
		_ = os.WriteFile(filepath.Join(dir, fmt.Sprintf("log-%s-%s.jsonl", e.driver, e.sc.name)), []byte(logs), 0o644)
	}
}
