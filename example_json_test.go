package durable_test

import (
	"context"
	"fmt"
	"log"

	"github.com/durable-go/durable"
)

type checkout struct {
	Items []string `json:"items"`
	Paid  bool     `json:"paid"`
}

// StepJSON changes a workflow's snapshot as a Go value: it decodes the
// snapshot into a checkout, lets apply change it, and writes it back
// encoded with compare-and-set, retrying on a conflict.
func ExampleStepJSON() {
	ctx := context.Background()
	store, _ := durable.Open(ctx, "memory://")
	defer store.Close()

	if _, err := durable.CreateJSON(ctx, store, durable.Workflow{ID: "order-9"}, checkout{Items: []string{"book"}}); err != nil {
		log.Fatal(err)
	}
	wf, c, err := durable.StepJSON(ctx, store, "", "order-9", durable.StepOptions{},
		func(cur durable.Workflow, c *checkout) (durable.Status, error) {
			// c is decoded afresh for every attempt.
			c.Items = append(c.Items, "pen")
			c.Paid = true
			return durable.StatusRunning, nil
		})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(wf.Revision, wf.Status, c.Items, c.Paid)
	fmt.Println(string(wf.Snapshot))

	_, again, _ := durable.GetJSON[checkout](ctx, store, "", "order-9")
	fmt.Println(again.Items)
	// Output:
	// 2 running [book pen] true
	// {"items":["book","pen"],"paid":true}
	// [book pen]
}
