package main

import (
	"context"
	"time"

	"github.com/raftmq/raftmq/amqp"
	"github.com/raftmq/raftmq/api/metrics"
	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// broker adapts a cluster node to what the AMQP server needs: commands go
// through the log, credentials and vhosts are read from the applied state.
type broker struct {
	node    *cluster.Node
	metrics *metrics.Metrics
}

// The AMQP server carries direct replies to other nodes through the node,
// and learns of its silences.
var _ interface {
	amqp.Broker
	amqp.Replier
	amqp.Silences
} = (*broker)(nil)

// SilenceEpoch counts the node's silences (amqp.Silences).
func (b *broker) SilenceEpoch() uint64 { return b.node.SilenceEpoch() }

func (b *broker) NodeID() string { return b.node.NodeID() }

func (b *broker) Submit(ctx context.Context, cmd *proto.Command) (*proto.Result, error) {
	start := time.Now()
	defer func() { b.metrics.ObserveApply(time.Since(start)) }()
	return b.node.Submit(ctx, cmd)
}

func (b *broker) SubmitBatch(ctx context.Context, cmds []*proto.Command) ([]*proto.Result, error) {
	start := time.Now()
	defer func() { b.metrics.ObserveApply(time.Since(start)) }()
	return b.node.SubmitBatch(ctx, cmds)
}

// Reply carries a direct reply to another node's channel (amqp.Replier).
func (b *broker) Reply(ctx context.Context, node string, r *proto.DirectReply) (bool, error) {
	return b.node.Reply(ctx, node, r)
}

func (b *broker) Authenticate(user, password string) (tags []string, ok bool) {
	var hash []byte
	b.node.View(func(m *fsm.Machine) {
		hash, tags, ok = m.User(user)
	})
	if !ok || !fsm.CheckPassword(hash, fsm.PasswordSaltLen, password) {
		return nil, false
	}
	return tags, true
}

func (b *broker) Unacked(ch *proto.ChannelRef, tags []uint64) (out []uint64) {
	b.node.View(func(m *fsm.Machine) { out = m.Unacked(ch, tags) })
	return out
}

func (b *broker) VhostExists(name string) (ok bool) {
	b.node.View(func(m *fsm.Machine) { ok = m.VhostExists(name) })
	return ok
}

func (b *broker) Permission(user, vhost string) (configure, write, read string, ok bool) {
	b.node.View(func(m *fsm.Machine) { configure, write, read, ok = m.Permission(user, vhost) })
	return configure, write, read, ok
}

func (b *broker) UserExists(name string) (ok bool) {
	b.node.View(func(m *fsm.Machine) { _, _, ok = m.User(name) })
	return ok
}

// QueueCount counts a vhost's queues in the applied state; it walks them,
// and runs only when a queue limit is set.
func (b *broker) QueueCount(vhost, name string) (count int, exists bool) {
	if vhost == "" {
		// Queues("") lists every vhost's queues.
		return 0, false
	}
	b.node.View(func(m *fsm.Machine) {
		count = len(m.Queues(vhost))
		_, exists = m.Queue(vhost, name)
	})
	return count, exists
}
