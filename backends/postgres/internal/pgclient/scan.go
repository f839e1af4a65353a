package pgclient

import (
	"database/sql/driver"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// Scan targets of NULLable columns, for the backend's row types. pgx
// plans the scan of every column again on every statement (it keeps no
// scan plans between queries), and a pointer to a pointer (a **time.Time for a NULLable
// timestamptz) is its slowest plan: three allocations and a pass through
// reflection to plan, a reflect.New to scan each non-NULL value. These
// types are planned directly by the column's codec (pgtype's
// TimestamptzScanner, Int64Scanner, TextScanner), and database/sql drivers
// (lib/pq, pgx's stdlib) scan them through sql.Scanner, taking what those
// drivers return for the column: the value or nil (and assign, on lib/pq's
// prepared path, hands them the same). Value returns the same, for the
// statements' mock rows (the backend's mockspec).

// NullTime is a NULLable timestamptz column.
type NullTime struct {
	Time  time.Time
	Valid bool
}

// ScanTimestamptz implements pgtype.TimestamptzScanner. An infinite
// timestamp is an error, as it is for a *time.Time.
func (n *NullTime) ScanTimestamptz(v pgtype.Timestamptz) error {
	switch {
	case !v.Valid:
		*n = NullTime{}
	case v.InfinityModifier != pgtype.Finite:
		return errors.New("cannot scan an infinite timestamp into a time")
	default:
		*n = NullTime{Time: v.Time, Valid: true}
	}
	return nil
}

// Scan implements sql.Scanner.
func (n *NullTime) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		*n = NullTime{}
	case time.Time:
		*n = NullTime{Time: v, Valid: true}
	default:
		return fmt.Errorf("cannot scan a %T into a timestamp", src)
	}
	return nil
}

// Value implements driver.Valuer.
func (n NullTime) Value() (driver.Value, error) {
	if !n.Valid {
		return nil, nil
	}
	return n.Time, nil
}

// UTC is the time in UTC, the zero time for NULL.
func (n NullTime) UTC() time.Time {
	if !n.Valid {
		return time.Time{}
	}
	return n.Time.UTC()
}

// NullInt64 is a NULLable integer column.
type NullInt64 struct {
	Int64 int64
	Valid bool
}

// ScanInt64 implements pgtype.Int64Scanner.
func (n *NullInt64) ScanInt64(v pgtype.Int8) error {
	*n = NullInt64{Int64: v.Int64, Valid: v.Valid}
	return nil
}

// Scan implements sql.Scanner.
func (n *NullInt64) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		*n = NullInt64{}
	case int64:
		*n = NullInt64{Int64: v, Valid: true}
	default:
		return fmt.Errorf("cannot scan a %T into an integer", src)
	}
	return nil
}

// Value implements driver.Valuer.
func (n NullInt64) Value() (driver.Value, error) {
	if !n.Valid {
		return nil, nil
	}
	return n.Int64, nil
}

// NullString is a NULLable text column.
type NullString struct {
	String string
	Valid  bool
}

// ScanText implements pgtype.TextScanner.
func (n *NullString) ScanText(v pgtype.Text) error {
	*n = NullString{String: v.String, Valid: v.Valid}
	return nil
}

// Scan implements sql.Scanner.
func (n *NullString) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		*n = NullString{}
	case string:
		*n = NullString{String: v, Valid: true}
	case []byte:
		*n = NullString{String: string(v), Valid: true}
	default:
		return fmt.Errorf("cannot scan a %T into a string", src)
	}
	return nil
}

// Value implements driver.Valuer.
func (n NullString) Value() (driver.Value, error) {
	if !n.Valid {
		return nil, nil
	}
	return n.String, nil
}
