// Package headless drives a real headless Chromium from Go tests, through
// the Chrome DevTools Protocol on a pipe (--remote-debugging-pipe: the
// browser reads commands from its fd 3 and writes replies and events to
// its fd 4, each a JSON object ended by a NUL byte). No websocket and no
// dependency: what the console's browser test needs, and no more —
// navigate, click, fill a field, evaluate, read text, screenshot, and
// record dialogs and the problems the page reports.
package headless

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// commandTimeout bounds every command, whatever the caller's context, so
// that a test never hangs on a browser that stopped answering.
const commandTimeout = 30 * time.Second

// Browser is one Chromium process.
type Browser struct {
	cmd  *exec.Cmd
	w    *os.File // its fd 3
	wmu  sync.Mutex
	mu   sync.Mutex
	next int64
	wait map[int64]chan reply
	subs map[string][]func(json.RawMessage) // by sessionId + " " + method
	dead chan struct{}                      // closed when the read loop ends
	why  error                              // why it ended, once dead is closed
}

type reply struct {
	Result json.RawMessage
	Err    error
}

type message struct {
	ID        int64                     `json:"id,omitempty"`
	Method    string                    `json:"method,omitempty"`
	Params    json.RawMessage           `json:"params,omitempty"`
	Result    json.RawMessage           `json:"result,omitempty"`
	Error     *struct{ Message string } `json:"error,omitempty"`
	SessionID string                    `json:"sessionId,omitempty"`
}

// find returns the browser to run: $DURABLE_CHROMIUM, or the first of
// chromium, chromium-browser and google-chrome on PATH.
func find() (string, error) {
	if p := os.Getenv("DURABLE_CHROMIUM"); p != "" {
		return p, nil
	}
	for _, n := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(n); err == nil {
			return p, nil
		}
	}
	return "", errors.New("headless: no Chromium found (apt-get install chromium, or set DURABLE_CHROMIUM)")
}

// Start starts a headless Chromium for t and closes it when t ends. Without
// a browser it skips t, or fails it when DURABLE_REQUIRE_BROWSER=1.
func Start(t testing.TB) *Browser {
	t.Helper()
	bin, err := find()
	if err != nil {
		if os.Getenv("DURABLE_REQUIRE_BROWSER") == "1" {
			t.Fatalf("%v (DURABLE_REQUIRE_BROWSER=1)", err)
		}
		t.Skip(err)
	}
	args := []string{"--headless=new", "--disable-gpu", "--no-first-run", "--no-default-browser-check",
		"--disable-extensions", "--disable-dev-shm-usage", "--disable-background-networking", "--remote-debugging-pipe",
		"--user-data-dir=" + t.TempDir(), "--window-size=1280,900", "--hide-scrollbars"}
	if os.Geteuid() == 0 {
		args = append(args, "--no-sandbox") // Chromium refuses its sandbox as root
	}
	cmdR, cmdW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	evR, evW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, append(args, "about:blank")...)
	cmd.ExtraFiles = []*os.File{cmdR, evW} // fd 3, fd 4
	var stderr strings.Builder
	cmd.Stderr = &limited{w: &stderr, n: 8 << 10}
	if err := cmd.Start(); err != nil {
		t.Fatalf("headless: starting %s: %v", bin, err)
	}
	cmdR.Close()
	evW.Close()
	b := &Browser{cmd: cmd, w: cmdW, wait: map[int64]chan reply{}, subs: map[string][]func(json.RawMessage){}, dead: make(chan struct{})}
	go b.read(evR)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, _ = b.call(ctx, "", "Browser.close", nil)
		cancel()
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		cmdW.Close()
		if t.Failed() && stderr.Len() > 0 {
			t.Logf("headless: the browser's stderr:\n%s", stderr.String())
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	if _, err := b.call(ctx, "", "Browser.getVersion", nil); err != nil {
		t.Fatalf("headless: the browser does not answer: %v\n%s", err, stderr.String())
	}
	return b
}

// limited keeps the first n bytes written to it.
type limited struct {
	mu sync.Mutex
	w  *strings.Builder
	n  int
}

func (l *limited) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if room := l.n - l.w.Len(); room > 0 {
		l.w.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// read dispatches what the browser writes until its pipe ends; then every
// pending and later call fails at once.
func (b *Browser) read(r *os.File) {
	br := bufio.NewReaderSize(r, 1<<20)
	var err error
	for {
		var raw []byte
		raw, err = br.ReadBytes(0)
		if err != nil {
			break
		}
		var m message
		if json.Unmarshal(raw[:len(raw)-1], &m) != nil {
			continue
		}
		b.mu.Lock()
		if m.ID != 0 {
			ch := b.wait[m.ID]
			delete(b.wait, m.ID)
			b.mu.Unlock()
			if ch != nil {
				rep := reply{Result: m.Result}
				if m.Error != nil {
					rep.Err = errors.New(m.Error.Message)
				}
				ch <- rep
			}
			continue
		}
		subs := b.subs[m.SessionID+" "+m.Method]
		b.mu.Unlock()
		for _, f := range subs {
			f(m.Params)
		}
	}
	b.mu.Lock()
	b.why = fmt.Errorf("headless: the browser's pipe ended (%v): the browser exited", err)
	for id, ch := range b.wait {
		ch <- reply{Err: b.why}
		delete(b.wait, id)
	}
	b.mu.Unlock()
	close(b.dead)
}

// on calls f (on the read loop: it must not block) for every event method
// of session.
func (b *Browser) on(session, method string, f func(json.RawMessage)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.subs[session+" "+method] = append(b.subs[session+" "+method], f)
}

// call sends one command and waits for its reply.
func (b *Browser) call(ctx context.Context, session, method string, params any) (json.RawMessage, error) {
	ctx, cancel := context.WithTimeout(ctx, commandTimeout)
	defer cancel()
	ch := make(chan reply, 1)
	b.mu.Lock()
	select {
	case <-b.dead:
		b.mu.Unlock()
		return nil, b.why
	default:
	}
	b.next++
	id := b.next
	b.wait[id] = ch
	b.mu.Unlock()
	m := map[string]any{"id": id, "method": method}
	if params != nil {
		m["params"] = params
	}
	if session != "" {
		m["sessionId"] = session
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	b.wmu.Lock()
	_, err = b.w.Write(append(raw, 0))
	b.wmu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("headless: %s: %w", method, err)
	}
	select {
	case rep := <-ch:
		if rep.Err != nil {
			return nil, fmt.Errorf("headless: %s: %w", method, rep.Err)
		}
		return rep.Result, nil
	case <-ctx.Done():
		b.mu.Lock()
		delete(b.wait, id)
		b.mu.Unlock()
		return nil, fmt.Errorf("headless: %s: %w", method, ctx.Err())
	}
}

// Page is one tab.
type Page struct {
	b       *Browser
	session string

	mu       sync.Mutex
	accept   bool
	dialogs  []string
	problems []string
	loads    chan struct{} // a token per load event of the main frame
}

// NewPage opens a tab.
func (b *Browser) NewPage(t testing.TB) *Page {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	var target struct{ TargetID string }
	if err := b.callInto(ctx, "", "Target.createTarget", map[string]any{"url": "about:blank"}, &target); err != nil {
		t.Fatal(err)
	}
	var att struct{ SessionID string }
	if err := b.callInto(ctx, "", "Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true}, &att); err != nil {
		t.Fatal(err)
	}
	p := &Page{b: b, session: att.SessionID, accept: true, loads: make(chan struct{}, 16)}
	b.on(p.session, "Page.loadEventFired", func(json.RawMessage) {
		select {
		case p.loads <- struct{}{}:
		default:
		}
	})
	b.on(p.session, "Page.javascriptDialogOpening", func(raw json.RawMessage) {
		var d struct{ Message string }
		_ = json.Unmarshal(raw, &d)
		p.mu.Lock()
		p.dialogs = append(p.dialogs, d.Message)
		accept := p.accept
		p.mu.Unlock()
		go func() { // not on the read loop: the reply comes through it
			ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
			defer cancel()
			_, _ = b.call(ctx, p.session, "Page.handleJavaScriptDialog", map[string]any{"accept": accept})
		}()
	})
	b.on(p.session, "Runtime.exceptionThrown", func(raw json.RawMessage) {
		var e struct {
			ExceptionDetails struct {
				Text      string
				Exception struct{ Description string }
			}
		}
		_ = json.Unmarshal(raw, &e)
		p.problem("exception: " + e.ExceptionDetails.Text + " " + e.ExceptionDetails.Exception.Description)
	})
	b.on(p.session, "Runtime.consoleAPICalled", func(raw json.RawMessage) {
		var c struct {
			Type string
			Args []struct{ Value any }
		}
		_ = json.Unmarshal(raw, &c)
		if c.Type == "error" {
			p.problem(fmt.Sprint("console error: ", c.Args))
		}
	})
	b.on(p.session, "Log.entryAdded", func(raw json.RawMessage) {
		var l struct {
			Entry struct{ Source, Level, Text, URL string }
		}
		_ = json.Unmarshal(raw, &l)
		if l.Entry.Level == "error" {
			p.problem(l.Entry.Source + ": " + l.Entry.Text + " " + l.Entry.URL)
		}
	})
	for _, domain := range []string{"Page", "Runtime", "Log"} {
		if _, err := b.call(ctx, p.session, domain+".enable", nil); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

func (b *Browser) callInto(ctx context.Context, session, method string, params, out any) error {
	raw, err := b.call(ctx, session, method, params)
	if err != nil {
		return err
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(raw, out)
}

func (p *Page) problem(s string) {
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	p.mu.Lock()
	p.problems = append(p.problems, s)
	p.mu.Unlock()
}

// SetDialogAnswer sets how later JavaScript dialogs are answered (all are
// accepted by default). Every dialog is recorded (Dialogs).
func (p *Page) SetDialogAnswer(accept bool) {
	p.mu.Lock()
	p.accept = accept
	p.mu.Unlock()
}

// Dialogs returns the messages of every dialog opened so far, in order.
func (p *Page) Dialogs() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.dialogs...)
}

// Problems returns what the page reported as going wrong so far: uncaught
// exceptions, console errors, and the browser's error log entries (where
// Content-Security-Policy violations and failed loads appear).
func (p *Page) Problems() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.problems...)
}

// drainLoads forgets load events already seen, before an action whose own
// load is awaited.
func (p *Page) drainLoads() {
	for {
		select {
		case <-p.loads:
		default:
			return
		}
	}
}

func (p *Page) waitLoad(ctx context.Context, what string) error {
	ctx, cancel := context.WithTimeout(ctx, commandTimeout)
	defer cancel()
	select {
	case <-p.loads:
		return nil
	case <-p.b.dead:
		return p.b.why
	case <-ctx.Done():
		return fmt.Errorf("headless: %s: no page loaded: %w", what, ctx.Err())
	}
}

// Navigate loads url and waits for its load event. An HTTP error status is
// a page like any other; a network error is an error.
func (p *Page) Navigate(ctx context.Context, url string) error {
	p.drainLoads()
	var nav struct{ ErrorText string }
	if err := p.b.callInto(ctx, p.session, "Page.navigate", map[string]any{"url": url}, &nav); err != nil {
		return err
	}
	if nav.ErrorText != "" {
		return fmt.Errorf("headless: navigating to %s: %s", url, nav.ErrorText)
	}
	return p.waitLoad(ctx, "navigating to "+url)
}

// Eval evaluates js in the page (awaiting a promise) and unmarshals its
// value into out, which may be nil. A thrown exception is an error.
func (p *Page) Eval(ctx context.Context, js string, out any) error {
	var res struct {
		Result struct {
			Value json.RawMessage
		}
		ExceptionDetails *struct {
			Text      string
			Exception struct{ Description string }
		}
	}
	if err := p.b.callInto(ctx, p.session, "Runtime.evaluate", map[string]any{"expression": js, "returnByValue": true, "awaitPromise": true}, &res); err != nil {
		return err
	}
	if e := res.ExceptionDetails; e != nil {
		d := e.Exception.Description
		if d == "" {
			d = e.Text
		}
		if len(d) > 300 {
			d = d[:300] + "…"
		}
		return fmt.Errorf("headless: evaluating script: %s", d)
	}
	if out == nil || len(res.Result.Value) == 0 {
		return nil
	}
	return json.Unmarshal(res.Result.Value, out)
}

// element is the script that finds selector's first match or throws.
func element(selector string) string {
	q, _ := json.Marshal(selector)
	return `(() => { const e = document.querySelector(` + string(q) + `); if (!e) throw new Error("no element matches " + ` + string(q) + `); return e; })()`
}

// Click clicks the first element that matches selector.
func (p *Page) Click(ctx context.Context, selector string) error {
	return p.Eval(ctx, element(selector)+`.click()`, nil)
}

// ClickAndWait clicks the first element that matches selector and waits
// for the page the click loads (a link followed, a form submitted).
func (p *Page) ClickAndWait(ctx context.Context, selector string) error {
	p.drainLoads()
	if err := p.Click(ctx, selector); err != nil {
		return err
	}
	return p.waitLoad(ctx, "clicking "+selector)
}

// SetValue sets the value of the first input that matches selector, as
// typing would (input and change events).
func (p *Page) SetValue(ctx context.Context, selector, value string) error {
	v, _ := json.Marshal(value)
	return p.Eval(ctx, `(() => { const e = `+element(selector)+`; e.value = `+string(v)+`;
e.dispatchEvent(new Event("input", {bubbles: true})); e.dispatchEvent(new Event("change", {bubbles: true})); })()`, nil)
}

// URL returns the page's address.
func (p *Page) URL(ctx context.Context) (string, error) {
	var u string
	err := p.Eval(ctx, `location.href`, &u)
	return u, err
}

// Text returns the rendered text (innerText) of selector's first match.
func (p *Page) Text(ctx context.Context, selector string) (string, error) {
	var s string
	err := p.Eval(ctx, element(selector)+`.innerText`, &s)
	return s, err
}

// HTML returns the document's markup as the browser holds it.
func (p *Page) HTML(ctx context.Context) (string, error) {
	var s string
	err := p.Eval(ctx, `document.documentElement.outerHTML`, &s)
	return s, err
}

// Screenshot writes a PNG of the whole page (beyond the window) to path,
// creating its directory.
func (p *Page) Screenshot(ctx context.Context, path string) error {
	var shot struct{ Data string }
	if err := p.b.callInto(ctx, p.session, "Page.captureScreenshot", map[string]any{"format": "png", "captureBeyondViewport": true}, &shot); err != nil {
		return err
	}
	png, err := base64.StdEncoding.DecodeString(shot.Data)
	if err != nil {
		return fmt.Errorf("headless: screenshot: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, png, 0o644)
}
