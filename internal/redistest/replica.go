package redistest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// StartReplica starts a node for t that replicates the node at master
// (host:port: a Server's Addr, or a Proxy's in front of it) and waits until
// its link to the master is up and its initial sync is done. opts are the
// replica's own options; ReplicaOf is set from master.
func StartReplica(t testing.TB, master string, opts Options) *Server {
	t.Helper()
	opts.ReplicaOf = master
	s := Start(t, opts)
	if err := s.WaitLinkUp(30 * time.Second); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	return s
}

// Info returns the fields of one INFO section of the node.
func (s *Server) Info(ctx context.Context, section string) (map[string]string, error) {
	cli := s.Client()
	defer cli.Close()
	txt, err := cli.Info(ctx, section).Result()
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, line := range strings.Split(txt, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			m[k] = v
		}
	}
	return m, nil
}

// WaitLinkUp waits until the replica reports master_link_status:up with
// its initial sync done.
func (s *Server) WaitLinkUp(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		m, err := s.Info(ctx, "replication")
		cancel()
		if err == nil && m["role"] == "slave" && m["master_link_status"] == "up" && m["master_sync_in_progress"] == "0" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("replica %s: link to its master not up within %v (%v)", s.Addr(), timeout, m)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ReplOffset returns the node's replication offset: master_repl_offset on
// a master, slave_repl_offset (what it has applied) on a replica.
func (s *Server) ReplOffset(ctx context.Context) (int64, error) {
	m, err := s.Info(ctx, "replication")
	if err != nil {
		return 0, err
	}
	v := m["master_repl_offset"]
	if m["role"] == "slave" {
		v = m["slave_repl_offset"]
	}
	return strconv.ParseInt(v, 10, 64)
}

// Promote makes a replica a master (REPLICAOF NO ONE): the manual failover
// an operator or Sentinel performs once the master is gone. What the
// replica had not received from the old master is not on the new one.
func (s *Server) Promote(ctx context.Context) error {
	cli := s.Client()
	defer cli.Close()
	if err := cli.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
		return fmt.Errorf("REPLICAOF NO ONE: %w", err)
	}
	for {
		m, err := s.Info(ctx, "replication")
		if err == nil && m["role"] == "master" {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("replica %s was not promoted: %w", s.Addr(), ctx.Err())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
