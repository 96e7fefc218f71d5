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
//   - Capture, a point the messages are read at while the state goes on
//     changing (a snapshot's, written on another goroutine): Table.Capture
//     starts it, Queue.Capture and Held.Capture give views of the
//     messages then (QueueView, HeldView), which share the record blocks
//     copy-on-write (cow.go), and Release ends it.
//
// Full blocks of records live outside the collected heap, in slabs of
// anonymous memory the package maps and frees itself (slab.go): a
// queue's memory goes back as it drains and when it is purged.
//
// It is deterministic: no clock, no I/O but the slabs' mappings, no
// goroutines, and no Go map order reaches a result. A capture's views may be read on
// another goroutine than the one that changes the state, and its
// Release called from any; everything else is for one goroutine.
package queue
