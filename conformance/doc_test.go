package conformance

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestChecklistNamesEveryScenario keeps the package documentation, the
// backend author's checklist, in step with the scenarios: each one is
// named there, and every name there is a scenario.
func TestChecklistNamesEveryScenario(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(doc), "\n// ", " ")
	have := map[string]bool{}
	for _, g := range groups() {
		for _, sc := range g.scenarios {
			name := g.name + "/" + sc.name
			if have[name] {
				t.Errorf("two scenarios are named %s", name)
			}
			have[name] = true
			if !regexp.MustCompile(`\b` + regexp.QuoteMeta(name) + `\b`).MatchString(text) {
				t.Errorf("the checklist in doc.go does not name %s", name)
			}
		}
	}
	for _, m := range regexp.MustCompile(`\b(Workflows|Values|Keys|Tokens|Tombstones|Tx|Leases|LeaseValues|Permits|Watch|Scopes|Cleanup|Listing|Backend|Input|RacingWrites)/([A-Z][A-Za-z]+)\b`).FindAllString(text, -1) {
		if !have[m] {
			t.Errorf("the checklist in doc.go names %s, which is not a scenario", m)
		}
	}
}

func TestManualClock(t *testing.T) {
	c := NewManualClock()
	if !c.Now().Equal(ClockStart) {
		t.Fatalf("Now() = %v, want %v", c.Now(), ClockStart)
	}
	if ClockStart.Truncate(1000) != ClockStart || ClockStart.Truncate(1e9) == ClockStart {
		t.Fatalf("ClockStart %v must be a whole microsecond and not a whole second", ClockStart)
	}
	c.Advance(1500 * 1e6)
	if got := c.Now().Sub(ClockStart); got != 1500*1e6 {
		t.Fatalf("after Advance(1.5s) the clock moved %v", got)
	}
}
