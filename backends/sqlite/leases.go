package sqlite

import (
	"context"
	"database/sql"
	"time"

	"github.com/durable-go/durable/contract"
)

const leaseCols = `scope, resource, owner, token, acquired_at, expires_at, value`

const (
	// sqlAcquireLease grants the lease when there is none or the stored
	// one expired more than the tolerance ago, with the next token of the
	// counter and the request's value; sqlNextToken then records that
	// token as issued, in the same transaction. A counter at the int64
	// maximum grants nothing (SQLite's last + 1 would overflow to a
	// float): see sqlTokensLeft.
	sqlAcquireLease = `INSERT INTO leases (` + leaseCols + `)
SELECT ?, ?, ?, last + 1, ?, ?, ? FROM lease_tokens WHERE id = 1 AND last < 9223372036854775807
ON CONFLICT (scope, resource) DO UPDATE SET owner = excluded.owner, token = excluded.token, acquired_at = excluded.acquired_at, expires_at = excluded.expires_at, value = excluded.value
WHERE leases.expires_at < ?
RETURNING token`
	sqlTokensLeft   = `SELECT last < 9223372036854775807 FROM lease_tokens WHERE id = 1`
	sqlNextToken    = `UPDATE lease_tokens SET last = ? WHERE id = 1 AND last < ?`
	sqlRenewLease   = `UPDATE leases SET expires_at = ? WHERE scope = ? AND resource = ? AND owner = ? AND token = ? AND expires_at > ? RETURNING acquired_at, value`
	sqlReleaseLease = `DELETE FROM leases WHERE scope = ? AND resource = ? AND owner = ? AND token = ?`
	sqlGetLease     = `SELECT ` + leaseCols + ` FROM leases WHERE scope = ? AND resource = ?`
)

// valueArg is a lease value as a statement argument: a BLOB, so that it is
// stored byte for byte, or NULL for the empty value (migration 3).
func valueArg(v string) any {
	if v == "" {
		return nil
	}
	return []byte(v)
}

func scanLease(sc interface{ Scan(...any) error }) (contract.Lease, error) {
	var l contract.Lease
	var scope string
	var acquired, expires int64
	var value []byte
	err := sc.Scan(&scope, &l.Resource, &l.Owner, &l.Token, &acquired, &expires, &value)
	l.Scope, l.AcquiredAt, l.ExpiresAt, l.Value = contract.Scope(scope), fromMicros(acquired), fromMicros(expires), string(value)
	return l, err
}

// AcquireLease implements contract.LeaseStore. The token comes from the
// lease_tokens counter, which only grows: not release, takeover, Cleanup,
// DeleteRecord nor a restart resets it (only `migrate down` drops it).
func (b *Backend) AcquireLease(ctx context.Context, req contract.LeaseRequest) (contract.Lease, error) {
	var out contract.Lease
	gone, err := b.write(ctx, func(ctx context.Context) error {
		var err error
		out, err = b.grant(ctx, req, b.now())
		return err
	}, func(err error) { b.signalLease(err, req.Scope, req.Resource) })
	if gone {
		return contract.Lease{}, err
	}
	return out, err
}

// grant runs AcquireLease's statements in the write transaction: the
// lease, or LeaseBusy (or TokensExhausted).
func (b *Backend) grant(ctx context.Context, req contract.LeaseRequest, now int64) (contract.Lease, error) {
	expires := now + micros(req.TTL)
	var token int64
	found, err := b.ws.queryRow(ctx, sqlAcquireLease,
		[]any{string(req.Scope), req.Resource, req.Owner, now, expires, valueArg(req.Value), now - micros(b.tol)}, &token)
	if err != nil {
		return contract.Lease{}, err
	}
	if !found {
		var left bool
		if found, err := b.ws.queryRow(ctx, sqlTokensLeft, nil, &left); err != nil {
			return contract.Lease{}, err
		} else if found && !left {
			return contract.Lease{}, contract.TokensExhausted(nil)
		}
		return contract.Lease{}, &contract.Error{Code: contract.LeaseBusy, Msg: "lease is held"}
	}
	res, err := b.ws.exec(ctx, sqlNextToken, token, token)
	if err != nil {
		return contract.Lease{}, err
	}
	if n, err := res.RowsAffected(); err != nil {
		return contract.Lease{}, err
	} else if n != 1 {
		return contract.Lease{}, &contract.Error{Code: contract.Corrupt, Msg: "the fencing-token counter did not advance"}
	}
	return contract.Lease{Scope: req.Scope, Resource: req.Resource, Owner: req.Owner, Token: token,
		AcquiredAt: fromMicros(now), ExpiresAt: fromMicros(expires), Value: req.Value}, nil
}

// RenewLease implements contract.LeaseStore. The lease keeps its stored
// value (l.Value is not read).
func (b *Backend) RenewLease(ctx context.Context, l contract.Lease, ttl time.Duration) (contract.Lease, error) {
	var out contract.Lease
	gone, err := b.write(ctx, func(ctx context.Context) error {
		now := b.now()
		var err error
		out, err = b.renew(ctx, l, now, now+micros(ttl))
		return err
	}, nil)
	if gone {
		return contract.Lease{}, err
	}
	return out, err
}

// renew runs RenewLease's statement in the write transaction.
func (b *Backend) renew(ctx context.Context, l contract.Lease, now, expires int64) (contract.Lease, error) {
	var acquired int64
	var value []byte
	found, err := b.ws.queryRow(ctx, sqlRenewLease,
		[]any{expires, string(l.Scope), l.Resource, l.Owner, l.Token, now + micros(b.tol)}, &acquired, &value)
	if err != nil {
		return contract.Lease{}, err
	}
	if !found {
		return contract.Lease{}, &contract.Error{Code: contract.Fenced, Msg: "lease is no longer held"}
	}
	return contract.Lease{Scope: l.Scope, Resource: l.Resource, Owner: l.Owner, Token: l.Token,
		AcquiredAt: fromMicros(acquired), ExpiresAt: fromMicros(expires), Value: string(value)}, nil
}

// ReleaseLease implements contract.LeaseStore.
func (b *Backend) ReleaseLease(ctx context.Context, l contract.Lease) (bool, error) {
	var released bool
	gone, err := b.write(ctx, func(ctx context.Context) error {
		res, err := b.ws.exec(ctx, sqlReleaseLease, string(l.Scope), l.Resource, l.Owner, l.Token)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		released = n > 0
		return err
	}, func(err error) {
		if released || err != nil {
			b.signalLease(err, l.Scope, l.Resource)
		}
	})
	if gone {
		return false, err
	}
	return released && err == nil, err
}

// GetLease implements contract.LeaseStore.
func (b *Backend) GetLease(ctx context.Context, scope contract.Scope, resource string) (contract.Lease, error) {
	var out contract.Lease
	err := b.read(ctx, func(ctx context.Context) error {
		st, err := b.rs.get(ctx, sqlGetLease)
		if err != nil {
			return err
		}
		out, err = scanLease(st.QueryRowContext(ctx, string(scope), resource))
		if err == sql.ErrNoRows {
			return &contract.Error{Code: contract.NotFound, Msg: "lease not found"}
		}
		return err
	})
	return out, err
}
