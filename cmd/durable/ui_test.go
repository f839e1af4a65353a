package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/durable-go/durable/internal/syncbuf"
)

func TestUIRefusesUnsafeListenAddresses(t *testing.T) {
	const dsn = "memory://cli-ui-refuses"
	t.Setenv(uiTokenEnv, "")
	for _, tc := range []struct {
		args []string
		env  string
		want string
	}{
		{[]string{"--listen", "0.0.0.0:0"}, "", "not a loopback address"},
		{[]string{"--listen", ":0"}, "", "not a loopback address"},
		{[]string{"--listen", "0.0.0.0:0", "--allow-remote"}, "", "needs --allow-remote and a token"},
		{[]string{"--listen", "0.0.0.0:0"}, "a-token-long-enough-1234", "needs --allow-remote"},
		{[]string{"--listen", "127.0.0.1:0"}, "short", "at least 16"},
		{[]string{"--listen", "nonsense"}, "", "--listen"},
		{[]string{"--page-size", "0"}, "", "--page-size"},
		{[]string{"--scan-limit", "0"}, "", "--scan-limit"},
		{[]string{"--token-file", "/nonexistent/token"}, "", "--token-file"},
	} {
		t.Setenv(uiTokenEnv, tc.env)
		code, _, stderr := invoke(t, append([]string{"ui", "--dsn", dsn}, tc.args...)...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("ui %v: exit %d, %q; want %d and %q", tc.args, code, stderr, exitUsage, tc.want)
		}
		if tc.env != "" && strings.Contains(stderr, tc.env) {
			t.Errorf("ui %v: the token is in the message", tc.args)
		}
	}
}

// serveUI runs "durable ui" with args until the test ends and returns the
// URL it serves on.
func serveUI(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var out, errb syncbuf.Buffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, append([]string{"ui"}, args...), &out, &errb) }()
	t.Cleanup(func() {
		cancel()
		select {
		case code := <-done:
			if code != 0 {
				t.Errorf("durable ui exited %d after Ctrl-C: %s", code, errb.String())
			}
		case <-time.After(10 * time.Second):
			t.Error("durable ui did not stop within 10 s of Ctrl-C")
		}
	})
	addr := regexp.MustCompile(`serving on (http://\S+/)`)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if m := addr.FindStringSubmatch(out.String()); m != nil {
			return m[1]
		}
		select {
		case code := <-done:
			t.Fatalf("durable ui exited %d: %s", code, errb.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("durable ui printed no address: %q %q", out.String(), errb.String())
	return ""
}

func fetch(t *testing.T, req *http.Request) (int, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestUIServesOnLoopback(t *testing.T) {
	t.Setenv(uiTokenEnv, "")
	base := serveUI(t, "--dsn", "memory://cli-ui-loopback", "--listen", "127.0.0.1:0")
	req, _ := http.NewRequest(http.MethodGet, base, nil)
	if code, body := fetch(t, req); code != 200 || !strings.Contains(body, "read-only") {
		t.Fatalf("GET %s: %d", base, code)
	}
	// DNS rebinding: a name that resolves to loopback is not a loopback host.
	req, _ = http.NewRequest(http.MethodGet, base, nil)
	req.Host = "attacker.example"
	if code, _ := fetch(t, req); code != http.StatusMisdirectedRequest {
		t.Errorf("Host attacker.example: %d, want 421", code)
	}
	req, _ = http.NewRequest(http.MethodGet, base, nil)
	req.Host = "localhost"
	if code, _ := fetch(t, req); code != 200 {
		t.Errorf("Host localhost: %d", code)
	}
}

func TestUIBeyondLoopbackNeedsTheToken(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("a-token-long-enough-1234\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(uiTokenEnv, "")
	base := serveUI(t, "--dsn", "memory://cli-ui-remote", "--listen", "0.0.0.0:0", "--allow-remote", "--token-file", tokenFile, "--allow-actions")
	base = strings.Replace(base, "0.0.0.0", "127.0.0.1", 1)
	base = strings.Replace(base, "[::]", "127.0.0.1", 1)
	req, _ := http.NewRequest(http.MethodGet, base+"workflows", nil)
	if code, body := fetch(t, req); code != 200 || !strings.Contains(body, `name="token"`) {
		t.Errorf("without the token: %d, want the sign-in form", code)
	}
	req, _ = http.NewRequest(http.MethodGet, base+"workflows", nil)
	req.Header.Set("Authorization", "Bearer a-token-long-enough-1234")
	if code, body := fetch(t, req); code != 200 || !strings.Contains(body, "actions allowed") {
		t.Errorf("with the token: %d", code)
	}
}
