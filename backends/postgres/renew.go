package postgres

import (
	"context"
	"database/sql"
	"strconv"
	"strings"
	"time"

	"github.com/durable-go/durable/backends/postgres/internal/mockspec"
	"github.com/durable-go/durable/contract"
)

var _ contract.LeaseRenewer = (*Backend)(nil)

// RenewLeases implements contract.LeaseRenewer: one statement, one round
// trip, for the whole batch (qRenewLeases). Each lease is judged as
// RenewLease judges it (held by its owner and token, not released, and
// expiring more than the tolerance after the statement's now), on one
// reading of the clock; a lease the statement did not return is Fenced. A
// lease given twice is updated once and both positions get its row.
func (b *Backend) RenewLeases(ctx context.Context, leases []contract.Lease, ttl time.Duration) ([]contract.LeaseRenewal, error) {
	type key struct {
		scope           contract.Scope
		resource, owner string
		token           int64
	}
	renewed := make(map[key]contract.Lease, len(leases))
	var r listedLeaseRow
	reset := func() { clear(renewed) }
	row := func() error {
		l := r.lease(contract.Scope(r.scope), r.resource)
		renewed[key{l.Scope, l.Resource, l.Owner, l.Token}] = l
		return nil
	}
	args := qRenewLeases.args(b.renewLeasesParams(leases, ttl))
	if err := qRenewLeases.each(ctx, b, args, r.dest(), reset, row); err != nil {
		return nil, err
	}
	out := make([]contract.LeaseRenewal, len(leases))
	for i, l := range leases {
		if nl, ok := renewed[key{l.Scope, l.Resource, l.Owner, l.Token}]; ok {
			out[i].Lease = nl
		} else {
			out[i].Err = &contract.Error{Code: contract.Fenced, Msg: "lease is no longer held"}
		}
	}
	return out, nil
}

func (b *Backend) renewLeasesParams(leases []contract.Lease, ttl time.Duration) renewLeasesParams {
	scopes := make([]string, len(leases))
	resources := make([]string, len(leases))
	owners := make([]string, len(leases))
	tokens := make([]int64, len(leases))
	for i, l := range leases {
		scopes[i], resources[i], owners[i], tokens[i] = string(l.Scope), l.Resource, l.Owner, l.Token
	}
	return renewLeasesParams{
		Now: b.nowParam(), Tol: b.tol, TTL: ttl,
		Scopes: textArrayOf(scopes), Resources: textArrayOf(resources), Owners: textArrayOf(owners),
		Tokens: bigintArrayOf(tokens),
	}
}

// arrayLiteral is a PostgreSQL array in its text form ({"a","b"}, {1,2}),
// sent as one text parameter and cast in the statement
// (@scopes::text::text[]). Every client library sends a string alike (pgx,
// its stdlib and lib/pq, with or without binary parameters, through a
// transaction pooler), where array parameters would need each driver's own
// array type (pq.Array, pgtype) and a cast check of their own.
type arrayLiteral string

// textArrayOf quotes every element. The Store has validated them as
// identifiers ([A-Za-z0-9_.:-], or "" for the unscoped namespace), so no
// element holds a quote or a backslash; they are escaped all the same.
func textArrayOf(elems []string) arrayLiteral {
	var s strings.Builder
	s.WriteByte('{')
	for i, e := range elems {
		if i > 0 {
			s.WriteByte(',')
		}
		s.WriteByte('"')
		for j := 0; j < len(e); j++ {
			if e[j] == '"' || e[j] == '\\' {
				s.WriteByte('\\')
			}
			s.WriteByte(e[j])
		}
		s.WriteByte('"')
	}
	s.WriteByte('}')
	return arrayLiteral(s.String())
}

func bigintArrayOf(elems []int64) arrayLiteral {
	var s strings.Builder
	s.WriteByte('{')
	for i, e := range elems {
		if i > 0 {
			s.WriteByte(',')
		}
		s.WriteString(strconv.FormatInt(e, 10))
	}
	s.WriteByte('}')
	return arrayLiteral(s.String())
}

type renewLeasesParams struct {
	Now       sql.Null[time.Time]
	Tol       time.Duration
	TTL       time.Duration
	Scopes    arrayLiteral // text[]
	Resources arrayLiteral // text[]
	Owners    arrayLiteral // text[]
	Tokens    arrayLiteral // bigint[]
}

func (p renewLeasesParams) args() []any {
	return []any{null(p.Now), p.Tol.Seconds(), p.TTL.Seconds(), string(p.Scopes), string(p.Resources), string(p.Owners), string(p.Tokens)}
}

// qRenewLeases is qRenewLease for many leases: the batch is unnested into
// rows b (the arrays have one element per lease, in order) and joined to
// the leases on the primary key, owner and token, with qRenewLease's
// validity rule. A lease not returned is no longer held. A row matched by
// two elements (a lease given twice) is updated once.
var qRenewLeases = newQuery(write, "RenewLeases", `UPDATE {schema}.leases l SET expires_at = c.now + make_interval(secs => @ttl::float8)
FROM (SELECT `+clockCols+`) c,
  unnest(@scopes::text::text[], @resources::text::text[], @owners::text::text[], @tokens::text::bigint[]) AS b(scope, resource, owner, token)
WHERE l.scope = b.scope AND l.resource = b.resource AND l.owner = b.owner AND l.token = b.token
  AND `+leaseHeld("l", "c.now", "c.tol")+`
RETURNING l.scope, l.resource, `+qualified("l", leaseColumns),
	renewLeasesParams.args, (*listedLeaseRow).dest)

// RenewLeases implements mockspec.RenewLeasesGen: qRenewLeases with the
// arguments RenewLeases builds, and one row per distinct renewed lease.
func (g *mockGen) RenewLeases(leases []contract.Lease, ttl time.Duration, renewed []*contract.Lease) []mockspec.Statement {
	var rows [][]any
	seen := map[contract.Lease]bool{}
	for _, l := range renewed {
		if l == nil {
			continue
		}
		k := contract.Lease{Scope: l.Scope, Resource: l.Resource, Owner: l.Owner, Token: l.Token}
		if seen[k] {
			continue
		}
		seen[k] = true
		r := listedLeaseRow{scope: string(l.Scope), resource: l.Resource, leaseRow: leaseRowOf(*l)}
		rows = append(rows, values(r.dest()))
	}
	return []mockspec.Statement{g.stmt(qRenewLeases.statement, qRenewLeases.args(g.b.renewLeasesParams(leases, ttl)),
		columns(0, append([]string{"scope", "resource"}, leaseColumns...)...), rows...)}
}
