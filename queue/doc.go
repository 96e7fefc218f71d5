// Package queue is one queue's data structure: ready messages in order,
// unacked deliveries, consumers with prefetch credit, and an expiry index on
// deadlines. It is pure and deterministic: no clock, no I/O, no goroutines.
package queue
