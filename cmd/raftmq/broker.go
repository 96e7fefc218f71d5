package main

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/raftmq/raftmq/amqp"
	"github.com/raftmq/raftmq/api/metrics"
	"github.com/raftmq/raftmq/api/ops"
	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// broker adapts a cluster node to what the AMQP server needs: commands go
// through the log, credentials and vhosts are read from the applied state.
type broker struct {
	node    *cluster.Node
	metrics *metrics.Metrics
	// ops asks the other nodes for their connections (PeerConnections);
	// set once the admin service exists.
	ops atomic.Pointer[ops.Service]
}

// The AMQP server carries direct replies to other nodes through the node,
// learns of its silences, and counts a limited vhost's connections across
// the cluster.
var _ interface {
	amqp.Broker
	amqp.Replier
	amqp.Silences
	amqp.ConnectionLimiter
} = (*broker)(nil)

// The node tells the AMQP server the silence epoch of each delivery.
var _ cluster.EpochSink = (*amqp.Server)(nil)

// SilenceEpoch counts the node's silences (amqp.Silences).
func (b *broker) SilenceEpoch() uint64 { return b.node.SilenceEpoch() }

// VhostConnectionLimit reads the vhost's max-connections from the applied
// state (amqp.ConnectionLimiter).
func (b *broker) VhostConnectionLimit(vhost string) (max int64, ok bool) {
	b.node.View(func(m *fsm.Machine) { max, ok = m.VhostLimit(vhost, fsm.LimitMaxConnections) })
	return max, ok
}

// PeerConnections counts the vhost's connections the other nodes report
// (amqp.ConnectionLimiter); none before the admin service exists.
func (b *broker) PeerConnections(ctx context.Context, vhost string) int {
	if s := b.ops.Load(); s != nil {
		return s.PeerConnections(ctx, vhost)
	}
	return 0
}

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
