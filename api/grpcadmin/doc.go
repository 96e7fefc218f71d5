// Package grpcadmin serves the raftmq.v1.Admin gRPC service of one node
// (New), which raftmqctl and the other nodes call.
//
// Each method is the ops.Service operation of that name; an *ops.Error
// becomes a status of its kind's code, its message the reply code and text
// of a refused command ("406 PRECONDITION_FAILED - ...") so that clients
// read RabbitMQ's reply.
//
// Auth guards the service as gRPC interceptors: beyond loopback (or always)
// a caller needs an administrator's username and password, except other
// nodes, which present a certificate naming a member (see
// docs/security.md).
package grpcadmin
