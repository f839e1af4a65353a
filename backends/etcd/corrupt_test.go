package etcd

import (
	"strings"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/contract"
)

// TestCorruptRecords writes undecodable values under the backend's keys
// (as something outside durable might) and checks that reads fail closed
// with Corrupt, without the stored bytes in the message, and that
// DeleteRecord removes each record so the name can be used again.
func TestCorruptRecords(t *testing.T) {
	c := startCluster(t, 1)
	ctx := t.Context()
	cli := c.client(t)
	be, err := NewBackend(cli, Options{Prefix: "corrupt"})
	if err != nil {
		t.Fatal(err)
	}
	s, err := durable.New(be)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const junk = "Junk9Bytes"
	for _, k := range []string{
		be.key(nsWorkflow, "", "wf-1"), be.key(nsCreated, "", "wf-1"),
		be.key(nsKey, "", "key-1"), be.key(nsKeyToken, "", "key-1"),
		be.key(nsLease, "", "res-1"),
	} {
		if _, err := cli.Put(ctx, k, junk); err != nil {
			t.Fatal(err)
		}
	}
	check := func(what string, err error) {
		t.Helper()
		if contract.CodeOf(err) != contract.Corrupt {
			t.Errorf("%s = %v, want Corrupt", what, err)
		} else if strings.Contains(err.Error(), junk) {
			t.Errorf("%s error shows the stored bytes: %v", what, err)
		}
	}
	_, err = s.GetWorkflow(ctx, "", "wf-1")
	check("GetWorkflow", err)
	_, err = s.ListWorkflows(ctx, contract.ListQuery{})
	check("ListWorkflows", err)
	_, err = s.GetKey(ctx, contract.KeyRef{Key: "key-1"})
	check("GetKey", err)
	_, err = s.ClaimKey(ctx, contract.ClaimRequest{KeyRef: contract.KeyRef{Key: "key-1"}, Fingerprint: "fp", TTL: 5 * time.Second})
	check("ClaimKey", err)
	_, err = s.GetLease(ctx, "", "res-1")
	check("GetLease", err)

	for _, d := range []struct {
		kind contract.RecordKind
		id   string
	}{{contract.KindWorkflow, "wf-1"}, {contract.KindKey, "key-1"}, {contract.KindLease, "res-1"}} {
		found, err := s.DeleteRecord(ctx, d.kind, "", d.id)
		if err != nil || !found {
			t.Errorf("DeleteRecord(%s) = %v, %v; want true", d.kind, found, err)
		}
	}
	if _, err := s.CreateWorkflow(ctx, contract.Workflow{ID: "wf-1"}); err != nil {
		t.Errorf("CreateWorkflow after DeleteRecord: %v", err)
	}
	if _, err := s.ClaimKey(ctx, contract.ClaimRequest{KeyRef: contract.KeyRef{Key: "key-1"}, Fingerprint: "fp", TTL: 5 * time.Second}); err != nil {
		t.Errorf("ClaimKey after DeleteRecord: %v", err)
	}
	if _, err := s.AcquireLease(ctx, contract.LeaseRequest{Resource: "res-1", Owner: "o", TTL: 5 * time.Second}); err != nil {
		t.Errorf("AcquireLease after DeleteRecord: %v", err)
	}
}
