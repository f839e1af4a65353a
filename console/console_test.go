package console_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/backends/memory"
	"github.com/durable-go/durable/console"
	"github.com/durable-go/durable/contract"
)

// hostile is what a record may hold that must never become markup.
const hostile = `<script>window.__pwned=1</script><img src=x onerror="window.__pwned=1">`

// hostileFingerprint is hostile markup a fingerprint can hold (printable
// ASCII without spaces).
const hostileFingerprint = `<script>window.__pwned=1</script><img/src=x/onerror=window.__pwned=1>`

// seed fills store, in scope sc, with what the console shows: running
// workflows of different ages and one succeeded, a claim that will have
// expired when the test's clock moves on, a live claim, completed keys (one
// with a hostile body and header), a held lease with a hostile value, and
// one that will have expired. advance moves the store's clock (memory) or
// waits (real servers) past the short TTLs.
func seed(t *testing.T, store *durable.Store, sc durable.Scope, advance func(time.Duration)) {
	t.Helper()
	ctx := context.Background()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	short := store.MinTTL()
	for i := range 7 {
		id := fmt.Sprintf("wf-%02d", i)
		_, err := store.CreateWorkflow(ctx, durable.Workflow{Scope: sc, ID: id, Status: durable.StatusRunning, Snapshot: []byte(fmt.Sprintf(`{"step":%d}`, i))})
		must(err)
	}
	_, err := store.CreateWorkflow(ctx, durable.Workflow{Scope: sc, ID: "wf-hostile", Status: durable.StatusRunning, Snapshot: []byte(hostile)})
	must(err)
	_, err = store.CreateWorkflow(ctx, durable.Workflow{Scope: sc, ID: "wf-done", Status: durable.StatusSucceeded, Snapshot: []byte("done")})
	must(err)
	_, err = store.ClaimKey(ctx, durable.ClaimRequest{KeyRef: durable.KeyRef{Scope: sc, Key: "key-abandoned"}, Fingerprint: "f", TTL: short})
	must(err)
	_, err = store.AcquireLease(ctx, durable.LeaseRequest{Scope: sc, Resource: "lease-lapsed", Owner: "worker-old", TTL: short})
	must(err)
	advance(2*short + time.Second)
	// wf-00 is now the least recently updated; touch the others in order.
	for i := 1; i < 7; i++ {
		_, err := store.UpdateWorkflow(ctx, durable.Update{Scope: sc, ID: fmt.Sprintf("wf-%02d", i), ExpectStatus: durable.StatusRunning, Status: durable.StatusRunning})
		must(err)
	}
	_, err = store.ClaimKey(ctx, durable.ClaimRequest{KeyRef: durable.KeyRef{Scope: sc, Key: "key-live"}, Fingerprint: hostileFingerprint, TTL: time.Hour})
	must(err)
	c, err := store.ClaimKey(ctx, durable.ClaimRequest{KeyRef: durable.KeyRef{Scope: sc, Key: "key-hostile"}, Fingerprint: "f", TTL: time.Hour})
	must(err)
	_, err = store.CompleteKey(ctx, durable.Completion{KeyRef: c.Record.KeyRef, Token: c.Token, Retain: time.Hour,
		Outcome: durable.Outcome{Code: 201, Header: http.Header{"X-Evil": {hostile}}, Body: []byte(hostile + strings.Repeat("x", 10000))}})
	must(err)
	for i := range 3 {
		c, err := store.ClaimKey(ctx, durable.ClaimRequest{KeyRef: durable.KeyRef{Scope: sc, Key: fmt.Sprintf("key-%d", i)}, Fingerprint: "f", TTL: time.Hour})
		must(err)
		_, err = store.CompleteKey(ctx, durable.Completion{KeyRef: c.Record.KeyRef, Token: c.Token, Retain: time.Hour, Outcome: durable.Outcome{Code: 200, Body: []byte{0xff, 0xfe, 0, 1}}})
		must(err)
	}
	_, err = store.AcquireLease(ctx, durable.LeaseRequest{Scope: sc, Resource: "lease-held", Owner: "worker-7", TTL: time.Hour, Value: hostile})
	must(err)
}

// memoryConsole returns a console over a seeded memory store, its server
// and the store's clock.
func memoryConsole(t *testing.T, opts console.Options) (*httptest.Server, *durable.Store, *contract.ManualClock) {
	t.Helper()
	clock := contract.NewManualClock(time.Date(2026, 12, 5, 3, 0, 0, 0, time.UTC))
	store, err := memory.Open(memory.Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	seed(t, store, "", clock.Advance)
	opts.Now = clock.Now
	h, err := console.New(store, opts)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv, store, clock
}

// get returns the status and body of path.
func get(t *testing.T, c *http.Client, base, path string) (int, string, http.Header) {
	t.Helper()
	resp, err := c.Get(base + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

func post(t *testing.T, c *http.Client, base, path string, form url.Values, hdr map[string]string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// noRawHostile fails when body holds the hostile markup unescaped.
func noRawHostile(t *testing.T, what, body string) {
	t.Helper()
	// Escaped, the attribute text ("onerror=") may remain, as text.
	for _, s := range []string{"<script", "<img"} {
		if strings.Contains(body, s) {
			t.Errorf("%s: the page holds %q unescaped", what, s)
		}
	}
}

func TestViews(t *testing.T) {
	srv, _, _ := memoryConsole(t, console.Options{PageSize: 3})
	c := srv.Client()
	for _, tc := range []struct {
		path string
		want []string
	}{
		{"/", []string{"Oldest running workflows", "wf-00", "claimed (expired)", "read-only", "Counts over time"}},
		{"/workflows", []string{"wf-00", "wf-01", "wf-02", "Next page", "--after wf-02"}},
		{"/workflows?after=wf-02&limit=2", []string{"wf-03", "wf-04", "--after wf-04"}},
		{"/workflows?status=succeeded", []string{"wf-done"}},
		{"/oldest", []string{"wf-00", "(all of them)"}},
		{"/keys?limit=10", []string{"key-abandoned", "expired claim", "key-live", "key-hostile", "base64"}},
		{"/leases", []string{"lease-held", "worker-7", "lease-lapsed", "expired"}},
		{"/leases?held=1", []string{"lease-held"}},
		{"/workflow?id=wf-hostile", []string{"wf-hostile", "&lt;script&gt;", "Download the snapshot"}},
		{"/key?id=key-hostile", []string{"X-Evil", "cut, 10", "Download the body"}},
		{"/lease?id=lease-held", []string{"worker-7"}},
		{"/cleanup", []string{"Cleanup would delete now", "read-only"}},
	} {
		status, body, hdr := get(t, c, srv.URL, tc.path)
		if status != http.StatusOK {
			t.Errorf("GET %s: %d\n%s", tc.path, status, body)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(body, w) {
				t.Errorf("GET %s: no %q in the page", tc.path, w)
			}
		}
		noRawHostile(t, tc.path, body)
		if csp := hdr.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || strings.Contains(csp, "script-src") {
			t.Errorf("GET %s: Content-Security-Policy %q, want no script allowed", tc.path, csp)
		}
	}
	// The oldest-first view orders by last update, not by id.
	_, body, _ := get(t, c, srv.URL, "/oldest")
	if i, j := strings.Index(body, "wf-00"), strings.Index(body, "wf-01"); i < 0 || j < 0 || i > j {
		t.Errorf("oldest: wf-00 (least recently updated) should come before wf-01")
	}
	// wf-hostile was created before the clock moved and never updated:
	// it is the oldest running workflow, right beside wf-00.
	if !regexp.MustCompile(`(?s)wf-00.*wf-hostile.*wf-01`).MatchString(body) {
		t.Errorf("oldest: want wf-00, wf-hostile, then wf-01")
	}
}

// A key, id or scope holding markup never gets past the Store (the
// browser test writes such rows around it, in SQL).
func TestTheStoreRefusesMarkupInIdentifiers(t *testing.T) {
	store, err := memory.Open(memory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	ctx := context.Background()
	if _, err := store.ClaimKey(ctx, durable.ClaimRequest{KeyRef: durable.KeyRef{Key: "<script>x</script>"}, Fingerprint: "f", TTL: time.Minute}); contract.CodeOf(err) != contract.InvalidArgument {
		t.Errorf("a key holding markup: %v", err)
	}
	if _, err := store.CreateWorkflow(ctx, durable.Workflow{ID: "<img src=x>"}); contract.CodeOf(err) != contract.InvalidArgument {
		t.Errorf("an id holding markup: %v", err)
	}
}

func TestFindAndErrors(t *testing.T) {
	srv, _, _ := memoryConsole(t, console.Options{})
	c := srv.Client()
	if status, body, _ := get(t, c, srv.URL, "/find?kind=lease&id=lease-held"); status != 200 || !strings.Contains(body, "worker-7") {
		t.Errorf("find a lease: %d", status)
	}
	for path, want := range map[string]int{
		"/workflow?id=missing":       404,
		"/workflow?id=bad%20id":      400,
		"/workflows?scope=Bad%20S":   400,
		"/workflows?limit=0":         400,
		"/workflows?limit=1001":      400,
		"/find?kind=table&id=x":      400,
		"/nope":                      404,
		"/cleanup?terminal_age=-1h":  400,
		"/download?kind=lease&id=x":  400,
		"/delete?kind=table&id=x":    400,
		"/key?id=never-claimed-here": 404,
	} {
		status, body, _ := get(t, c, srv.URL, path)
		if status != want {
			t.Errorf("GET %s: %d, want %d", path, status, want)
		}
		if !strings.Contains(body, `class="error"`) {
			t.Errorf("GET %s: no error message on the page", path)
		}
	}
}

func TestDownload(t *testing.T) {
	srv, _, _ := memoryConsole(t, console.Options{})
	status, body, hdr := get(t, srv.Client(), srv.URL, "/download?kind=key&id=key-hostile")
	if status != 200 || body != hostile+strings.Repeat("x", 10000) {
		t.Fatalf("download: %d, %d bytes", status, len(body))
	}
	if hdr.Get("Content-Type") != "application/octet-stream" || !strings.HasPrefix(hdr.Get("Content-Disposition"), `attachment; filename="key-key-hostile.bin"`) {
		t.Errorf("download headers: %v", hdr)
	}
}

func TestReadOnlyRefusesActions(t *testing.T) {
	srv, store, _ := memoryConsole(t, console.Options{})
	c := srv.Client()
	_, body, _ := get(t, c, srv.URL, "/delete?kind=workflow&id=wf-00")
	if !strings.Contains(body, `id="readonly"`) || strings.Contains(body, `name="csrf"`) {
		t.Errorf("a read-only confirmation page offers the form")
	}
	status, _ := post(t, c, srv.URL, "/delete", url.Values{"kind": {"workflow"}, "id": {"wf-00"}}, nil)
	if status != http.StatusForbidden {
		t.Errorf("POST /delete on a read-only console: %d", status)
	}
	status, _ = post(t, c, srv.URL, "/cleanup", url.Values{"terminal_age": {"0s"}}, nil)
	if status != http.StatusForbidden {
		t.Errorf("POST /cleanup on a read-only console: %d", status)
	}
	if _, err := store.GetWorkflow(context.Background(), "", "wf-00"); err != nil {
		t.Errorf("wf-00 after refused deletes: %v", err)
	}
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func TestDeleteNeedsItsOwnToken(t *testing.T) {
	srv, store, _ := memoryConsole(t, console.Options{AllowActions: true})
	c := srv.Client()
	ctx := context.Background()
	_, body, _ := get(t, c, srv.URL, "/delete?kind=workflow&id=wf-00")
	m := csrfField.FindStringSubmatch(body)
	if m == nil {
		t.Fatal("no csrf field on the confirmation page")
	}
	token := m[1]
	form := func(id, tok string) url.Values {
		return url.Values{"kind": {"workflow"}, "id": {id}, "csrf": {tok}}
	}
	for name, tc := range map[string]struct {
		form url.Values
		hdr  map[string]string
	}{
		"no token":           {form("wf-00", ""), nil},
		"a forged token":     {form("wf-00", "9999999999.AAAA"), nil},
		"another record's":   {form("wf-01", token), nil},
		"from another site":  {form("wf-00", token), map[string]string{"Origin": "https://evil.example"}},
		"a cross-site fetch": {form("wf-00", token), map[string]string{"Sec-Fetch-Site": "cross-site"}},
		"an opaque origin":   {form("wf-00", token), map[string]string{"Origin": "null"}},
	} {
		if status, _ := post(t, c, srv.URL, "/delete", tc.form, tc.hdr); status != http.StatusForbidden {
			t.Errorf("%s: %d, want 403", name, status)
		}
	}
	if _, err := store.GetWorkflow(ctx, "", "wf-00"); err != nil {
		t.Fatalf("wf-00 after refused deletes: %v", err)
	}
	status, body := post(t, c, srv.URL, "/delete", form("wf-00", token), map[string]string{"Origin": srv.URL})
	if status != 200 || !strings.Contains(body, "Deleted workflow") {
		t.Fatalf("delete: %d\n%s", status, body)
	}
	if _, err := store.GetWorkflow(ctx, "", "wf-00"); !errorsIsNotFound(err) {
		t.Errorf("wf-00 after delete: %v", err)
	}
	status, body = post(t, c, srv.URL, "/delete", form("wf-00", token), nil)
	if status != 200 || !strings.Contains(body, "nothing was deleted") {
		t.Errorf("second delete: %d", status)
	}
}

func errorsIsNotFound(err error) bool { return contract.CodeOf(err) == contract.NotFound }

func TestCleanupDryRunThenRun(t *testing.T) {
	srv, store, _ := memoryConsole(t, console.Options{AllowActions: true})
	c := srv.Client()
	_, body, _ := get(t, c, srv.URL, "/cleanup?terminal_age=0s")
	if !regexp.MustCompile(`would delete now: <strong>1</strong> workflows, <strong>1</strong> keys, <strong>1</strong> leases`).MatchString(body) {
		t.Fatalf("dry run: %s", body)
	}
	m := csrfField.FindStringSubmatch(body)
	if m == nil {
		t.Fatal("no csrf field")
	}
	// The token is for this terminal age only.
	if status, _ := post(t, c, srv.URL, "/cleanup", url.Values{"terminal_age": {"1h"}, "csrf": {m[1]}}, nil); status != http.StatusForbidden {
		t.Errorf("cleanup with another age's token: %d", status)
	}
	status, body := post(t, c, srv.URL, "/cleanup", url.Values{"terminal_age": {"0s"}, "csrf": {m[1]}}, nil)
	if status != 200 || !strings.Contains(body, "deleted 1 workflows, 1 keys and 1 leases") {
		t.Fatalf("cleanup: %d\n%s", status, body)
	}
	if _, err := store.GetWorkflow(context.Background(), "", "wf-done"); !errorsIsNotFound(err) {
		t.Errorf("wf-done after cleanup: %v", err)
	}
}

func TestToken(t *testing.T) {
	srv, _, _ := memoryConsole(t, console.Options{Token: "s3cret-token"})
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar}
	status, body, _ := get(t, c, srv.URL, "/")
	if status != 200 || !strings.Contains(body, `name="token"`) {
		t.Fatalf("GET / without a token: %d, want the sign-in form", status)
	}
	if strings.Contains(body, "wf-00") {
		t.Errorf("the sign-in page shows records")
	}
	if _, body, _ := get(t, c, srv.URL, "/download?kind=key&id=key-hostile"); strings.Contains(body, "xxxxxxxx") || !strings.Contains(body, `name="token"`) {
		t.Errorf("a download without the token did not go to the sign-in form")
	}
	if status, _ := post(t, c, srv.URL, "/delete", url.Values{}, nil); status != http.StatusUnauthorized {
		t.Errorf("POST without a token: %d, want 401", status)
	}
	if status, _ := post(t, c, srv.URL, "/login", url.Values{"token": {"wrong"}}, nil); status != http.StatusUnauthorized {
		t.Errorf("wrong token: %d", status)
	}
	if status, body := post(t, c, srv.URL, "/login", url.Values{"token": {"s3cret-token"}}, nil); status != 200 || !strings.Contains(body, "wf-00") {
		t.Errorf("sign in: %d", status)
	}
	for _, ck := range jar.Cookies(mustURL(srv.URL)) {
		if strings.Contains(ck.Value, "s3cret") {
			t.Errorf("the cookie holds the token")
		}
	}
	if status, body, _ := get(t, c, srv.URL, "/keys"); status != 200 || !strings.Contains(body, "key-live") {
		t.Errorf("signed in: %d", status)
	}
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/leases", nil)
	req.Header.Set("Authorization", "Bearer s3cret-token")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("bearer token: %d", resp.StatusCode)
	}
}

func mustURL(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(err)
	}
	return u
}

// mountedConsole serves a console with opts over a memory store seeded in
// scope sc, mounted at /ops/durable/ of the server it returns.
func mountedConsole(t *testing.T, sc durable.Scope, opts console.Options) *httptest.Server {
	t.Helper()
	store, err := memory.Open(memory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	seed(t, store, sc, func(time.Duration) {})
	h, err := console.New(store, opts)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/ops/durable/", http.StripPrefix("/ops/durable", h))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// Mounted under a prefix, every link stays under it.
func TestMountedUnderAPrefix(t *testing.T) {
	srv := mountedConsole(t, "acme", console.Options{})
	c := srv.Client()
	_, body, _ := get(t, c, srv.URL, "/ops/durable/?scope=acme")
	links := regexp.MustCompile(`href="([^"]*)"`).FindAllStringSubmatch(body, -1)
	if len(links) < 10 {
		t.Fatalf("only %d links on the overview", len(links))
	}
	for _, l := range links {
		target := mustURL(srv.URL + "/ops/durable/").ResolveReference(mustURL(strings.ReplaceAll(l[1], "&amp;", "&")))
		status, _, _ := get(t, c, "", target.String())
		if status != 200 {
			t.Errorf("link %q → %s: %d", l[1], target, status)
		}
	}
}

// Mounted under a prefix with a token, the sign-in and search redirects
// stay under the prefix.
func TestRedirectsStayUnderThePrefix(t *testing.T) {
	srv := mountedConsole(t, "", console.Options{Token: "s3cret-token-0123"})
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar}
	resp, err := c.Get(srv.URL + "/ops/durable/keys")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Request.URL.Path != "/ops/durable/login" {
		t.Errorf("without the token: redirected to %s, want /ops/durable/login", resp.Request.URL.Path)
	}
	resp, err = c.PostForm(srv.URL+"/ops/durable/login", url.Values{"token": {"s3cret-token-0123"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Request.URL.Path != "/ops/durable/" || resp.StatusCode != 200 {
		t.Errorf("after signing in: %d at %s, want the overview at /ops/durable/", resp.StatusCode, resp.Request.URL.Path)
	}
	status, body, _ := get(t, c, srv.URL, "/ops/durable/find?kind=lease&id=lease-held")
	if status != 200 || !strings.Contains(body, "worker-7") {
		t.Errorf("find under the prefix: %d", status)
	}
}

func TestOptionsOutOfBounds(t *testing.T) {
	store, err := memory.Open(memory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	for _, o := range []console.Options{{PageSize: -1}, {PageSize: 1001}, {ScanLimit: -1}, {ScanLimit: console.MaxScanLimit + 1}, {SampleEvery: -1}} {
		if _, err := console.New(store, o); err == nil {
			t.Errorf("New(%+v): no error", o)
		}
	}
	if _, err := console.New(nil, console.Options{}); err == nil {
		t.Error("New(nil): no error")
	}
}

// A confirmation page's form is valid for an hour, no longer.
func TestActionTokenExpires(t *testing.T) {
	srv, store, clock := memoryConsole(t, console.Options{AllowActions: true})
	c := srv.Client()
	_, body, _ := get(t, c, srv.URL, "/delete?kind=workflow&id=wf-00")
	m := csrfField.FindStringSubmatch(body)
	if m == nil {
		t.Fatal("no csrf field")
	}
	clock.Advance(61 * time.Minute)
	status, body := post(t, c, srv.URL, "/delete", url.Values{"kind": {"workflow"}, "id": {"wf-00"}, "csrf": {m[1]}}, nil)
	if status != http.StatusForbidden || !strings.Contains(body, "expired") {
		t.Errorf("a form older than an hour: %d, want 403 saying it expired", status)
	}
	if _, err := store.GetWorkflow(context.Background(), "", "wf-00"); err != nil {
		t.Errorf("wf-00 after an expired form: %v", err)
	}
}

// The overview samples a scope's counts at most once per SampleEvery, and
// shows the samples newest first.
func TestCountsOverTime(t *testing.T) {
	srv, store, clock := memoryConsole(t, console.Options{SampleEvery: time.Minute})
	c := srv.Client()
	rows := regexp.MustCompile(`(?s)<table class="list" id="history">.*?<tbody>(.*?)</tbody>`)
	samples := func() []string {
		t.Helper()
		_, body, _ := get(t, c, srv.URL, "/")
		m := rows.FindStringSubmatch(body)
		if m == nil {
			t.Fatal("no history table")
		}
		return regexp.MustCompile(`<tr><td>[^<]*</td><td class="n">(\d+)</td>`).FindAllString(m[1], -1)
	}
	if n := len(samples()); n != 1 {
		t.Fatalf("first overview: %d samples, want 1", n)
	}
	if n := len(samples()); n != 1 {
		t.Errorf("again within SampleEvery: %d samples, want 1", n)
	}
	if _, err := store.CreateWorkflow(context.Background(), durable.Workflow{ID: "wf-new", Status: durable.StatusRunning}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Minute)
	got := samples()
	if len(got) != 2 || !strings.HasSuffix(got[0], `<td class="n">10</td>`) || !strings.HasSuffix(got[1], `<td class="n">9</td>`) {
		t.Errorf("after SampleEvery: samples %q, want 10 workflows then 9", got)
	}
}

// A scan stopped by ScanLimit says so: counts are lower bounds, and the
// oldest-first view says older ones may exist.
func TestScanLimit(t *testing.T) {
	srv, _, _ := memoryConsole(t, console.Options{ScanLimit: 3})
	c := srv.Client()
	if _, body, _ := get(t, c, srv.URL, "/"); !strings.Contains(body, `<p class="big">≥ 3</p>`) {
		t.Errorf("overview with ScanLimit 3: no \"≥ 3\" workflow count")
	}
	if _, body, _ := get(t, c, srv.URL, "/oldest"); !strings.Contains(body, "Read 3 running workflows, stopping at the scan limit of 3") {
		t.Errorf("oldest with ScanLimit 3 does not say it stopped")
	}
	srv, _, _ = memoryConsole(t, console.Options{ScanLimit: 100})
	if _, body, _ := get(t, srv.Client(), srv.URL, "/"); !strings.Contains(body, `<p class="big">9</p>`) {
		t.Errorf("overview with ScanLimit 100: want the exact count 9")
	}
}
