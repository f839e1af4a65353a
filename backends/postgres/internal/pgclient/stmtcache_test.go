package pgclient

import (
	"database/sql/driver"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestAssignConvertsAsDatabaseSQL(t *testing.T) {
	var (
		s   string
		sp  *string
		n   int64
		np  *int64
		ok  bool
		bs  []byte
		tm  time.Time
		tmp *time.Time
	)
	buf := []byte("abc")
	now := time.Now()
	for _, c := range []struct {
		dst any
		v   driver.Value
	}{{&s, "x"}, {&s, []byte("y")}, {&sp, nil}, {&sp, "z"}, {&n, int64(7)}, {&np, nil}, {&np, int64(8)},
		{&ok, true}, {&bs, buf}, {&tm, now}, {&tmp, nil}, {&tmp, now}} {
		if err := assign(c.dst, c.v); err != nil {
			t.Errorf("assign(%T, %T): %v", c.dst, c.v, err)
		}
	}
	buf[0] = 'X'
	if string(bs) != "abc" {
		t.Errorf("a []byte scanned %q: it must be a copy of the driver's buffer", bs)
	}
	if tmp == nil || !tmp.Equal(now) || np == nil || *np != 8 {
		t.Errorf("pointers: %v %v", tmp, np)
	}
	if err := assign(&bs, nil); err != nil || bs != nil {
		t.Errorf("NULL into []byte: %v, %v; want nil, nil", bs, err)
	}
	// NULL into a non-pointer, or a value of another type, is an error
	// whose text quotes no value.
	for _, c := range []struct {
		dst any
		v   driver.Value
	}{{&s, nil}, {&n, nil}, {&ok, nil}, {&tm, nil}, {&n, "secret-value"}, {&s, int64(12345)}} {
		err := assign(c.dst, c.v)
		if !errors.Is(err, errScan) || strings.Contains(err.Error(), "secret") || strings.Contains(err.Error(), "12345") {
			t.Errorf("assign(%T, %T) = %v, want errScan", c.dst, c.v, err)
		}
	}
	if v, ok := driverArg(3); !ok || v != int64(3) {
		t.Errorf("driverArg(int) = %v, %v", v, ok)
	}
	if v, ok := driverArg([]byte(nil)); !ok || v != nil {
		t.Errorf("driverArg(nil []byte) = %v, %v; want NULL", v, ok)
	}
	if _, ok := driverArg(struct{}{}); ok {
		t.Error("driverArg accepts a struct")
	}
}
