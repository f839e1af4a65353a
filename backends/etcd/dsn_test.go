package etcd

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/contract"
)

func TestParseDSN(t *testing.T) {
	cfg, err := ParseDSN("etcd://alice:s%40cret@h1:2379,h2:2380/app/one?tolerance=2s&dial_timeout=3s")
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		Endpoints: []string{"h1:2379", "h2:2380"}, Prefix: "app/one", Tolerance: 2 * time.Second,
		DialTimeout: 3 * time.Second, Username: "alice", Password: "s@cret",
	}
	if !slices.Equal(cfg.Endpoints, want.Endpoints) || cfg.Prefix != want.Prefix || cfg.Tolerance != want.Tolerance ||
		cfg.DialTimeout != want.DialTimeout || cfg.Username != want.Username || cfg.Password != want.Password || cfg.TLS {
		t.Errorf("ParseDSN = %+v, want %+v", cfg, want)
	}
	cfg, err = ParseDSN("ETCD://[::1]:2379?username=bob&password=pw&ca_file=/x/ca.pem&server_name=etcd.local")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Prefix != DefaultPrefix || cfg.Tolerance != DefaultTolerance || cfg.DialTimeout != DefaultDialTimeout ||
		!cfg.TLS || cfg.CAFile != "/x/ca.pem" || cfg.ServerName != "etcd.local" || cfg.Username != "bob" || cfg.Password != "pw" ||
		!slices.Equal(cfg.Endpoints, []string{"[::1]:2379"}) {
		t.Errorf("ParseDSN defaults = %+v", cfg)
	}

	const secret = "Pw7Secret"
	for _, dsn := range []string{
		"postgres://h:1/x",
		"etcd://",
		"etcd://u:" + secret + "@/p",
		"etcd://u:" + secret + "@h1/p",
		"etcd://u:" + secret + "@h1:99999/p",
		"etcd://u:" + secret + "@h1:2379/p?bogus=1",
		"etcd://u:" + secret + "@h1:2379/p?tolerance=1500ms",
		"etcd://u:" + secret + "@h1:2379/p?tolerance=-1s",
		"etcd://u:" + secret + "@h1:2379/p?dial_timeout=0s",
		"etcd://u:" + secret + "@h1:2379/p?tls=maybe",
		"etcd://u:" + secret + "@h1:2379/p?cert_file=/a",
		"etcd://h1:2379/p?password=" + secret,
		"etcd://u:" + secret + "@h1:2379/bad%20prefix",
		"etcd://u:" + secret + "@h1:2379/p#frag",
	} {
		_, err := ParseDSN(dsn)
		if contract.CodeOf(err) != contract.InvalidArgument {
			t.Errorf("ParseDSN(%q) = %v, want InvalidArgument", dsn, err)
			continue
		}
		if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "h1") {
			t.Errorf("ParseDSN(%q) error echoes the DSN: %v", dsn, err)
		}
		// Through the registry and Open too.
		_, err = durable.Open(t.Context(), dsn)
		if err != nil && strings.Contains(err.Error(), secret) {
			t.Errorf("durable.Open(%q) error echoes the password: %v", dsn, err)
		}
		_, err = Open(t.Context(), dsn)
		if err != nil && strings.Contains(err.Error(), secret) {
			t.Errorf("Open(%q) error echoes the password: %v", dsn, err)
		}
	}
	if _, err := Open(t.Context(), "postgres://h:1/x"); contract.CodeOf(err) != contract.InvalidArgument {
		t.Errorf("Open(postgres DSN) = %v, want InvalidArgument", err)
	}
	if _, err := NewBackend(nil, Options{}); contract.CodeOf(err) != contract.InvalidArgument {
		t.Errorf("NewBackend(nil) = %v", err)
	}
	if _, err := New(nil, Options{}); contract.CodeOf(err) != contract.InvalidArgument {
		t.Errorf("New(nil) = %v", err)
	}
}

// TestOpen opens stores through the registry against a real cluster: the
// happy path, an endpoint where nothing listens, a missing CA file, and
// authentication (wrong and right password).
func TestOpen(t *testing.T) {
	c := startCluster(t, 1)
	ctx := t.Context()
	s, err := durable.Open(ctx, c.dsn("open", ""))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if got := s.ClockTolerance(); got != DefaultTolerance {
		t.Errorf("ClockTolerance = %v, want %v", got, DefaultTolerance)
	}
	if _, err := s.CreateWorkflow(ctx, contract.Workflow{ID: "wf-1"}); err != nil {
		t.Errorf("CreateWorkflow: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}

	// Open is durable.Open for an etcd DSN: a Store, and its backend
	// through As, closed with the Store.
	s, err = Open(ctx, c.dsn("open", ""), durable.WithMaxWait(durable.DefaultMaxWait))
	if err != nil {
		t.Fatalf("etcd.Open: %v", err)
	}
	if _, err := s.GetWorkflow(ctx, "", "bad id!"); !errors.Is(err, durable.ErrInvalidArgument) {
		t.Errorf("GetWorkflow(bad id) = %v, want InvalidArgument from the Store", err)
	}
	var ob *Backend
	if !s.As(&ob) {
		t.Fatal("Store.As does not reach the *etcd.Backend")
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if _, err := ob.GetWorkflow(ctx, "", "wf-1"); contract.CodeOf(err) != contract.Closed {
		t.Errorf("the backend after Store.Close: %v, want Closed", err)
	}

	// New returns a Store on the caller's client, which stays open.
	own := c.client(t)
	s, err = New(own, Options{Prefix: "open"})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if w, err := s.GetWorkflow(ctx, "", "wf-1"); err != nil || w.ID != "wf-1" {
		t.Errorf("GetWorkflow through New = %+v, %v", w, err)
	}
	if !s.As(&ob) || ob.Client() != own {
		t.Fatal("Store.As does not reach the *etcd.Backend on the caller's client")
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if _, err := own.Get(ctx, "open/"); err != nil {
		t.Errorf("the caller's client was closed with the Store: %v", err)
	}
	if _, err := New(own, Options{Prefix: "/bad"}); contract.CodeOf(err) != contract.InvalidArgument {
		t.Errorf("New with a bad prefix = %v, want InvalidArgument", err)
	}

	start := time.Now()
	_, err = durable.Open(ctx, "etcd://127.0.0.1:1/x?dial_timeout=500ms")
	if contract.CodeOf(err) != contract.Unavailable {
		t.Errorf("Open with nothing listening = %v, want Unavailable", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Open with nothing listening took %v, want about dial_timeout", d)
	}
	_, err = durable.Open(ctx, c.dsn("open", "ca_file="+filepath.Join(t.TempDir(), "missing.pem")))
	if contract.CodeOf(err) != contract.Misconfigured {
		t.Errorf("Open with a missing ca_file = %v, want Misconfigured", err)
	}

	// Authentication.
	cli := c.client(t)
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	const pw = "Right7Pass"
	for _, f := range []func() error{
		func() error { _, err := cli.UserAdd(actx, "root", pw); return err },
		func() error { _, err := cli.UserGrantRole(actx, "root", "root"); return err },
		func() error { _, err := cli.AuthEnable(actx); return err },
	} {
		if err := f(); err != nil {
			t.Fatalf("enabling auth: %v", err)
		}
	}
	_, err = durable.Open(ctx, strings.Replace(c.dsn("open", ""), "etcd://", "etcd://root:Wrong7Pass@", 1))
	if contract.CodeOf(err) != contract.PermissionDenied {
		t.Errorf("Open with a wrong password = %v, want PermissionDenied", err)
	} else if strings.Contains(err.Error(), "Wrong7Pass") {
		t.Errorf("error echoes the password: %v", err)
	}
	var ce *contract.Error
	if errors.As(err, &ce) && contract.Retryable(err) {
		t.Errorf("PermissionDenied is retryable")
	}
	s, err = durable.Open(ctx, c.dsn("open", "username=root&password="+pw))
	if err != nil {
		t.Fatalf("Open with the right password: %v", err)
	}
	defer s.Close()
	if _, err := s.GetWorkflow(ctx, "", "wf-1"); err != nil {
		t.Errorf("GetWorkflow after auth: %v", err)
	}
}
