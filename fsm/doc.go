// Package fsm is the deterministic broker state machine: it decodes a log
// entry, applies each command to the state (vhosts, users, exchanges, queues,
// bindings, consumers, policies, messages) and emits effects. Given the same
// log it produces byte-identical state on every node: it never reads a clock,
// does I/O, spawns goroutines or lets Go map order leak into state.
package fsm
