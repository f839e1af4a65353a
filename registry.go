package durable

import (
	"context"
	"sort"
	"strings"
	"sync"

	"github.com/durable-go/durable/contract"
)

var (
	driversMu sync.RWMutex
	drivers   = map[string]contract.Driver{}
)

// Register makes a driver available under a DSN scheme. Backend packages
// call it from init. Names are case-insensitive. Register panics if d is
// nil, name is empty or not a valid URL scheme, or name is already
// registered.
func Register(name string, d contract.Driver) {
	if d == nil {
		panic("durable: Register driver is nil")
	}
	if !schemeSyntax.valid(name) {
		panic("durable: Register called with an invalid name " + quoteSafe(name))
	}
	key := strings.ToLower(name)
	driversMu.Lock()
	defer driversMu.Unlock()
	if _, dup := drivers[key]; dup {
		panic("durable: Register called twice for driver " + key)
	}
	drivers[key] = d
}

// Drivers returns the registered scheme names, sorted.
func Drivers() []string {
	driversMu.RLock()
	defer driversMu.RUnlock()
	names := make([]string, 0, len(drivers))
	for n := range drivers {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Open opens a Store on the backend registered for the DSN's scheme, for
// example "memory://" or "postgres://user@host/db". The scheme is matched
// case-insensitively. Each backend documents its DSN parameters and rejects
// unknown ones. Errors never contain the DSN.
//
// opts configure the Store as for [New]; [WithMigrateMode] also reaches the
// driver, which opens the backend with it (see contract.OptionsDriver).
func Open(ctx context.Context, dsn string, opts ...Option) (*Store, error) {
	const op = "Open"
	scheme, _, ok := strings.Cut(dsn, "://")
	if !ok || !schemeSyntax.valid(scheme) {
		return nil, invalid(op, `DSN must start with a scheme such as "memory://" or "postgres://"`)
	}
	key := strings.ToLower(scheme)
	driversMu.RLock()
	d := drivers[key]
	driversMu.RUnlock()
	if d == nil {
		return nil, invalid(op, "unknown backend "+quoteSafe(key)+
			" (registered: "+strings.Join(Drivers(), ", ")+") (forgotten import?)")
	}
	if ctx == nil {
		return nil, invalid(op, "context must not be nil")
	}
	// The options are checked before the backend is opened; New applies
	// them again to the Store.
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.err != nil {
		return nil, cfg.err
	}
	var b contract.Backend
	var err error
	if od, ok := d.(contract.OptionsDriver); ok {
		b, err = od.OpenWith(ctx, dsn, cfg.open)
	} else {
		b, err = d.Open(ctx, dsn)
	}
	if err != nil {
		return nil, wrapErr(op, err)
	}
	// Instrumentation names the backend by its scheme unless it names
	// itself.
	s, err := New(b, append(opts[:len(opts):len(opts)], withScheme(key))...)
	if err != nil {
		_ = b.Close()
		return nil, err
	}
	return s, nil
}

// openOptions are the options [Open] hands the driver (config.open).
type openOptions = contract.OpenOptions

// MigrateMode says what opening a backend does about its schema: see
// contract.MigrateMode.
type MigrateMode = contract.MigrateMode

// The migrate modes (see contract.MigrateMode).
const (
	MigrateAuto   = contract.MigrateAuto
	MigrateVerify = contract.MigrateVerify
	MigrateOff    = contract.MigrateOff
)

// WithMigrateMode makes [Open] open the backend with mode instead of the
// DSN's migrate parameter, on a backend with a versioned schema (Postgres,
// SQLite; see contract.OpenOptions). Everything else about the DSN is read
// and checked as always, its migrate parameter included: a typo in it
// still fails. Maintenance tools (the durable CLI's migrate and doctor
// commands) open with MigrateOff, so that opening neither changes nor
// checks the schema, and then use the backend's contract.Migrator or
// contract.Doctor through [Store.As]. Drivers of backends without a schema
// (memory, etcd) ignore it, and so does [New], which opens nothing.
func WithMigrateMode(mode MigrateMode) Option {
	return func(c *config) {
		if mode < MigrateAuto || mode > MigrateOff {
			c.fail("unknown migrate mode")
			return
		}
		c.open.Migrate = &mode
	}
}

func quoteSafe(s string) string {
	if schemeSyntax.valid(s) {
		return `"` + s + `"`
	}
	return "(invalid)"
}
