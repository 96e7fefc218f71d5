// Package amqp speaks AMQP 0-9-1 to clients: the wire codec (generated from
// the specification) and the connection and channel server, which turns each
// state-changing method into a log command and performs deliveries.
package amqp
