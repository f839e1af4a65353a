package contract_test

import (
	"testing"

	"github.com/durable-go/durable/contract"
)

// TestMigrateModeNames: String gives the DSN value that ParseMigrateMode
// reads back; anything else is refused.
func TestMigrateModeNames(t *testing.T) {
	for _, m := range []contract.MigrateMode{contract.MigrateAuto, contract.MigrateVerify, contract.MigrateOff} {
		got, ok := contract.ParseMigrateMode(m.String())
		if !ok || got != m {
			t.Errorf("ParseMigrateMode(%q) = %v, %v", m.String(), got, ok)
		}
	}
	if s := contract.MigrateMode(7).String(); s != "MigrateMode(7)" {
		t.Errorf("String of an unknown mode = %q", s)
	}
	for _, s := range []string{"", "Auto", "atuo", "on"} {
		if _, ok := contract.ParseMigrateMode(s); ok {
			t.Errorf("ParseMigrateMode(%q) accepted", s)
		}
	}
}

func TestSchemaStatus(t *testing.T) {
	for _, c := range []struct {
		st      contract.SchemaStatus
		current bool
	}{
		{contract.SchemaStatus{Version: 2, Latest: 2}, true},
		{contract.SchemaStatus{Version: 2, Latest: 2, Dirty: true}, false},
		{contract.SchemaStatus{Version: 1, Latest: 2}, false},
		{contract.SchemaStatus{Version: 3, Latest: 2}, false},
	} {
		if c.st.Current() != c.current {
			t.Errorf("%+v: Current = %v", c.st, !c.current)
		}
		err := c.st.Err()
		if c.current != (err == nil) || (err != nil && contract.CodeOf(err) != contract.SchemaMismatch) {
			t.Errorf("%+v: Err = %v", c.st, err)
		}
	}
}
