// Package e2e holds end-to-end tests: real raftmq processes driven by real
// AMQP clients.
package e2e
