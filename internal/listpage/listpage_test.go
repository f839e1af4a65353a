package listpage_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/internal/listpage"
)

func TestFetch(t *testing.T) {
	ids := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("id-%04d", i)
		}
		return out
	}
	id := func(s string) string { return s }
	for _, tc := range []struct {
		records, limit int
		wantLen        int
		wantNext       string
	}{
		{0, 10, 0, ""},
		{5, 10, 5, ""},
		{10, 10, 10, ""},
		{11, 10, 10, "id-0009"},
		{2000, 10, 10, "id-0009"},
		{999, durable.MaxListLimit, 999, ""},
		{1000, durable.MaxListLimit, 1000, "id-0999"}, // cannot ask for more: a full page may have a next
	} {
		all := ids(tc.records)
		var asked int
		got, next, err := listpage.Fetch(tc.limit, durable.MaxListLimit, func(n int) ([]string, error) {
			asked = n
			return all[:min(n, len(all))], nil
		}, id)
		if err != nil || len(got) != tc.wantLen || next != tc.wantNext || !slices.Equal(got, all[:tc.wantLen]) {
			t.Errorf("%d records, limit %d: %d records, next %q, %v; want %d, %q", tc.records, tc.limit, len(got), next, err, tc.wantLen, tc.wantNext)
		}
		if want := min(tc.limit+1, durable.MaxListLimit); asked != want {
			t.Errorf("limit %d: asked for %d, want %d", tc.limit, asked, want)
		}
	}
}
