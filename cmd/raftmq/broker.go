package main

import (
	"github.com/raftmq/raftmq/amqp"
	"github.com/raftmq/raftmq/cluster/broker"
)

// The AMQP server is served from the node (package broker): it submits
// commands, reads the applied state, carries direct replies to other
// nodes through it, and learns of its silences.
var _ interface {
	amqp.Broker
	amqp.Replier
	amqp.Silences
} = (*broker.Broker)(nil)
