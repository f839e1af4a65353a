// Package faultmodel is the specification that durable's fault suites
// check their histories against: internal/faults (the Postgres backend
// under injected server and network faults) and backends/etcd's
// TestFaultsMemberLoss (an etcd cluster losing members). Both record every
// call the same way and check it with the same model, so that every
// backend is held to one definition of an honest outcome.
//
// It holds:
//
//   - the recorded history: one [Op] per call, with its [Input] and
//     [Output], collected by a [Recorder] and grouped by partition with
//     [ByPart];
//   - the contract's classification of a call's error ([Classify]): which
//     codes a call may return, and which outcome (applied, refused, not
//     applied, unknown) each one means;
//   - the sequential model of each kind of partition ([Model], [LinCheck]
//     with porcupine), described in model.go — a fenced semaphore's in
//     semaphore.go.
package faultmodel
