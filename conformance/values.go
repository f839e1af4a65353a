package conformance

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/contract"
)

// The Values scenarios check that what a caller writes is what every later
// read returns, byte for byte, at the sizes the Store allows; and that
// neither the caller's slices nor the slices a read returned are shared
// with storage.
func valueScenarios() []scenario {
	return []scenario{
		{"LargeSnapshotsReadBackAsWritten", 0, testLargeSnapshotsReadBackAsWritten},
		{"LargeOutcomesReadBackAsWritten", 0, testLargeOutcomesReadBackAsWritten},
		{"LongestFingerprintAndRefReadBackAsWritten", 0, testLongestFingerprintAndRefReadBackAsWritten},
		{"FingerprintsDifferingInTheLastByteConflict", 0, testFingerprintsDifferingInTheLastByteConflict},
		{"HeadersReadBackExactlyAsGiven", 0, testHeadersReadBackExactlyAsGiven},
		{"EmptyHeadersAndBodiesReadBackByTheNilRule", 0, testEmptyHeadersAndBodiesReadBackByTheNilRule},
		{"CallerSlicesAreNotKept", 0, testCallerSlicesAreNotKept},
		{"ReturnedSlicesAreNotShared", 0, testReturnedSlicesAreNotShared},
	}
}

// bigData returns n bytes that are hard to store, the same for the same
// label: a random 4 KiB block repeated, each copy stamped with its offset
// so that no two are alike, with NUL and 0xff runs and invalid UTF-8 at
// both ends and in the middle. (Built with copy, which stays fast under
// -race.)
func bigData(label string, n int) []byte {
	var seed [32]byte
	copy(seed[:], label)
	block := make([]byte, 4<<10)
	_, _ = rand.NewChaCha8(seed).Read(block)
	b := make([]byte, n)
	for at := 0; at < n; at += len(block) {
		copy(b[at:], block)
		if at+8 <= n {
			binary.BigEndian.PutUint64(b[at:], uint64(at))
		}
	}
	marks := []byte{0x00, 0x00, 0xff, 0xfe, 0xc3, 0x28, 0x00, '\\', '\'', 0x00}
	for _, at := range []int{0, n / 2, n - len(marks)} {
		if at >= 0 && at+len(marks) <= n {
			copy(b[at:], marks)
		}
	}
	return b
}

// printable returns n bytes of printable ASCII (0x21–0x7e), every one of
// them used, ending in last.
func printable(n int, last byte) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(0x21 + (i*7)%94)
	}
	b[n-1] = last
	return string(b)
}

// checkBytes compares bytes read back with what the caller wrote.
func checkBytes(t *testing.T, what string, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		i := 0
		for i < len(got) && i < len(want) && got[i] == want[i] {
			i++
		}
		t.Errorf("%s: %d bytes, want the %d bytes written (first difference at byte %d)", what, len(got), len(want), i)
	}
}

// cloneOutcome deep-copies an outcome, as the suite's own record of what
// was written.
func cloneOutcome(o contract.Outcome) contract.Outcome {
	out := o
	out.Body = bytes.Clone(o.Body)
	if o.Header != nil {
		out.Header = make(map[string][]string, len(o.Header))
		for k, vs := range o.Header {
			out.Header[k] = slices.Clone(vs)
		}
	}
	return out
}

func testLargeSnapshotsReadBackAsWritten(t *testing.T, e *env) {
	s := e.open()
	reader := e.open()
	for _, c := range []struct {
		name string
		size int
	}{{"100 KiB", 100 << 10}, {"the limit", durable.DefaultMaxSnapshot}} {
		id := "wf-" + strings.ReplaceAll(c.name, " ", "-")
		first := bigData(id+" create", c.size)
		want := bytes.Clone(first)
		w := mustCreate(t, e.ctx, s, contract.Workflow{ID: id, Status: contract.StatusRunning, Snapshot: first})
		checkBytes(t, c.name+": the caller's snapshot after CreateWorkflow", first, want)
		checkBytes(t, c.name+": snapshot returned by CreateWorkflow", w.Snapshot, want)
		got, err := reader.GetWorkflow(e.ctx, "", id)
		noErr(t, err, "GetWorkflow")
		checkBytes(t, c.name+": snapshot read back after CreateWorkflow", got.Snapshot, want)

		second := bigData(id+" update", c.size)
		want = bytes.Clone(second)
		w = mustUpdate(t, e.ctx, s, contract.Update{ID: id, ExpectStatus: w.Status, ExpectRevision: w.Revision, Status: w.Status, Snapshot: second})
		checkBytes(t, c.name+": the caller's snapshot after UpdateWorkflow", second, want)
		checkBytes(t, c.name+": snapshot returned by UpdateWorkflow", w.Snapshot, want)
		got, err = reader.GetWorkflow(e.ctx, "", id)
		noErr(t, err, "GetWorkflow")
		checkBytes(t, c.name+": snapshot read back after UpdateWorkflow", got.Snapshot, want)
		page, err := reader.ListWorkflows(e.ctx, contract.ListQuery{After: id[:len(id)-1], Limit: 1})
		noErr(t, err, "ListWorkflows")
		if len(page) != 1 || page[0].ID != id {
			t.Fatalf("ListWorkflows did not return %q", id)
		}
		checkBytes(t, c.name+": snapshot listed", page[0].Snapshot, want)
	}
}

// largeOutcome returns an outcome with a body of n bytes, a Ref of 1024
// bytes and about 60 KiB of headers.
func largeOutcome(label string, n int) contract.Outcome {
	o := testOutcome(label)
	o.Body = bigData("body "+label, n)
	o.Ref = printable(1024, 'R')
	o.Header["X-Large"] = []string{strings.Repeat("v", 30<<10), printable(29<<10, 'z')}
	return o
}

func testLargeOutcomesReadBackAsWritten(t *testing.T, e *env) {
	s, reader := e.open(), e.open()
	for _, c := range []struct {
		name string
		size int
	}{{"100 KiB", 100 << 10}, {"the limit", durable.DefaultMaxBody}} {
		key := "key-" + strings.ReplaceAll(c.name, " ", "-")
		cl := mustClaim(t, e.ctx, s, e.claimReq(key), contract.ClaimNew)
		waiter := startWait(e.ctx, reader, keyRef(key))
		out := largeOutcome(key, c.size)
		want := cloneOutcome(out)
		done := mustComplete(t, e.ctx, s, contract.Completion{KeyRef: keyRef(key), Token: cl.Token, Outcome: out})
		if d := diffOutcome(&out, &want); d != "" {
			t.Errorf("%s: CompleteKey changed the caller's outcome: %s", c.name, d)
		}
		if d := diffOutcome(done.Outcome, &want); d != "" {
			t.Errorf("%s: outcome returned by CompleteKey: %s", c.name, d)
		}
		got, err := reader.GetKey(e.ctx, keyRef(key))
		noErr(t, err, "GetKey")
		if d := diffOutcome(got.Outcome, &want); d != "" {
			t.Errorf("%s: outcome read back by GetKey: %s", c.name, d)
		}
		replay, err := reader.ClaimKey(e.ctx, e.claimReq(key))
		noErr(t, err, "ClaimKey")
		if d := diffOutcome(replay.Record.Outcome, &want); d != "" {
			t.Errorf("%s: outcome replayed by ClaimKey: %s", c.name, d)
		}
		r := awaitWait(t, waiter)
		noErr(t, r.err, "WaitKey")
		if d := diffOutcome(r.rec.Outcome, &want); d != "" {
			t.Errorf("%s: outcome returned by WaitKey: %s", c.name, d)
		}
	}
}

func testLongestFingerprintAndRefReadBackAsWritten(t *testing.T, e *env) {
	s, reader := e.open(), e.open()
	fp := printable(256, '~')
	wfID := strings.Repeat("w", 127) + "Z"
	req := contract.ClaimRequest{KeyRef: keyRef("key-long"), Fingerprint: fp, WorkflowID: wfID, TTL: e.ttl}
	c := mustClaim(t, e.ctx, s, req, contract.ClaimNew)
	for what, rec := range map[string]contract.KeyRecord{"returned by ClaimKey": c.Record, "read back": mustGetKey(t, e, reader, req.KeyRef)} {
		if rec.Fingerprint != fp || rec.WorkflowID != wfID {
			t.Errorf("claim %s: Fingerprint %q (%d bytes) WorkflowID %q, want the %d-byte fingerprint and the 128-byte workflow id written",
				what, rec.Fingerprint, len(rec.Fingerprint), rec.WorkflowID, len(fp))
		}
	}
	out := testOutcome("long ref")
	out.Ref = printable(1024, '!')
	want := cloneOutcome(out)
	done := mustComplete(t, e.ctx, s, contract.Completion{KeyRef: req.KeyRef, Token: c.Token, Outcome: out})
	for what, rec := range map[string]contract.KeyRecord{"returned by CompleteKey": done, "read back": mustGetKey(t, e, reader, req.KeyRef)} {
		if rec.Outcome == nil || rec.Outcome.Ref != want.Ref {
			got := "<no outcome>"
			if rec.Outcome != nil {
				got = fmt.Sprintf("%d bytes ending %q", len(rec.Outcome.Ref), rec.Outcome.Ref[max(0, len(rec.Outcome.Ref)-8):])
			}
			t.Errorf("Outcome.Ref %s: %s, want the 1024 bytes written", what, got)
		}
		if rec.Fingerprint != fp || rec.WorkflowID != wfID {
			t.Errorf("completed record %s: the fingerprint or workflow id changed", what)
		}
	}
	replay, err := reader.ClaimKey(e.ctx, req)
	noErr(t, err, "ClaimKey with the 256-byte fingerprint")
	if replay.Kind != contract.ClaimCompleted {
		t.Errorf("ClaimKey with the same 256-byte fingerprint = %v, want %v", replay.Kind, contract.ClaimCompleted)
	}
}

func testFingerprintsDifferingInTheLastByteConflict(t *testing.T, e *env) {
	s, other := e.open(), e.open()
	fpA, fpB := printable(256, 'A'), printable(256, 'B')
	reqA := contract.ClaimRequest{KeyRef: keyRef("key-1"), Fingerprint: fpA, TTL: e.ttl}
	reqB := reqA
	reqB.Fingerprint = fpB
	c := mustClaim(t, e.ctx, s, reqA, contract.ClaimNew)
	_, err := other.ClaimKey(e.ctx, reqB)
	if !checkCode(t, err, contract.KeyConflict) {
		t.Logf("  (a claimed key, fingerprints of 256 bytes differing only in the last)")
	}
	done := mustComplete(t, e.ctx, s, contract.Completion{KeyRef: reqA.KeyRef, Token: c.Token, Outcome: testOutcome("A")})
	_, err = other.ClaimKey(e.ctx, reqB)
	if !checkCode(t, err, contract.KeyConflict) {
		t.Logf("  (a completed key, fingerprints of 256 bytes differing only in the last)")
	}
	checkStoredKey(t, e.ctx, other, done)
	// And the other way round, on a key first claimed with B.
	reqB.Key = "key-2"
	mustClaim(t, e.ctx, other, reqB, contract.ClaimNew)
	reqA.Key = "key-2"
	_, err = s.ClaimKey(e.ctx, reqA)
	checkCode(t, err, contract.KeyConflict)
	// Shorter fingerprints that are prefixes of each other differ too.
	reqP := contract.ClaimRequest{KeyRef: keyRef("key-3"), Fingerprint: fpA[:255], TTL: e.ttl}
	mustClaim(t, e.ctx, s, reqP, contract.ClaimNew)
	reqP.Fingerprint = fpA
	_, err = other.ClaimKey(e.ctx, reqP)
	if !checkCode(t, err, contract.KeyConflict) {
		t.Logf("  (a 256-byte fingerprint against its own 255-byte prefix)")
	}
}

func mustGetKey(t *testing.T, e *env, s *durable.Store, ref contract.KeyRef) contract.KeyRecord {
	t.Helper()
	rec, err := s.GetKey(e.ctx, ref)
	noErr(t, err, "GetKey")
	return rec
}

func testHeadersReadBackExactlyAsGiven(t *testing.T, e *env) {
	s, reader := e.open(), e.open()
	out := contract.Outcome{
		Code: 200,
		Header: map[string][]string{
			// Names that differ only in case are different names: the
			// contract keeps bytes, it does not canonicalize HTTP.
			"content-type":        {"text/plain; charset=utf-8"},
			"Content-Type":        {"application/json"},
			"X-REQUEST-ID":        {"abc"},
			"x-multi":             {"3", "1", "2", "1"}, // order and duplicates kept
			"X-Spaces":            {"  leading and trailing  ", " ", ""},
			"X-Empty":             {""},
			"X-Unicode":           {"é ü 漢字 \u2028"},
			"X-Bytes":             {"\xff\xfe\x80 obs-text", "tab\tinside", "quote\" backslash\\ "},
			"X-Comma-Not-Joined":  {"a, b", "c"},
			"!#$%&'*+-.^_`|~0aZ":  {"token chars"},
			printable(256, 'N'):   {"the longest name"},
			"X-Looks-Like-Json":   {`{"a": [1, 2]}`, `null`},
			"X-Percent-Encoded%2": {"%00%ff"},
		},
		Body: []byte{},
	}
	want := cloneOutcome(out)
	c := mustClaim(t, e.ctx, s, e.claimReq("key-1"), contract.ClaimNew)
	done := mustComplete(t, e.ctx, s, contract.Completion{KeyRef: keyRef("key-1"), Token: c.Token, Outcome: out})
	if d := diffOutcome(done.Outcome, &want); d != "" {
		t.Errorf("headers returned by CompleteKey: %s", d)
	}
	got := mustGetKey(t, e, reader, keyRef("key-1"))
	if d := diffOutcome(got.Outcome, &want); d != "" {
		t.Errorf("headers read back: %s", d)
	}
	replay, err := reader.ClaimKey(e.ctx, e.claimReq("key-1"))
	noErr(t, err, "ClaimKey")
	if d := diffOutcome(replay.Record.Outcome, &want); d != "" {
		t.Errorf("headers replayed by ClaimKey: %s", d)
	}
}

// testEmptyHeadersAndBodiesReadBackByTheNilRule checks the contract's
// rule for nil and empty (see contract.Outcome) on every read of a
// completed key: a header name with a nil or empty value list reads back,
// with a nil list; a nil Header reads back as nil and an empty one with no
// names; a zero-length Body reads back with length zero.
func testEmptyHeadersAndBodiesReadBackByTheNilRule(t *testing.T, e *env) {
	s, reader := e.open(), e.open()
	for i, c := range []struct {
		name   string
		out    contract.Outcome
		header map[string][]string // what must read back; nil: a nil Header
	}{
		{"a nil Header and a nil Body", contract.Outcome{Code: 204}, nil},
		{"an empty Header and an empty Body", contract.Outcome{Code: 204, Header: map[string][]string{}, Body: []byte{}}, map[string][]string{}},
		{"names without values", contract.Outcome{Code: 200, Body: []byte{}, Header: map[string][]string{
			"X-Nil": nil, "X-Empty-List": {}, "X-Empty-String": {""}, "X-Value": {"v"},
		}}, map[string][]string{"X-Nil": nil, "X-Empty-List": nil, "X-Empty-String": {""}, "X-Value": {"v"}}},
	} {
		key := fmt.Sprintf("key-%d", i+1)
		cl := mustClaim(t, e.ctx, s, e.claimReq(key), contract.ClaimNew)
		waiter := startWait(e.ctx, reader, keyRef(key))
		done := mustComplete(t, e.ctx, s, contract.Completion{KeyRef: keyRef(key), Token: cl.Token, Outcome: cloneOutcome(c.out)})
		check := func(what string, o *contract.Outcome) {
			t.Helper()
			if o == nil {
				t.Errorf("%s: outcome %s is nil", c.name, what)
				return
			}
			if len(o.Body) != 0 {
				t.Errorf("%s: outcome %s has a %d-byte Body, want none", c.name, what, len(o.Body))
			}
			switch {
			case c.header == nil && o.Header != nil:
				t.Errorf("%s: outcome %s has Header %#v, want nil (a nil Header reads back as nil)", c.name, what, o.Header)
			case c.header != nil && len(o.Header) != len(c.header):
				t.Errorf("%s: outcome %s has Header names %q, want %q", c.name, what, sortedKeys(o.Header), sortedKeys(c.header))
			}
			for _, k := range sortedKeys(c.header) {
				got, ok := o.Header[k]
				want := c.header[k]
				switch {
				case !ok:
					t.Errorf("%s: outcome %s lost the header name %q (a name without values is kept)", c.name, what, k)
				case want == nil && got != nil:
					t.Errorf("%s: outcome %s has Header[%q] = %#v, want nil (a name with a nil or empty list reads back with a nil list)", c.name, what, k, got)
				case !slices.Equal(got, want):
					t.Errorf("%s: outcome %s has Header[%q] = %q, want %q", c.name, what, k, got, want)
				}
			}
		}
		check("returned by CompleteKey", done.Outcome)
		check("read back by GetKey", mustGetKey(t, e, reader, keyRef(key)).Outcome)
		replay, err := reader.ClaimKey(e.ctx, e.claimReq(key))
		noErr(t, err, "ClaimKey")
		check("replayed by ClaimKey", replay.Record.Outcome)
		r := awaitWait(t, waiter)
		noErr(t, r.err, "WaitKey")
		check("returned by WaitKey", r.rec.Outcome)
		again, err := s.CompleteKey(e.ctx, contract.Completion{KeyRef: keyRef(key), Token: cl.Token, Outcome: cloneOutcome(c.out)})
		noErr(t, err, "retried CompleteKey")
		check("returned by a retried CompleteKey", again.Outcome)
		page, err := reader.ListKeys(e.ctx, contract.KeyListQuery{})
		if contract.CodeOf(err) != contract.Unimplemented {
			noErr(t, err, "ListKeys")
			at := slices.IndexFunc(page, func(r contract.KeyRecord) bool { return r.Key == key })
			if at < 0 {
				t.Errorf("ListKeys did not return %q", key)
			} else {
				check("listed by ListKeys", page[at].Outcome)
			}
		}
	}
}

// testCallerSlicesAreNotKept writes, then changes every slice and map the
// caller passed, and reads back: a backend keeps copies, not the caller's
// memory.
func testCallerSlicesAreNotKept(t *testing.T, e *env) {
	s := e.open()
	snap := []byte("created snapshot")
	w := mustCreate(t, e.ctx, s, contract.Workflow{ID: "wf-1", Status: contract.StatusRunning, Snapshot: snap})
	copy(snap, "XXXXXXX")
	got, err := s.GetWorkflow(e.ctx, "", "wf-1")
	noErr(t, err, "GetWorkflow")
	checkBytes(t, "snapshot after the caller changed its slice passed to CreateWorkflow", got.Snapshot, []byte("created snapshot"))

	snap = []byte("updated snapshot")
	mustUpdate(t, e.ctx, s, contract.Update{ID: "wf-1", ExpectStatus: w.Status, ExpectRevision: w.Revision, Status: w.Status, Snapshot: snap})
	copy(snap, "YYYYYYY")
	got, err = s.GetWorkflow(e.ctx, "", "wf-1")
	noErr(t, err, "GetWorkflow")
	checkBytes(t, "snapshot after the caller changed its slice passed to UpdateWorkflow", got.Snapshot, []byte("updated snapshot"))
	page, err := s.ListWorkflows(e.ctx, contract.ListQuery{})
	noErr(t, err, "ListWorkflows")
	if len(page) == 1 {
		checkBytes(t, "listed snapshot after the caller changed its slice", page[0].Snapshot, []byte("updated snapshot"))
	}

	c := mustClaim(t, e.ctx, s, e.claimReq("key-1"), contract.ClaimNew)
	out := testOutcome("kept")
	want := cloneOutcome(out)
	mustComplete(t, e.ctx, s, contract.Completion{KeyRef: keyRef("key-1"), Token: c.Token, Outcome: out})
	// Change everything the caller passed: body bytes, header values, the
	// value slices and the map itself.
	copy(out.Body, "ZZZZZZZZ")
	out.Header["Set-Cookie"][0] = "changed"
	out.Header["X-Odd"] = append(out.Header["X-Odd"][:1], "appended")
	out.Header["X-Added"] = []string{"added"}
	delete(out.Header, "Content-Type")
	rec := mustGetKey(t, e, s, keyRef("key-1"))
	if d := diffOutcome(rec.Outcome, &want); d != "" {
		t.Errorf("outcome after the caller changed the slices and map it passed to CompleteKey: %s", d)
	}
}

// testReturnedSlicesAreNotShared changes every slice and map a call
// returned and reads again: what a backend returns belongs to the caller.
func testReturnedSlicesAreNotShared(t *testing.T, e *env) {
	s := e.open()
	w := mustCreate(t, e.ctx, s, contract.Workflow{ID: "wf-1", Status: contract.StatusRunning, Snapshot: []byte("v1 snapshot")})
	scribble := func(b []byte) {
		for i := range b {
			b[i] = '#'
		}
	}
	scribble(w.Snapshot)
	got, err := s.GetWorkflow(e.ctx, "", "wf-1")
	noErr(t, err, "GetWorkflow")
	want := []byte("v1 snapshot")
	checkBytes(t, "snapshot after changing the one CreateWorkflow returned", got.Snapshot, want)
	scribble(got.Snapshot)
	got, err = s.GetWorkflow(e.ctx, "", "wf-1")
	noErr(t, err, "GetWorkflow")
	checkBytes(t, "snapshot after changing the one GetWorkflow returned", got.Snapshot, want)
	page, err := s.ListWorkflows(e.ctx, contract.ListQuery{})
	noErr(t, err, "ListWorkflows")
	for _, p := range page {
		scribble(p.Snapshot)
	}
	got, err = s.GetWorkflow(e.ctx, "", "wf-1")
	noErr(t, err, "GetWorkflow")
	checkBytes(t, "snapshot after changing the one ListWorkflows returned", got.Snapshot, want)
	u := mustUpdate(t, e.ctx, s, contract.Update{ID: "wf-1", ExpectStatus: got.Status, ExpectRevision: got.Revision, Status: got.Status, Snapshot: []byte("v2 snapshot")})
	scribble(u.Snapshot)
	got, err = s.GetWorkflow(e.ctx, "", "wf-1")
	noErr(t, err, "GetWorkflow")
	checkBytes(t, "snapshot after changing the one UpdateWorkflow returned", got.Snapshot, []byte("v2 snapshot"))

	c := mustClaim(t, e.ctx, s, e.claimReq("key-1"), contract.ClaimNew)
	waiter := startWait(e.ctx, e.open(), keyRef("key-1"))
	out := testOutcome("shared")
	wantOut := cloneOutcome(out)
	mess := func(o *contract.Outcome) {
		if o == nil {
			return
		}
		scribble(o.Body)
		for k, vs := range o.Header {
			for i := range vs {
				vs[i] = "changed"
			}
			o.Header[k] = append(vs, "appended")
		}
		o.Header["X-Added"] = []string{"added"}
		delete(o.Header, "Content-Type")
		o.Ref = "changed"
	}
	check := func(what string) {
		t.Helper()
		rec := mustGetKey(t, e, s, keyRef("key-1"))
		if d := diffOutcome(rec.Outcome, &wantOut); d != "" {
			t.Errorf("outcome after changing the one %s returned: %s", what, d)
		}
	}
	done := mustComplete(t, e.ctx, s, contract.Completion{KeyRef: keyRef("key-1"), Token: c.Token, Outcome: out})
	mess(done.Outcome)
	check("CompleteKey")
	r := awaitWait(t, waiter)
	noErr(t, r.err, "WaitKey")
	mess(r.rec.Outcome)
	check("WaitKey")
	rec := mustGetKey(t, e, s, keyRef("key-1"))
	mess(rec.Outcome)
	check("GetKey")
	replay, err := s.ClaimKey(e.ctx, e.claimReq("key-1"))
	noErr(t, err, "ClaimKey")
	mess(replay.Record.Outcome)
	check("ClaimKey")
	again, err := s.CompleteKey(e.ctx, contract.Completion{KeyRef: keyRef("key-1"), Token: c.Token, Outcome: testOutcome("retry")})
	noErr(t, err, "retried CompleteKey")
	mess(again.Outcome)
	check("a retried CompleteKey")
}
