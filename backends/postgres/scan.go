package postgres

import (
	"database/sql/driver"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// The scan targets of NULLable columns. pgx plans the scan of every
// column again on every statement (it keeps no scan plans between
// queries), and a pointer to a pointer (a **time.Time for a NULLable
// timestamptz) is its slowest plan: three allocations and a pass through
// reflection to plan, a reflect.New to scan each non-NULL value. These
// types are planned directly by the column's codec (pgtype's
// TimestamptzScanner, Int64Scanner, TextScanner), and database/sql drivers
// (lib/pq, pgx's stdlib) scan them through sql.Scanner, taking what those
// drivers return for the column: the value or nil. Value returns the same,
// for the statements' mock rows (mockspec).

// nullTime is a NULLable timestamptz column.
type nullTime struct {
	t     time.Time
	valid bool
}

// ScanTimestamptz implements pgtype.TimestamptzScanner. An infinite
// timestamp is an error, as it is for a *time.Time.
func (n *nullTime) ScanTimestamptz(v pgtype.Timestamptz) error {
	switch {
	case !v.Valid:
		*n = nullTime{}
	case v.InfinityModifier != pgtype.Finite:
		return errors.New("cannot scan an infinite timestamp into a time")
	default:
		*n = nullTime{t: v.Time, valid: true}
	}
	return nil
}

// Scan implements sql.Scanner.
func (n *nullTime) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		*n = nullTime{}
	case time.Time:
		*n = nullTime{t: v, valid: true}
	default:
		return fmt.Errorf("cannot scan a %T into a timestamp", src)
	}
	return nil
}

// Value implements driver.Valuer.
func (n nullTime) Value() (driver.Value, error) {
	if !n.valid {
		return nil, nil
	}
	return n.t, nil
}

// utc is the time in UTC, the zero time for NULL.
func (n nullTime) utc() time.Time {
	if !n.valid {
		return time.Time{}
	}
	return n.t.UTC()
}

// nullInt64 is a NULLable integer column.
type nullInt64 struct {
	v     int64
	valid bool
}

// ScanInt64 implements pgtype.Int64Scanner.
func (n *nullInt64) ScanInt64(v pgtype.Int8) error {
	*n = nullInt64{v: v.Int64, valid: v.Valid}
	return nil
}

// Scan implements sql.Scanner.
func (n *nullInt64) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		*n = nullInt64{}
	case int64:
		*n = nullInt64{v: v, valid: true}
	default:
		return fmt.Errorf("cannot scan a %T into an integer", src)
	}
	return nil
}

// Value implements driver.Valuer.
func (n nullInt64) Value() (driver.Value, error) {
	if !n.valid {
		return nil, nil
	}
	return n.v, nil
}

// nullString is a NULLable text column.
type nullString struct {
	s     string
	valid bool
}

// ScanText implements pgtype.TextScanner.
func (n *nullString) ScanText(v pgtype.Text) error {
	*n = nullString{s: v.String, valid: v.Valid}
	return nil
}

// Scan implements sql.Scanner.
func (n *nullString) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		*n = nullString{}
	case string:
		*n = nullString{s: v, valid: true}
	case []byte:
		*n = nullString{s: string(v), valid: true}
	default:
		return fmt.Errorf("cannot scan a %T into a string", src)
	}
	return nil
}

// Value implements driver.Valuer.
func (n nullString) Value() (driver.Value, error) {
	if !n.valid {
		return nil, nil
	}
	return n.s, nil
}
