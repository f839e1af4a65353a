package claimrule

import "testing"

// TestDecide states the rule case by case, for every record a backend can
// hold (Lapsed only on a live claim, Completed never with Lapsed), and
// checks Decide on each, with and without the facts that must not matter.
func TestDecide(t *testing.T) {
	for _, c := range []struct {
		name string
		f    Facts
		want Outcome
	}{
		{"no record", 0, New},
		{"completed past its retention, same request", Stored{Completed: true, Match: true}.Facts(), New},
		{"completed past its retention, another request", Stored{Completed: true}.Facts(), New},
		{"completed, same request", Stored{Live: true, Completed: true, Match: true}.Facts(), Replay},
		{"completed, another request", Stored{Live: true, Completed: true}.Facts(), Conflict},
		{"claim held, same request", Stored{Live: true, Match: true}.Facts(), InFlight},
		{"claim held, another request", Stored{Live: true}.Facts(), Conflict},
		{"claim abandoned, same request", Stored{Live: true, Lapsed: true, Match: true}.Facts(), Reclaim},
		{"claim abandoned, another request", Stored{Live: true, Lapsed: true}.Facts(), Conflict},
		{"own claim (same token), same request", Stored{Live: true, Match: true, Own: true}.Facts(), Held},
		{"own claim lapsed, same request", Stored{Live: true, Lapsed: true, Match: true, Own: true}.Facts(), Held},
		{"own token, another request", Stored{Live: true, Own: true}.Facts(), Conflict},
		{"tombstone, same request", Stored{Live: true, Completed: true, Expired: true, Match: true}.Facts(), Gone},
		{"tombstone, another request", Stored{Live: true, Completed: true, Expired: true}.Facts(), Conflict},
		{"tombstone past ForgetAt, same request", Stored{Completed: true, Expired: true, Match: true}.Facts(), New},
	} {
		if got := Decide(c.f); got != c.want {
			t.Errorf("%s (facts %07b): Decide = %v, want %v", c.name, c.f, got, c.want)
		}
		if got := Decide(c.f); got.Takes() != (c.want == New || c.want == Reclaim || c.want == Held) {
			t.Errorf("%s: %v.Takes() = %v", c.name, got, got.Takes())
		}
	}
	// Without Found nothing else counts; bits beyond the facts are ignored.
	for f := Facts(0); f <= all; f++ {
		if f&Found == 0 && Decide(f) != New {
			t.Errorf("facts %07b without Found: Decide = %v, want New", f, Decide(f))
		}
		if Decide(f|^all) != Decide(f) {
			t.Errorf("facts %07b: unknown bits change the outcome", f)
		}
	}
}

// TestRuleLinesAllDecide: every line of rule decides some combination of
// facts (none is shadowed by the lines before it).
func TestRuleLinesAllDecide(t *testing.T) {
	for i, l := range rule {
		reached := false
		for f := Facts(0); f <= all && !reached; f++ {
			for j, m := range rule {
				if f&m.has == m.has && f&m.lacks == 0 {
					reached = i == j
					break
				}
			}
		}
		if !reached {
			t.Errorf("rule line %d (%+v) decides no combination of facts", i, l)
		}
	}
}

func TestSameRequest(t *testing.T) {
	for _, c := range []struct {
		fp, wf, reqFP, reqWF string
		want                 bool
	}{
		{"fp", "", "fp", "", true},
		{"fp", "wf", "fp", "", true}, // the claim names no workflow: any
		{"fp", "wf", "fp", "wf", true},
		{"fp", "wf", "fp", "other", false},
		{"fp", "", "fp", "wf", false},
		{"fp", "wf", "other", "wf", false},
		{"fp", "wf", "other", "", false},
	} {
		if got := SameRequest(c.fp, c.wf, c.reqFP, c.reqWF); got != c.want {
			t.Errorf("SameRequest(%q, %q, %q, %q) = %v, want %v", c.fp, c.wf, c.reqFP, c.reqWF, got, c.want)
		}
	}
}
