package redis

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/contract"
	goredis "github.com/redis/go-redis/v9"
)

// DefaultDialTimeout bounds connecting when the DSN gives no dial_timeout.
const DefaultDialTimeout = 5 * time.Second

// Config is a parsed DSN.
type Config struct {
	Addrs            []string // host:port of the node, or of cluster nodes
	Cluster          bool
	TLS              bool // rediss://
	DB               int
	Username         string
	Password         string
	Prefix           string
	Tolerance        time.Duration
	DialTimeout      time.Duration
	ReadTimeout      time.Duration // 0: go-redis's default
	WriteTimeout     time.Duration
	PoolSize         int // 0: go-redis's default
	Wait             int
	WaitTimeout      time.Duration
	PollFloor        time.Duration
	Coalesce         CoalesceMode
	CoalesceInFlight int
	CAFile           string
	ServerName       string
}

// knownParams lists the DSN parameters, for the error about an unknown one.
const knownParams = "db, prefix, tolerance, dial_timeout, read_timeout, write_timeout, pool_size, wait, wait_timeout, poll_floor, coalesce, coalesce_inflight, cluster, username, password, ca_file, server_name"

func invalidDSN(msg string) error {
	return &contract.Error{Code: contract.InvalidArgument, Msg: "redis DSN: " + msg}
}

// ParseDSN parses a redis:// or rediss:// DSN (see the package
// documentation). Its errors never contain the DSN or any part of it.
func ParseDSN(dsn string) (Config, error) {
	scheme, rest, ok := strings.Cut(dsn, "://")
	cfg := Config{Prefix: DefaultPrefix, Tolerance: DefaultTolerance, DialTimeout: DefaultDialTimeout,
		WaitTimeout: DefaultWaitTimeout, PollFloor: DefaultPollFloor}
	switch {
	case ok && strings.EqualFold(scheme, "redis"):
	case ok && strings.EqualFold(scheme, "rediss"):
		cfg.TLS = true
	default:
		return Config{}, invalidDSN(`must start with "redis://" or "rediss://"`)
	}
	rest, rawQuery, _ := strings.Cut(rest, "?")
	if strings.Contains(rawQuery, "#") || strings.Contains(rest, "#") {
		return Config{}, invalidDSN("a fragment (#) is not allowed")
	}
	authority, path, _ := strings.Cut(rest, "/")
	if at := strings.LastIndex(authority, "@"); at >= 0 {
		userinfo := authority[:at]
		authority = authority[at+1:]
		u, p, hasPass := strings.Cut(userinfo, ":")
		var err error
		if cfg.Username, err = url.PathUnescape(u); err != nil {
			return Config{}, invalidDSN("malformed user name")
		}
		if hasPass {
			if cfg.Password, err = url.PathUnescape(p); err != nil {
				return Config{}, invalidDSN("malformed password")
			}
		}
	}
	if authority == "" {
		return Config{}, invalidDSN("no address: give host:port[,host:port…]")
	}
	for _, ep := range strings.Split(authority, ",") {
		host, port, err := net.SplitHostPort(ep)
		if err != nil && strings.Contains(err.Error(), "missing port") {
			host, port, err = ep, "6379", nil
		}
		if err != nil || host == "" {
			return Config{}, invalidDSN("every address must be host[:port]")
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return Config{}, invalidDSN("a port must be 1-65535")
		}
		cfg.Addrs = append(cfg.Addrs, net.JoinHostPort(host, port))
	}
	dbSet := false
	if p := strings.TrimSuffix(path, "/"); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return Config{}, invalidDSN("the path must be a database number such as /0")
		}
		cfg.DB, dbSet = n, true
	}
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return Config{}, invalidDSN("malformed parameters")
	}
	dur := func(v, name string, zeroOK bool) (time.Duration, error) {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 || (d == 0 && !zeroOK) {
			return 0, invalidDSN(name + " must be a positive Go duration such as 2s")
		}
		return d, nil
	}
	for k, vs := range q {
		v := vs[len(vs)-1]
		switch k {
		case "db":
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return Config{}, invalidDSN("db must be a database number such as 0")
			}
			cfg.DB, dbSet = n, true
		case "prefix":
			if !validPrefix(v) {
				return Config{}, invalidDSN("prefix must be 1-64 bytes of [A-Za-z0-9_.:-]")
			}
			cfg.Prefix = v
		case "tolerance":
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 || d > time.Hour {
				return Config{}, invalidDSN("tolerance must be a Go duration from 0s to 1h, such as 1s")
			}
			cfg.Tolerance = d
		case "dial_timeout":
			if cfg.DialTimeout, err = dur(v, k, false); err != nil {
				return Config{}, err
			}
		case "read_timeout":
			if cfg.ReadTimeout, err = dur(v, k, false); err != nil {
				return Config{}, err
			}
		case "write_timeout":
			if cfg.WriteTimeout, err = dur(v, k, false); err != nil {
				return Config{}, err
			}
		case "wait_timeout":
			if cfg.WaitTimeout, err = dur(v, k, false); err != nil {
				return Config{}, err
			}
		case "poll_floor":
			if cfg.PollFloor, err = dur(v, k, false); err != nil {
				return Config{}, err
			}
		case "pool_size":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 10000 {
				return Config{}, invalidDSN("pool_size must be a number of connections from 1 to 10000")
			}
			cfg.PoolSize = n
		case "wait":
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 || n > 100 {
				return Config{}, invalidDSN("wait must be a number of replicas from 0 to 100")
			}
			cfg.Wait = n
		case "coalesce":
			m, ok := parseCoalesce(v)
			if !ok {
				return Config{}, invalidDSN("coalesce must be on, pipeline or off")
			}
			cfg.Coalesce = m
		case "coalesce_inflight":
			n, ok := parseCoalesceInFlight(v)
			if !ok {
				return Config{}, invalidDSN("coalesce_inflight must be a number of pipelines from 1 to 64")
			}
			cfg.CoalesceInFlight = n
		case "cluster":
			b, err := strconv.ParseBool(v)
			if err != nil {
				return Config{}, invalidDSN("cluster must be true or false")
			}
			cfg.Cluster = b
		case "username":
			cfg.Username = v
		case "password":
			cfg.Password = v
		case "ca_file":
			cfg.CAFile = v
		case "server_name":
			cfg.ServerName = v
		default:
			return Config{}, invalidDSN("unknown parameter (known: " + knownParams + ")")
		}
	}
	if len(cfg.Addrs) > 1 && !cfg.Cluster {
		return Config{}, invalidDSN("several addresses need cluster=true (a Redis Cluster)")
	}
	if cfg.Cluster && dbSet && cfg.DB != 0 {
		return Config{}, invalidDSN("a Redis Cluster has only database 0")
	}
	if (cfg.CAFile != "" || cfg.ServerName != "") && !cfg.TLS {
		return Config{}, invalidDSN("ca_file and server_name need the rediss:// scheme (TLS)")
	}
	return cfg, nil
}

func (c Config) tlsConfig() (*tls.Config, error) {
	if !c.TLS {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.ServerName}
	if tc.ServerName == "" {
		tc.ServerName, _, _ = net.SplitHostPort(c.Addrs[0])
	}
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, &contract.Error{Code: contract.Misconfigured, Msg: "redis: cannot read ca_file", Err: err}
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, &contract.Error{Code: contract.Misconfigured, Msg: "redis: ca_file holds no PEM certificate"}
		}
		tc.RootCAs = pool
	}
	return tc, nil
}

// client builds the go-redis client cfg describes. It never retries a
// command by itself (see NewBackend).
func (c Config) client() (goredis.UniversalClient, error) {
	tc, err := c.tlsConfig()
	if err != nil {
		return nil, err
	}
	if c.Cluster {
		return goredis.NewClusterClient(&goredis.ClusterOptions{
			Addrs: c.Addrs, Username: c.Username, Password: c.Password, TLSConfig: tc,
			DialTimeout: c.DialTimeout, ReadTimeout: c.ReadTimeout, WriteTimeout: c.WriteTimeout,
			PoolSize: c.PoolSize, MaxRetries: -1, ContextTimeoutEnabled: true,
		}), nil
	}
	return goredis.NewClient(&goredis.Options{
		Addr: c.Addrs[0], Username: c.Username, Password: c.Password, DB: c.DB, TLSConfig: tc,
		DialTimeout: c.DialTimeout, ReadTimeout: c.ReadTimeout, WriteTimeout: c.WriteTimeout,
		PoolSize: c.PoolSize, MaxRetries: -1, ContextTimeoutEnabled: true,
	}), nil
}

type driver struct{}

// Open implements contract.Driver: it parses the DSN, connects, and checks
// within dial_timeout that the server answers and does not evict keys.
func (driver) Open(ctx context.Context, dsn string) (contract.Backend, error) {
	cfg, err := ParseDSN(dsn)
	if err != nil {
		return nil, err
	}
	return dial(ctx, cfg)
}

// Open returns a Store on the server a DSN names (see the package
// documentation). It is durable.Open for a redis:// or rediss:// DSN (any
// other scheme is refused with InvalidArgument); storeOpts configure the
// Store.
func Open(ctx context.Context, dsn string, storeOpts ...durable.Option) (*durable.Store, error) {
	scheme, _, ok := strings.Cut(dsn, "://")
	if !ok || !(strings.EqualFold(scheme, "redis") || strings.EqualFold(scheme, "rediss")) {
		return nil, invalidDSN(`must start with "redis://" or "rediss://"`)
	}
	return durable.Open(ctx, dsn, storeOpts...)
}

func dial(ctx context.Context, cfg Config) (*Backend, error) {
	rdb, err := cfg.client()
	if err != nil {
		return nil, err
	}
	b, err := newBackend(rdb, true, Options{Prefix: cfg.Prefix, Tolerance: cfg.Tolerance, Wait: cfg.Wait,
		WaitTimeout: cfg.WaitTimeout, PollFloor: cfg.PollFloor, Coalesce: cfg.Coalesce, CoalesceInFlight: cfg.CoalesceInFlight})
	if err != nil {
		_ = rdb.Close()
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
	defer cancel()
	if err := b.verify(pctx); err != nil {
		_ = rdb.Close()
		return nil, err
	}
	return b, nil
}

// verify pings every primary and refuses a server that may evict keys.
func (b *Backend) verify(ctx context.Context) error {
	return b.eachPrimary(ctx, func(ctx context.Context, c *goredis.Client) error {
		if err := c.Ping(ctx).Err(); err != nil {
			e := b.fail(ctx, err, false)
			if ce, ok := e.(*contract.Error); ok && (ce.Code == contract.Canceled || ce.Code == contract.Unavailable) {
				return &contract.Error{Code: contract.Unavailable, Msg: "redis: no answer within dial_timeout (check the address, TLS and that the server runs)", Err: err}
			}
			return e
		}
		policy, err := configGet(ctx, c, "maxmemory-policy")
		if err != nil {
			return nil // CONFIG is not available (managed Redis): Doctor says it cannot verify
		}
		if policy != "noeviction" {
			return &contract.Error{Code: contract.Misconfigured, Msg: "redis: maxmemory-policy is " + strconv.Quote(policy) +
				": an evicted key is a lost idempotency key, lease or fence; set maxmemory-policy noeviction"}
		}
		return nil
	})
}

func (b *Backend) eachPrimary(ctx context.Context, fn func(context.Context, *goredis.Client) error) error {
	if b.single != nil {
		return fn(ctx, b.single)
	}
	return b.cluster.ForEachMaster(ctx, fn)
}

// configGet reads one server setting; an error when CONFIG is refused.
func configGet(ctx context.Context, c *goredis.Client, name string) (string, error) {
	m, err := c.ConfigGet(ctx, name).Result()
	if err != nil {
		return "", err
	}
	v, ok := m[name]
	if !ok {
		return "", &contract.Error{Code: contract.Unimplemented, Msg: "setting not reported"}
	}
	return v, nil
}
