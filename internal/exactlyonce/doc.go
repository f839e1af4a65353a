// Package exactlyonce holds the tests that measure durable's exactly-once
// promise for effects in the caller's own database, with real processes
// and real databases:
//
//   - TestKillBetweenEffectAndCompletion runs workers in a child process
//     that records a payment row per idempotency key and SIGKILLs the child
//     at random points, many times, on PostgreSQL (pgx, lib/pq, pgx's
//     stdlib) and SQLite. On the transactional path (durable.DoTx: the
//     payment and the outcome commit together) it requires 0 double
//     effects and 0 lost outcomes; on the plain path (durable's Do, the
//     payment committed on its own before CompleteKey) it counts the double
//     effects the README's hazard paragraph describes, and prints both
//     counts side by side.
//   - TestLostClaimRepliesRecoverTheirOwnClaim loses the replies of
//     ClaimKey calls that the server applied, and checks that every
//     logical call still ends completed exactly once, without ErrInFlight
//     (through Do) or 409 (through the middleware);
//     TestLostClaimRepliesOnTheWire does the same with the reply lost on
//     the wire: a fault proxy (internal/faultproxy) holds the server's
//     answer and cuts the connection, on every client library.
//
// The counts go to the file named by DURABLE_FAULT_SUMMARY (as "KILLS …"
// lines), which CI prints. DURABLE_KILL_ROUNDS sets how many times each
// configuration's child is killed (default 10).
//
// It has no code of its own.
package exactlyonce
