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
	b, err := d.Open(ctx, dsn)
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

func quoteSafe(s string) string {
	if schemeSyntax.valid(s) {
		return `"` + s + `"`
	}
	return "(invalid)"
}
