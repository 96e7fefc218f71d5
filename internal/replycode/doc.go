// Package replycode holds the AMQP 0-9-1 reply codes (404 NOT_FOUND, 406
// PRECONDITION_FAILED, ...), generated from the specification with the
// codec of package wire.
//
// It is the ground floor of raftmq: it imports nothing, so the state
// machine (a refused command's Result), the AMQP server, the TTL rules and
// the operator front ends all name a code the same way, and the operations
// layer can carry it to the management API and the gRPC service without
// writing it as a number or reading it back out of text.
//
// The constants are untyped so that they fit both the wire's uint16 reply
// code and a command Result's uint32.
package replycode
