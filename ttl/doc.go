// Package ttl holds the time-to-live rules: argument, property and policy
// parsing and validation, the effective TTL, deadlines, queue-lease math and
// x-death headers. It is pure: every function takes "now" as an argument.
//
// What a caller uses:
//
//   - Validation, each refusal an *Error with AMQP code 406 and RabbitMQ's
//     reply text: MessageTTLArg and ExpiresArg for the x-message-ttl and
//     x-expires arguments of queue.declare, ParseExpiration for the
//     expiration property of basic.publish, PolicyMessageTTL and
//     PolicyExpires for the message-ttl and expires policy keys.
//   - Arithmetic: Effective (the lowest of argument, policy, operator policy
//     and per-message expiration), Deadline and DeadlineOf (enqueue + TTL),
//     LeaseDue (last use + expires), Expired (deadline <= now), all
//     saturating at NoDeadline.
//   - Dead-lettering: RecordDeath merges a death into an x-death list, Cycle
//     tells whether dead-lettering to a queue is a cycle RabbitMQ drops.
//   - Index, the per-queue expiry index: a min-heap on (deadline, id) with
//     removal and update by id, and PopDue to take every due entry in order.
//
// Nothing here reads a clock, does I/O, starts a goroutine or lets the order
// of a Go map reach a result, so every replica computes the same values from
// the same log.
package ttl
