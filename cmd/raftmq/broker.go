package main

import (
	"github.com/raftmq/raftmq/amqp"
	"github.com/raftmq/raftmq/cluster/broker"
)

// The AMQP server is served from the node (package broker): it submits
// commands, reads the applied state, carries direct replies to other
// nodes through it, learns of its silences, and counts a limited vhost's
// connections across the cluster.
var _ interface {
	amqp.Broker
	amqp.Replier
	amqp.Silences
	amqp.ConnectionLimiter
} = (*broker.Broker)(nil)
