package election_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/backends/memory"
	"github.com/durable-go/durable/election"
)

// A candidate campaigns, makes a write fenced by its term, and resigns; the
// same write with the old fence is then rejected.
func ExampleCampaign() {
	ctx := context.Background()
	store, err := memory.Open(memory.Options{})
	if err != nil {
		panic(err)
	}
	defer store.Close()
	if _, err := store.CreateWorkflow(ctx, durable.Workflow{ID: "schedule", Status: durable.StatusRunning}); err != nil {
		panic(err)
	}
	plan := func(cur durable.Workflow) (durable.Change, error) {
		return durable.Change{Status: durable.StatusRunning, Snapshot: append(cur.Snapshot, '+')}, nil
	}

	term, err := election.Campaign(ctx, store, election.Config{Name: "scheduler", Candidate: "node-1", Value: "10.0.0.1:8080"})
	if err != nil {
		panic(err)
	}
	fmt.Println("leader:", term.Lease().Owner, "token", term.Lease().Token)
	_, err = store.Step(term.Context(), "", "schedule", durable.StepOptions{Fence: term.Fence()}, plan)
	fmt.Println("fenced write while leading:", err)

	if err := term.Resign(ctx); err != nil {
		panic(err)
	}
	fmt.Println("term ended:", term.Err())
	_, err = store.Step(ctx, "", "schedule", durable.StepOptions{Fence: term.Fence()}, plan)
	fmt.Println("fenced write after resigning rejected:", errors.Is(err, durable.ErrFenced))
	// Output:
	// leader: node-1 token 1
	// fenced write while leading: <nil>
	// term ended: election: resigned
	// fenced write after resigning rejected: true
}

// An observer sees no leader, then a leader, then no leader after it
// resigns.
func ExampleObserve() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	store, err := memory.Open(memory.Options{})
	if err != nil {
		panic(err)
	}
	defer store.Close()
	changes, err := election.Observe(ctx, store, "", "scheduler")
	if err != nil {
		panic(err)
	}
	show := func(l election.Leader) {
		if l.IsZero() {
			fmt.Println("no leader")
		} else {
			fmt.Println("leader:", l.Owner, "token", l.Token, "at", l.Value)
		}
	}
	show(<-changes)

	term, err := election.Campaign(ctx, store, election.Config{Name: "scheduler", Candidate: "node-1", Value: "10.0.0.1:8080"})
	if err != nil {
		panic(err)
	}
	show(<-changes)
	if err := term.Resign(ctx); err != nil {
		panic(err)
	}
	show(<-changes)
	// Output:
	// no leader
	// leader: node-1 token 1 at 10.0.0.1:8080
	// no leader
}
