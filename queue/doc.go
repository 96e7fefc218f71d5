// Package queue stores messages for the state machine (package fsm) as
// pointer-free records the garbage collector does not scan. Unacked
// deliveries, consumers and their credit live in fsm, not here.
//
// What a caller uses:
//
//   - Message, the metadata of one queued copy (its body named by Body,
//     never held), built from a record on the way out and taken apart on
//     the way in.
//   - Queue, one queue's ready messages: a FIFO lane per priority
//     (PushBack, PushFront for returns, PopFront, Peek, Remove, Each,
//     Purge), with an expiry index on deadlines (PopExpired, CountDue,
//     EarliestDeadline, UpdateDeadlines).
//   - Held, messages held until a due time each (the delayed exchanges'):
//     a min-heap on (due, seq) whose slice order is state (Push, Append,
//     Pop, Remove, Drop, At, Key).
//   - Table, what messages share (exchange, routing key, properties, BCC
//     keys, TTL, priority, delivery mode), kept once and counted: one
//     Table serves every Queue and the Held of a state machine.
//
// It is pure and deterministic: no clock, no I/O, no goroutines, and no
// Go map order reaches a result.
package queue
