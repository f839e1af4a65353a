package redis

import (
	"strings"
	"testing"
	"time"

	"github.com/durable-go/durable/contract"
)

func TestParseDSNOptions(t *testing.T) {
	cfg, err := ParseDSN("redis://user:s3cret@h1:7000/3?prefix=app&tolerance=2s&dial_timeout=3s&read_timeout=4s&write_timeout=5s&pool_size=7&wait=1&wait_timeout=250ms&poll_floor=300ms")
	if err != nil {
		t.Fatal(err)
	}
	want := Config{Addrs: []string{"h1:7000"}, DB: 3, Username: "user", Password: "s3cret", Prefix: "app",
		Tolerance: 2 * time.Second, DialTimeout: 3 * time.Second, ReadTimeout: 4 * time.Second, WriteTimeout: 5 * time.Second,
		PoolSize: 7, Wait: 1, WaitTimeout: 250 * time.Millisecond, PollFloor: 300 * time.Millisecond}
	if cfg.Addrs[0] != want.Addrs[0] || cfg.DB != want.DB || cfg.Username != want.Username || cfg.Password != want.Password ||
		cfg.Prefix != want.Prefix || cfg.Tolerance != want.Tolerance || cfg.DialTimeout != want.DialTimeout ||
		cfg.ReadTimeout != want.ReadTimeout || cfg.WriteTimeout != want.WriteTimeout || cfg.PoolSize != want.PoolSize ||
		cfg.Wait != want.Wait || cfg.WaitTimeout != want.WaitTimeout || cfg.PollFloor != want.PollFloor {
		t.Errorf("ParseDSN = %+v, want %+v", cfg, want)
	}
	cfg, err = ParseDSN("rediss://h1:1,h2:2,h3?cluster=true&ca_file=/x&server_name=n&db=0&username=u&password=p")
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.TLS || !cfg.Cluster || len(cfg.Addrs) != 3 || cfg.Addrs[2] != "h3:6379" || cfg.CAFile != "/x" || cfg.ServerName != "n" || cfg.Password != "p" {
		t.Errorf("ParseDSN = %+v", cfg)
	}
	cfg, err = ParseDSN("redis://h:1?coalesce=off&coalesce_inflight=3")
	if err != nil || cfg.Coalesce != CoalesceOff || cfg.CoalesceInFlight != 3 {
		t.Errorf("coalesce parameters: %+v, %v", cfg, err)
	}
	cfg, err = ParseDSN("redis://h:1?coalesce=pipeline")
	if err != nil || cfg.Coalesce != CoalescePipeline {
		t.Errorf("coalesce=pipeline: %+v, %v", cfg, err)
	}
	cfg, err = ParseDSN("redis://localhost")
	if err != nil || cfg.Prefix != DefaultPrefix || cfg.Tolerance != DefaultTolerance || cfg.PollFloor != DefaultPollFloor || cfg.Addrs[0] != "localhost:6379" ||
		cfg.Coalesce != CoalesceOn || cfg.CoalesceInFlight != 0 {
		t.Errorf("defaults: %+v, %v", cfg, err)
	}
}

func TestParseDSNRejectsWithoutLeakingSecrets(t *testing.T) {
	for _, dsn := range []string{
		"redis://u:topsecret@h:1?bogus=1",
		"redis://u:topsecret@h:1?tolerance=-1s",
		"redis://u:topsecret@h:1?prefix=bad{tag}",
		"redis://u:topsecret@h:1?wait=-1",
		"redis://u:topsecret@h:1?wait_timeout=0s",
		"redis://u:topsecret@h:1?pool_size=0",
		"redis://u:topsecret@h:1?cluster=maybe",
		"redis://u:topsecret@h:1?coalesce=topsecret",
		"redis://u:topsecret@h:1?coalesce_inflight=0",
		"redis://u:topsecret@h:1?coalesce_inflight=65",
		"redis://u:topsecret@h:1,h:2",
		"redis://u:topsecret@h:1,h:2/2?cluster=true",
		"redis://u:topsecret@h:1?ca_file=/x",
		"redis://u:topsecret@h:99999",
		"redis://u:topsecret@h:1/notanumber",
		"http://u:topsecret@h:1",
		"redis://u:topsecret@h:1#frag",
	} {
		_, err := ParseDSN(dsn)
		if contract.CodeOf(err) != contract.InvalidArgument {
			t.Errorf("ParseDSN(%q) = %v, want InvalidArgument", dsn, err)
			continue
		}
		if strings.Contains(err.Error(), "topsecret") || strings.Contains(err.Error(), "h:1") {
			t.Errorf("error leaks the DSN: %v", err)
		}
	}
}

// TestScopeTagIsSafe: any byte in a scope stays inside its hash tag, and
// distinct scopes get distinct tags.
func TestScopeTagIsSafe(t *testing.T) {
	b := &Backend{prefix: "p:"}
	seen := map[string]contract.Scope{}
	for _, s := range []contract.Scope{"", "a", "a}b", "{", "%7D", "}", "a b", "\x00"} {
		base := b.base(s)
		tag := base[strings.Index(base, "{")+1 : strings.Index(base, "}")]
		if strings.ContainsAny(tag, "{}") || tag == "" || !strings.HasSuffix(base, "}:") {
			t.Errorf("scope %q: base %q", s, base)
		}
		if o, ok := seen[base]; ok {
			t.Errorf("scopes %q and %q share %q", s, o, base)
		}
		seen[base] = s
	}
}
