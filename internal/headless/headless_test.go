package headless_test

import (
	"bytes"
	"context"
	"fmt"
	"html"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/durable-go/durable/internal/headless"
)

func site() *httptest.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `<!doctype html><title>home</title><main><h1 id="h">Hello</h1>
<a id="link" href="/second">second</a>
<form method="post" action="/echo"><input id="in" name="v"><button id="send" type="submit">send</button></form>
<button id="ask" onclick="if (confirm('sure?')) location.href='/second'">ask</button></main>`)
	})
	mux.HandleFunc("/second", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `<!doctype html><main id="m">the second page</main>`)
	})
	mux.HandleFunc("POST /echo", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `<!doctype html><main id="m">got %s</main>`, html.EscapeString(r.PostFormValue("v")))
	})
	mux.HandleFunc("/csp", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", "default-src 'none'")
		fmt.Fprint(w, `<!doctype html><main>csp</main><script>window.__ran = 1</script>`)
	})
	return httptest.NewServer(mux)
}

func TestPage(t *testing.T) {
	b := headless.Start(t)
	srv := site()
	defer srv.Close()
	p := b.NewPage(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(p.Navigate(ctx, srv.URL+"/"))
	if s, err := p.Text(ctx, "#h"); err != nil || s != "Hello" {
		t.Errorf("Text = %q, %v", s, err)
	}
	var got struct {
		Title string
		N     int
	}
	must(p.Eval(ctx, `({title: document.title, n: 1 + 2})`, &got))
	if got.Title != "home" || got.N != 3 {
		t.Errorf("Eval = %+v", got)
	}
	if err := p.Eval(ctx, `throw new Error("boom")`, nil); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Errorf("Eval of a throwing script: %v", err)
	}
	if err := p.Click(ctx, "#missing"); err == nil {
		t.Error("Click on a missing element: no error")
	}

	// A dialog answered no: nothing happens, and it is recorded.
	p.SetDialogAnswer(false)
	must(p.Click(ctx, "#ask"))
	deadline := time.Now().Add(5 * time.Second)
	for len(p.Dialogs()) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if d := p.Dialogs(); len(d) != 1 || d[0] != "sure?" {
		t.Fatalf("Dialogs = %q", d)
	}
	if u, _ := p.URL(ctx); strings.HasSuffix(u, "/second") {
		t.Error("a refused confirm navigated")
	}
	// Answered yes: it navigates.
	p.SetDialogAnswer(true)
	must(p.ClickAndWait(ctx, "#ask"))
	if u, _ := p.URL(ctx); !strings.HasSuffix(u, "/second") {
		t.Errorf("after an accepted confirm: %s", u)
	}

	must(p.Navigate(ctx, srv.URL+"/"))
	must(p.ClickAndWait(ctx, "#link"))
	if s, _ := p.Text(ctx, "#m"); s != "the second page" {
		t.Errorf("after following the link: %q", s)
	}
	must(p.Navigate(ctx, srv.URL+"/"))
	must(p.SetValue(ctx, "#in", "<b>x</b>"))
	must(p.ClickAndWait(ctx, "#send"))
	if s, _ := p.Text(ctx, "#m"); s != "got <b>x</b>" {
		t.Errorf("after the form: %q", s)
	}

	shot := filepath.Join(t.TempDir(), "a", "shot.png")
	must(p.Screenshot(ctx, shot))
	if png, err := os.ReadFile(shot); err != nil || !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
		t.Errorf("screenshot: %v, %d bytes", err, len(png))
	}
	if pr := p.Problems(); len(pr) != 0 {
		t.Errorf("problems on clean pages: %q", pr)
	}

	// A page whose policy forbids its inline script: it did not run, and
	// the violation is reported.
	must(p.Navigate(ctx, srv.URL+"/csp"))
	var ran any
	must(p.Eval(ctx, `window.__ran === undefined ? null : window.__ran`, &ran))
	if ran != nil {
		t.Error("an inline script forbidden by the policy ran")
	}
	deadline = time.Now().Add(5 * time.Second)
	for len(p.Problems()) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if pr := p.Problems(); len(pr) == 0 {
		t.Error("no problem reported for the policy violation")
	}

	if err := p.Navigate(ctx, "http://127.0.0.1:1/"); err == nil {
		t.Error("navigating to a closed port: no error")
	}
}
