package console_test

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/durable-go/durable"
	_ "github.com/durable-go/durable/backends/postgres"
	_ "github.com/durable-go/durable/backends/sqlite"
	"github.com/durable-go/durable/console"
	"github.com/durable-go/durable/contract"
	"github.com/durable-go/durable/internal/headless"
	"github.com/durable-go/durable/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// artifacts is where the browser test keeps its screenshots:
// $DURABLE_ARTIFACTS/console, or a directory under the system's temporary
// directory. The test logs it.
func artifacts(t *testing.T, backend string) string {
	base := os.Getenv("DURABLE_ARTIFACTS")
	if base == "" {
		base = filepath.Join(os.TempDir(), "durable-artifacts")
	}
	dir := filepath.Join(base, "console", backend)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshots in %s", dir)
	return dir
}

// TestConsoleInABrowser drives the console in headless Chromium against a
// seeded PostgreSQL store and a seeded SQLite store: every view opens and
// shows its records, a page link is followed, a cleanup dry run is run
// for real after its confirmation, a record is deleted through its
// confirmation page, and no record's contents ever runs as script.
func TestConsoleInABrowser(t *testing.T) {
	browser := headless.Start(t)
	for _, backend := range []struct {
		name string
		open func(t *testing.T) (*durable.Store, func(t *testing.T))
	}{
		{"postgres", openPostgres},
		{"sqlite", openSQLite},
	} {
		t.Run(backend.name, func(t *testing.T) {
			store, hostileRows := backend.open(t)
			const sc = "acme"
			seed(t, store, sc, time.Sleep)
			if hostileRows != nil {
				hostileRows(t)
			}
			h, err := console.New(store, console.Options{AllowActions: true, PageSize: 3})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(h)
			defer srv.Close()
			driveConsole(t, browser.NewPage(t), srv.URL+"/", sc, artifacts(t, backend.name), hostileRows != nil)
			if _, err := store.GetWorkflow(context.Background(), sc, "wf-03"); contract.CodeOf(err) != contract.NotFound {
				t.Errorf("wf-03 after its delete: %v, want NotFound", err)
			}
		})
	}
}

func openPostgres(t *testing.T) (*durable.Store, func(t *testing.T)) {
	srv := pgtest.Require(t)
	schema := srv.Schema(t)
	store, err := durable.Open(context.Background(), srv.DSN()+"&schema="+schema)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	// Rows written around the Store's validation, as a bug or a hand-made
	// INSERT could leave them: an id that is markup, and a key whose stored
	// outcome cannot be decoded (a corrupt record).
	return store, func(t *testing.T) {
		err := srv.Exec(context.Background(), `
INSERT INTO "`+schema+`".workflows (scope, id, status, revision, snapshot, created_at, updated_at)
VALUES ('acme', '<img src=x onerror=window.__pwned=1>', 'running', 1, 'x', now(), now());
INSERT INTO "`+schema+`".idempotency_keys (scope, key, fingerprint, state, token, lease_until, created_at)
VALUES ('acme', '<script>window.__pwned=1</script>', 'f', 'claimed', 't', now() + interval '1 hour', now());
INSERT INTO "`+schema+`".idempotency_keys (scope, key, fingerprint, state, token, created_at, completed_at, expires_at, forget_at, outcome_code, outcome_header, outcome_body)
VALUES ('broken', 'key-corrupt', 'f', 'completed', 't', now(), now(), now() + interval '1 hour', now() + interval '2 hours', 200, '\xdeadbeef', 'b')`)
		if err != nil {
			t.Fatal(err)
		}
	}
}

func openSQLite(t *testing.T) (*durable.Store, func(t *testing.T)) {
	store, err := durable.Open(context.Background(), "sqlite://"+filepath.Join(t.TempDir(), "console.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	return store, nil
}

// driveConsole walks the console at base as an operator would.
func driveConsole(t *testing.T, p *headless.Page, base, sc, shots string, hostileRows bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	// safe checks that nothing a record holds ran as script on the page.
	safe := func(what string) {
		t.Helper()
		var pwned any
		must(p.Eval(ctx, `window.__pwned === undefined ? null : window.__pwned`, &pwned))
		if pwned != nil {
			t.Errorf("%s: a record's contents ran as script", what)
		}
		if d := p.Dialogs(); len(d) > 0 {
			t.Errorf("%s: dialogs opened: %q", what, d)
		}
		html, err := p.HTML(ctx)
		must(err)
		if strings.Contains(html, "<script") || strings.Contains(html, "<img") {
			t.Errorf("%s: markup from a record is in the DOM", what)
		}
	}
	// result returns the text of the page's #result, or fails with what the
	// page says instead.
	result := func(what string) string {
		t.Helper()
		text, err := p.Text(ctx, "#result")
		if err != nil {
			main, _ := p.Text(ctx, "main")
			t.Fatalf("%s: no result on the page, which says:\n%s", what, main)
		}
		return text
	}
	open := func(name, path string, want ...string) {
		t.Helper()
		must(p.Navigate(ctx, base+path))
		text, err := p.Text(ctx, "main")
		must(err)
		for _, w := range want {
			if !strings.Contains(text, w) {
				t.Errorf("%s (%s): no %q on the page:\n%s", name, path, w, text)
			}
		}
		safe(name)
		must(p.Screenshot(ctx, filepath.Join(shots, name+".png")))
	}
	q := "scope=" + sc
	open("overview", "?"+q, "Oldest running workflows", "wf-00", "claimed (expired)", "Counts over time")
	open("workflows", "workflows?"+q, "wf-", "Next page")
	open("oldest", "oldest?"+q, "wf-00", "least recently updated first")
	open("keys", "keys?"+q+"&limit=20", "key-abandoned", "expired claim", "key-hostile", "key-live")
	open("leases", "leases?"+q, "lease-held", "worker-7", "lease-lapsed", "expired")
	open("workflow", "workflow?"+q+"&id=wf-hostile", "<script>window.__pwned=1</script>", "Download the snapshot")
	open("key", "key?"+q+"&id=key-hostile", "X-Evil", "cut, 10", "Download the body")
	open("lease", "lease?"+q+"&id=lease-held", "worker-7", "<script>")
	if hostileRows {
		// The id that is markup is listed, as text.
		open("workflows-hostile-id", "workflows?"+q+"&limit=2", "<img src=x onerror=window.__pwned=1>")
		open("keys-hostile-key", "keys?"+q+"&limit=2", "<script>window.__pwned=1</script>")
		// A corrupt record fails its list's page, which names it and
		// offers the way out; its own page says so too.
		open("keys-corrupt", "keys?scope=broken", "corrupt", "key-corrupt")
		// The overview of that scope still opens, and says the same in its
		// keys' card.
		open("overview-corrupt", "?scope=broken", "corrupt", "key-corrupt", "Oldest running workflows")
		open("key-corrupt", "key?scope=broken&id=key-corrupt", "cannot be read", "Delete")
		must(p.ClickAndWait(ctx, "#delete"))
		must(p.ClickAndWait(ctx, "#confirm button"))
		if text := result("deleting the corrupt key"); !strings.Contains(text, "Deleted key") {
			t.Errorf("deleting the corrupt key: %q", text)
		}
	}

	// Paging: the next-page link leads on, after the last id shown.
	must(p.Navigate(ctx, base+"workflows?"+q))
	first, err := p.Text(ctx, "#rows tbody")
	must(err)
	must(p.ClickAndWait(ctx, "#next"))
	u, err := p.URL(ctx)
	must(err)
	second, err := p.Text(ctx, "#rows tbody")
	must(err)
	if !strings.Contains(u, "after=") || second == first || second == "" {
		t.Errorf("after following the next-page link: %s\n%s", u, second)
	}
	safe("workflows page 2")
	must(p.Screenshot(ctx, filepath.Join(shots, "workflows-page-2.png")))

	// Cleanup: the dry run first, then the run behind its confirmation.
	open("cleanup", "cleanup?"+q+"&terminal_age=0s", "Cleanup would delete now", "1 workflows")
	must(p.ClickAndWait(ctx, "#confirm button"))
	if text := result("cleanup"); !strings.Contains(text, "deleted 1 workflows") {
		t.Errorf("cleanup result: %q", text)
	}
	must(p.Screenshot(ctx, filepath.Join(shots, "cleanup-done.png")))

	// Delete: from the record's page, through its confirmation.
	must(p.Navigate(ctx, base+"workflow?"+q+"&id=wf-03"))
	must(p.ClickAndWait(ctx, "#delete"))
	text, err := p.Text(ctx, "main")
	must(err)
	if !strings.Contains(text, "cannot be undone") {
		t.Errorf("delete confirmation: %q", text)
	}
	must(p.Screenshot(ctx, filepath.Join(shots, "delete-confirm.png")))
	must(p.ClickAndWait(ctx, "#confirm button"))
	if text := result("delete"); !strings.Contains(text, "Deleted workflow") {
		t.Errorf("delete result: %q", text)
	}
	// The one page that fails on purpose: the list holding the corrupt key.
	probs := slices.DeleteFunc(p.Problems(), func(s string) bool {
		return strings.Contains(s, "status of 500") && strings.Contains(s, "keys?scope=broken")
	})
	if len(probs) > 0 {
		t.Errorf("problems on the pages: %q", probs)
	}
}
