package mockspec

import (
	"time"

	"github.com/durable-go/durable/contract"
)

// RenewLeasesGen is the generator of Store.RenewLeases's statement, an
// optional method of Gen (pgmock asserts it): renewed[i] is the lease the
// server returns for leases[i] (its ExpiresAt set), or nil when that lease
// is no longer held. A lease given twice is returned once.
type RenewLeasesGen interface {
	RenewLeases(leases []contract.Lease, ttl time.Duration, renewed []*contract.Lease) []Statement
}
