// Package faults is durable's fault suite: it drives the public API
// (durable.Open and *durable.Store on the Postgres backend) with concurrent
// clients while faults are injected into a private PostgreSQL cluster and
// the network in front of it, records every call, and checks that every
// outcome the Store reported was honest:
//
//   - every error is a *contract.Error with a known code;
//   - a write reported Unavailable or Canceled is absent afterwards, and an
//     acknowledged write is present or superseded (checked against the
//     database directly);
//   - the histories are linearizable (porcupine) against a model of leases,
//     fenced semaphores (Store.AcquirePermit: never more than N holders,
//     one token sequence across the permits), fenced compare-and-set and
//     idempotency claims (package
//     internal/faultmodel, shared with the etcd backend's fault test),
//     where OutcomeUnknown is "may or may not have happened" and
//     Unavailable/Canceled is "did not";
//   - fencing tokens strictly increase per resource (per semaphore, across
//     its permits);
//   - the callers were never told that more than N grants of a semaphore
//     of N permits (one of a lease) held at once;
//   - Store.Do never runs two handlers for one key at the same time;
//   - no goroutine outlives Close, no call outlives its deadline by much, and
//     no password reaches an error text or a log line.
//
// The stores coalesce their concurrent writes (the Postgres backend's
// default on pgx and pgx-stdlib: one pipelined transaction per batch; half
// the stores keep one batch in flight at a time, which makes larger
// batches), so the faults also land on batches in flight; each summary
// line counts the batches (coalesce{…}).
//
// The package has no non-test code: the model the histories are checked
// against is internal/faultmodel, the fault-injecting TCP proxy
// internal/faultproxy. See faults_test.go for how to run the suite and its
// knobs.
package faults
