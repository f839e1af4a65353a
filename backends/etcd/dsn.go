package etcd

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
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// DefaultDialTimeout bounds connecting to the cluster when the DSN gives no
// dial_timeout.
const DefaultDialTimeout = 5 * time.Second

// Config is a parsed DSN.
type Config struct {
	Endpoints   []string      // host:port of each member
	Prefix      string        // key prefix, without the trailing "/"
	Tolerance   time.Duration // whole seconds
	DialTimeout time.Duration
	Username    string
	Password    string
	TLS         bool
	CAFile      string
	CertFile    string
	KeyFile     string
	ServerName  string
}

func invalidDSN(msg string) error {
	return &contract.Error{Code: contract.InvalidArgument, Msg: "etcd DSN: " + msg}
}

// ParseDSN parses an etcd DSN (see the package documentation). Its errors
// never contain the DSN or any part of it.
func ParseDSN(dsn string) (Config, error) {
	scheme, rest, ok := strings.Cut(dsn, "://")
	if !ok || !strings.EqualFold(scheme, "etcd") {
		return Config{}, invalidDSN(`must start with "etcd://"`)
	}
	cfg := Config{Prefix: DefaultPrefix, Tolerance: DefaultTolerance, DialTimeout: DefaultDialTimeout}
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
		return Config{}, invalidDSN("no endpoint: give host:port[,host:port…]")
	}
	for _, ep := range strings.Split(authority, ",") {
		host, port, err := net.SplitHostPort(ep)
		if err != nil || host == "" {
			return Config{}, invalidDSN("every endpoint must be host:port")
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return Config{}, invalidDSN("an endpoint's port must be 1-65535")
		}
		cfg.Endpoints = append(cfg.Endpoints, ep)
	}
	if path != "" {
		p, err := url.PathUnescape(strings.TrimSuffix(path, "/"))
		if err != nil || !validPrefix(p) {
			return Config{}, invalidDSN("the prefix (path) must be 1-128 bytes of [A-Za-z0-9_.:/-]")
		}
		cfg.Prefix = p
	}
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return Config{}, invalidDSN("malformed parameters")
	}
	for k, vs := range q {
		v := vs[len(vs)-1]
		switch k {
		case "tolerance":
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 || d%time.Second != 0 || d > time.Hour {
				return Config{}, invalidDSN("tolerance must be a whole number of seconds from 0s to 1h, such as 1s (etcd lease TTLs are whole seconds)")
			}
			cfg.Tolerance = d
		case "dial_timeout":
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return Config{}, invalidDSN("dial_timeout must be a positive Go duration such as 5s")
			}
			cfg.DialTimeout = d
		case "username":
			cfg.Username = v
		case "password":
			cfg.Password = v
		case "tls":
			b, err := strconv.ParseBool(v)
			if err != nil {
				return Config{}, invalidDSN("tls must be true or false")
			}
			cfg.TLS = b
		case "ca_file":
			cfg.CAFile, cfg.TLS = v, true
		case "cert_file":
			cfg.CertFile, cfg.TLS = v, true
		case "key_file":
			cfg.KeyFile, cfg.TLS = v, true
		case "server_name":
			cfg.ServerName, cfg.TLS = v, true
		default:
			return Config{}, invalidDSN("unknown parameter (known: tolerance, dial_timeout, username, password, tls, ca_file, cert_file, key_file, server_name)")
		}
	}
	if (cfg.CertFile == "") != (cfg.KeyFile == "") {
		return Config{}, invalidDSN("cert_file and key_file go together")
	}
	if cfg.Password != "" && cfg.Username == "" {
		return Config{}, invalidDSN("a password needs a username")
	}
	return cfg, nil
}

func (c Config) tlsConfig() (*tls.Config, error) {
	if !c.TLS {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.ServerName}
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, &contract.Error{Code: contract.Misconfigured, Msg: "etcd: cannot read ca_file", Err: err}
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, &contract.Error{Code: contract.Misconfigured, Msg: "etcd: ca_file holds no PEM certificate"}
		}
		tc.RootCAs = pool
	}
	if c.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, &contract.Error{Code: contract.Misconfigured, Msg: "etcd: cannot load cert_file and key_file", Err: err}
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

type driver struct{}

// Open implements contract.Driver: it parses the DSN, connects, and checks
// within dial_timeout that the cluster answers a read under the prefix.
func (driver) Open(ctx context.Context, dsn string) (contract.Backend, error) {
	cfg, err := ParseDSN(dsn)
	if err != nil {
		return nil, err
	}
	return dial(ctx, cfg)
}

// Open returns a Store on the cluster a DSN names (see the package
// documentation): it connects, checks within dial_timeout that the cluster
// answers a read under the prefix, and closes its client when the Store
// closes. It is durable.Open for a DSN whose scheme is etcd (any other is
// refused with InvalidArgument), with the same options: storeOpts
// configure the Store.
func Open(ctx context.Context, dsn string, storeOpts ...durable.Option) (*durable.Store, error) {
	scheme, _, ok := strings.Cut(dsn, "://")
	if !ok || !strings.EqualFold(scheme, "etcd") {
		return nil, invalidDSN(`must start with "etcd://"`)
	}
	return durable.Open(ctx, dsn, storeOpts...)
}

// dial connects to the cluster cfg names and returns a Backend that owns
// its client.
func dial(ctx context.Context, cfg Config) (*Backend, error) {
	tc, err := cfg.tlsConfig()
	if err != nil {
		return nil, err
	}
	scheme := "http://"
	if tc != nil {
		scheme = "https://"
	}
	eps := make([]string, len(cfg.Endpoints))
	for i, ep := range cfg.Endpoints {
		eps[i] = scheme + ep
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: eps, DialTimeout: cfg.DialTimeout, Username: cfg.Username, Password: cfg.Password,
		TLS: tc, Logger: zap.NewNop(), Context: context.WithoutCancel(ctx),
		DialKeepAliveTime: 10 * time.Second, DialKeepAliveTimeout: 5 * time.Second,
	})
	if err != nil {
		b := &Backend{done: make(chan struct{})}
		return nil, b.classifyDial(ctx, err)
	}
	b := newBackend(cli, true, cfg.Prefix, cfg.Tolerance)
	pctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
	defer cancel()
	if _, err := cli.Get(pctx, b.prefix, clientv3.WithKeysOnly(), clientv3.WithLimit(1)); err != nil {
		_ = cli.Close()
		return nil, b.classifyDial(pctx, err)
	}
	return b, nil
}

func (b *Backend) classifyDial(ctx context.Context, err error) error {
	e := b.fail(ctx, err, false)
	if ce, ok := e.(*contract.Error); ok && (ce.Code == contract.Canceled || ce.Code == contract.Unavailable) {
		return &contract.Error{Code: contract.Unavailable, Msg: "etcd: no endpoint answered within dial_timeout (check the endpoints, TLS settings and that the cluster has a leader)", Err: err}
	}
	return e
}
