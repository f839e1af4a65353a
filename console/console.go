// Package console is an operator's web console for a durable Store: what
// an operator wants to see when something is stuck at 3 a.m. — workflows
// by status with their age (oldest first), idempotency keys in flight with
// their claim age and expiry (expired claims flagged), leases with owner,
// token and time left — and the two ways out the CLI has, deleting one
// record and running cleanup after a dry run.
//
// New returns an [http.Handler]. "durable ui" serves it on loopback; a
// service can mount it behind its own authentication:
//
//	h, err := console.New(store, console.Options{})
//	mux.Handle("/ops/durable/", http.StripPrefix("/ops/durable", h))
//
// Every link and form is relative, so the console works under any prefix.
//
// It is plain server-rendered HTML (html/template) and one stylesheet,
// embedded: no CDN, no build step, no JavaScript (confirmations are pages
// of their own). Every page is sent with a Content-Security-Policy that
// allows no script at all, and everything a record holds — snapshots,
// bodies, headers, owners, lease values, even an id written around the
// Store's validation — is escaped, and payloads are truncated, with a
// download of the full bytes.
//
// # Safety
//
//   - Read-only is the default: the zero [Options] shows records and a
//     cleanup dry run, and refuses every action (403). Options.AllowActions
//     turns on delete and cleanup.
//   - Each action is a POST from a confirmation page, carrying a token that
//     only this handler can mint (an HMAC of the action and its record under
//     a random per-handler key, valid for an hour), and a cross-site POST is
//     refused (Origin and Sec-Fetch-Site). A page of another site cannot make
//     the operator's browser delete anything.
//   - Options.Token, when set, is required on every request: as
//     "Authorization: Bearer …", or by signing in on the console's own form,
//     which sets an HttpOnly, SameSite=Strict cookie.
//   - It never shows the DSN or any setting of the Store: it is given a
//     Store, not a DSN.
//
// Counts come from listing: the overview pages through up to
// Options.ScanLimit records of each kind, so that it works on every backend
// at a bounded cost, and says "at least" when it stopped at the bound. The
// counts over time are the overview's own samples (at most one per
// Options.SampleEvery for each scope), kept in memory while the handler
// lives.
package console

import (
	"cmp"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/durable-go/durable"
)

// Options configure a console. The zero value is a read-only console with
// no token, for loopback or for mounting behind a service's own
// authentication.
type Options struct {
	// AllowActions turns on the actions: deleting a record and running
	// cleanup. Off, the console only reads (and counts cleanup candidates).
	AllowActions bool
	// Token, when not empty, is required from every request (a bearer token,
	// or the console's sign-in form). "durable ui" requires one to listen
	// beyond loopback.
	Token string
	// PageSize is the default page of the lists, 1 to durable.MaxListLimit
	// (default 50). A request's limit parameter overrides it within the
	// same bounds, as the CLI's --limit does.
	PageSize int
	// ScanLimit bounds the records of each kind that the overview counts and
	// that the oldest-first view reads (default 5000, at most 100000).
	ScanLimit int
	// SampleEvery is the least time between two samples of a scope's counts
	// (default 10 s). The console keeps the last 60 samples of each of the
	// last 20 scopes viewed.
	SampleEvery time.Duration
	// Now is the console's clock for ages and time left (default
	// time.Now). The records' times come from the store's clock.
	Now func() time.Time
}

// Limits of Options.
const (
	DefaultPageSize    = 50
	DefaultScanLimit   = 5000
	MaxScanLimit       = 100000
	DefaultSampleEvery = 10 * time.Second
)

// Handler is the console. Create it with New.
type Handler struct {
	store  *durable.Store
	opts   Options
	key    []byte // signs action tokens and the sign-in cookie
	mux    *http.ServeMux
	tmpl   *template.Template
	static http.Handler

	mu      sync.Mutex
	samples map[durable.Scope]*history
	scopes  []durable.Scope // the scopes of samples, least recently viewed first
}

//go:embed templates/*.html static/*
var assets embed.FS

// New returns a console for store. It returns an error for Options out of
// bounds.
func New(store *durable.Store, opts Options) (*Handler, error) {
	if store == nil {
		return nil, errors.New("console: no store")
	}
	switch {
	case opts.PageSize < 0 || opts.PageSize > durable.MaxListLimit:
		return nil, fmt.Errorf("console: PageSize must be within 1 and %d", durable.MaxListLimit)
	case opts.ScanLimit < 0 || opts.ScanLimit > MaxScanLimit:
		return nil, fmt.Errorf("console: ScanLimit must be within 1 and %d", MaxScanLimit)
	case opts.SampleEvery < 0:
		return nil, errors.New("console: SampleEvery must not be negative")
	}
	opts.PageSize = cmp.Or(opts.PageSize, DefaultPageSize)
	opts.ScanLimit = cmp.Or(opts.ScanLimit, DefaultScanLimit)
	opts.SampleEvery = cmp.Or(opts.SampleEvery, DefaultSampleEvery)
	if opts.Now == nil {
		opts.Now = time.Now
	}
	h := &Handler{store: store, opts: opts, key: make([]byte, 32), samples: map[durable.Scope]*history{}}
	if _, err := rand.Read(h.key); err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	t, err := template.New("").Funcs(h.funcs()).ParseFS(assets, "templates/*.html")
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	h.tmpl = t
	static, _ := fs.Sub(assets, "static")
	h.static = http.StripPrefix("/static/", http.FileServerFS(static))

	m := http.NewServeMux()
	m.HandleFunc("GET /{$}", h.overview)
	m.HandleFunc("GET /workflows", h.workflows)
	m.HandleFunc("GET /oldest", h.oldest)
	m.HandleFunc("GET /keys", h.keys)
	m.HandleFunc("GET /leases", h.leases)
	m.HandleFunc("GET /workflow", h.workflow)
	m.HandleFunc("GET /key", h.key_)
	m.HandleFunc("GET /lease", h.lease)
	m.HandleFunc("GET /find", h.find)
	m.HandleFunc("GET /download", h.download)
	m.HandleFunc("GET /delete", h.confirmDelete)
	m.HandleFunc("POST /delete", h.doDelete)
	m.HandleFunc("GET /cleanup", h.cleanupDryRun)
	m.HandleFunc("POST /cleanup", h.doCleanup)
	m.HandleFunc("GET /login", h.loginForm)
	m.HandleFunc("POST /login", h.login)
	m.Handle("GET /static/", h.static)
	m.HandleFunc("GET /favicon.ico", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		h.fail(w, r, http.StatusNotFound, "no such page")
	})
	h.mux = m
	return h, nil
}

// ServeHTTP implements http.Handler: security headers on every response,
// the token check, then the page.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "same-origin") // no-referrer would make a browser send "Origin: null" with the console's own forms
	hd.Set("Cache-Control", "no-store")
	if h.opts.Token != "" && !h.signedIn(r) && r.URL.Path != "/login" && !strings.HasPrefix(r.URL.Path, "/static/") {
		if r.Method == http.MethodGet {
			seeOther(w, relative(r, "login"))
			return
		}
		h.fail(w, r, http.StatusUnauthorized, "sign in first: this console needs its token")
		return
	}
	h.mux.ServeHTTP(w, r)
}

// relative returns the link to page (a page at the console's top level)
// from the page r asked for: pages are one level deep, so "page" works
// from every page, and "./" is the overview.
func relative(r *http.Request, page string) string {
	if strings.Count(r.URL.Path, "/") > 1 {
		return strings.Repeat("../", strings.Count(r.URL.Path, "/")-1) + page
	}
	return page
}

// cookieName is the sign-in cookie's name.
const cookieName = "durable_console"

// session is the sign-in cookie's value: a MAC of the token under the
// handler's key, so that it is worthless to another console and the token
// itself never sits in a cookie.
func (h *Handler) session() string {
	m := hmac.New(sha256.New, h.key)
	m.Write([]byte("session\x00" + h.opts.Token))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func (h *Handler) signedIn(r *http.Request) bool {
	if auth, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		return subtle.ConstantTimeCompare([]byte(auth), []byte(h.opts.Token)) == 1
	}
	c, err := r.Cookie(cookieName)
	return err == nil && subtle.ConstantTimeCompare([]byte(c.Value), []byte(h.session())) == 1
}

func (h *Handler) loginForm(w http.ResponseWriter, r *http.Request) {
	if h.opts.Token == "" {
		seeOther(w, relative(r, "./"))
		return
	}
	h.render(w, r, http.StatusOK, "login", page{Title: "Sign in"})
}

func (h *Handler) login(w http.ResponseWriter, r *http.Request) {
	if h.opts.Token == "" {
		seeOther(w, relative(r, "./"))
		return
	}
	if !sameOrigin(r) {
		h.fail(w, r, http.StatusForbidden, "a sign-in from another site is refused")
		return
	}
	if subtle.ConstantTimeCompare([]byte(r.PostFormValue("token")), []byte(h.opts.Token)) != 1 {
		h.render(w, r, http.StatusUnauthorized, "login", page{Title: "Sign in", Error: "wrong token"})
		return
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: h.session(), HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	seeOther(w, relative(r, "./"))
}

// actionTTL is how long a confirmation page's form stays valid.
const actionTTL = time.Hour

// actionToken returns the token a confirmation page puts in its form for
// the action on fields: "expiry.mac".
func (h *Handler) actionToken(action string, fields ...string) string {
	exp := strconv.FormatInt(h.opts.Now().Add(actionTTL).Unix(), 10)
	return exp + "." + h.mac(exp, action, fields)
}

func (h *Handler) mac(exp, action string, fields []string) string {
	m := hmac.New(sha256.New, h.key)
	m.Write([]byte("action\x00" + exp + "\x00" + action))
	for _, f := range fields {
		m.Write([]byte("\x00" + strconv.Itoa(len(f)) + ":" + f))
	}
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// checkAction verifies a POSTed action: actions allowed, the request from
// this console's own pages (same origin), and its token minted for this
// very action and record, not expired.
func (h *Handler) checkAction(r *http.Request, action string, fields ...string) (int, string) {
	if !h.opts.AllowActions {
		return http.StatusForbidden, "this console is read-only (start it with actions allowed to " + action + ")"
	}
	if !sameOrigin(r) {
		return http.StatusForbidden, "a request from another site is refused"
	}
	exp, sig, ok := strings.Cut(r.PostFormValue("csrf"), ".")
	t, err := strconv.ParseInt(exp, 10, 64)
	if !ok || err != nil || subtle.ConstantTimeCompare([]byte(sig), []byte(h.mac(exp, action, fields))) != 1 {
		return http.StatusForbidden, "the form's token is missing or wrong: open the confirmation page again"
	}
	if h.opts.Now().Unix() > t {
		return http.StatusForbidden, "the confirmation page expired: open it again"
	}
	return 0, ""
}

// sameOrigin reports whether r may come from this console's own pages: a
// browser's Sec-Fetch-Site is same-origin (or absent), and its Origin, when
// sent, names the host r was sent to.
func sameOrigin(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
	default:
		return false
	}
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	return err == nil && u.Host == r.Host
}

// seeOther redirects to the relative URL to, as is: the browser resolves
// it against the page it asked for, so it stays under whatever prefix the
// console is mounted at. (http.Redirect would resolve it against the
// request's path, from which http.StripPrefix removed the prefix.)
func seeOther(w http.ResponseWriter, to string) {
	w.Header().Set("Location", to)
	w.WriteHeader(http.StatusSeeOther)
}
