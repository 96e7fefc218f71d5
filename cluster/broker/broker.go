// Package broker serves the AMQP server from a cluster node: commands go
// through the node's log (Node.Submit), credentials, vhosts, queues and
// unacknowledged tags are read from its applied state (Node.View). It is
// the one implementation of amqp.Broker over a real node: the raftmq
// command and the tests that run AMQP over in-process nodes use it alike.
// It imports the node, never the AMQP server: it meets amqp.Broker,
// amqp.Replier, amqp.Silences and amqp.ConnectionLimiter by their
// methods.
package broker

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/group"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// Broker is a node as the AMQP server sees it.
type Broker struct {
	node *cluster.Node
	// observe is told how long each submit took (nil: no one).
	observe func(time.Duration)
	// peers counts a vhost's connections on the other nodes; set once
	// the service that asks them exists (SetPeerConnections).
	peers atomic.Pointer[func(ctx context.Context, vhost string) int]
	// consumers remembers which queue group each consumer of this
	// node's channels consumes in (route.go).
	consumers consumers
	// placed is set once the metadata log places queues, which it then
	// does for good.
	placed atomic.Bool
	// reported stands between a submit's outcome and Submit (nil: the
	// outcome as it is); tests report a commit's outcome as unknown with
	// it, as a leader that loses its place does.
	reported func(cmd *proto.Command, res *proto.Result, err error) (*proto.Result, error)
}

// New serves the AMQP server from node; observe, when set, is told how
// long each submit took (the apply-latency metric).
func New(node *cluster.Node, observe func(time.Duration)) *Broker {
	return &Broker{node: node, observe: observe}
}

// NodeID names this node in channel, connection and consumer references.
func (b *Broker) NodeID() string { return b.node.NodeID() }

// SetPeerConnections gives the broker what counts a vhost's connections
// on the other nodes (the admin service, which asks them).
func (b *Broker) SetPeerConnections(count func(ctx context.Context, vhost string) int) {
	b.peers.Store(&count)
}

// VhostConnectionLimit reads the vhost's max-connections from the applied
// state (amqp.ConnectionLimiter).
func (b *Broker) VhostConnectionLimit(vhost string) (max int64, ok bool) {
	b.node.View(func(m *fsm.Machine) { max, ok = m.VhostLimit(vhost, fsm.LimitMaxConnections) })
	return max, ok
}

// PeerConnections counts the vhost's connections the other nodes report
// (amqp.ConnectionLimiter); none before SetPeerConnections.
func (b *Broker) PeerConnections(ctx context.Context, vhost string) int {
	if count := b.peers.Load(); count != nil {
		return (*count)(ctx, vhost)
	}
	return 0
}

// SilenceEpoch counts the node's silences (amqp.Silences).
func (b *Broker) SilenceEpoch() uint64 { return b.node.SilenceEpoch() }

// Refusing says why the node takes no clients now (amqp.Refuser).
func (b *Broker) Refusing() string { return b.node.Refusing() }

// Submit proposes cmd through the log of the group it concerns
// (route.go): the metadata log (Node.Submit) unless the log places
// queues in queue groups.
func (b *Broker) Submit(ctx context.Context, cmd *proto.Command) (*proto.Result, error) {
	if b.observe != nil {
		defer b.timed(time.Now())
	}
	if r := b.refusal(cmd); r != nil {
		return r, nil
	}
	res, err := b.submitOnce(ctx, cmd)
	for tries := 1; tries < idempotentTries && again(cmd, err) && ctx.Err() == nil; tries++ {
		res, err = b.submitOnce(ctx, cmd)
	}
	return res, err
}

func (b *Broker) submitOnce(ctx context.Context, cmd *proto.Command) (res *proto.Result, err error) {
	if !b.placing() {
		res, err = b.node.Submit(ctx, cmd)
	} else {
		var all []*proto.Result
		if all, err = b.submitRouted(ctx, []*proto.Command{cmd}); err == nil {
			res = all[0]
		}
	}
	if b.reported != nil {
		return b.reported(cmd, res, err)
	}
	return res, err
}

// idempotentTries bounds how often Submit proposes a command that may be
// proposed again (again): each try waits for a leader of its own, and
// three leaders lost in a row say more about the cluster than a fourth
// try would.
const idempotentTries = 3

// again reports whether cmd, whose submission failed with err, is
// proposed again: its outcome is unknown (its leader lost its place, in
// the metadata log or a queue group's), the node is not closing, and a
// second commit of cmd leaves the state and its answer as one commit
// does. Those are the declares of a named queue or an exchange, binds and
// unbinds, as RabbitMQ makes them: a client that declares its topology
// at every start relies on it, and a leader change is no reason to close
// its connection. A server-named queue is not among them (a second
// commit names a second queue), nor a delete or a purge (the second
// answers with no messages), nor what names deliveries (the channel
// resolves those from the log).
func again(cmd *proto.Command, err error) bool {
	if err == nil || !errors.Is(err, cluster.ErrOutcomeUnknown) || errors.Is(err, group.ErrClosed) {
		return false
	}
	switch c := cmd.GetCmd().(type) {
	case *proto.Command_QueueDeclare:
		return c.QueueDeclare.GetName() != ""
	case *proto.Command_ExchangeDeclare, *proto.Command_Bind, *proto.Command_Unbind:
		return true
	}
	return false
}

// refusal is RabbitMQ's refusal of cmd that is made before any log: a
// queue declare for what it says on its own, a bind to a headers exchange
// with an x-match it does not know (as this node's metadata has the
// exchange; the leader checks the bind again against its own).
func (b *Broker) refusal(cmd *proto.Command) *proto.Result {
	var r *proto.Result
	switch c := cmd.GetCmd().(type) {
	case *proto.Command_QueueDeclare:
		r = fsm.DeclareRefusal(c.QueueDeclare)
	case *proto.Command_Bind:
		b.node.View(func(m *fsm.Machine) { r = m.BindRefusal(c.Bind) })
	}
	return r
}

// SubmitBatch proposes cmds as one unit (Node.SubmitBatch), each unit
// within one group when the log places queues in queue groups
// (route.go).
func (b *Broker) SubmitBatch(ctx context.Context, cmds []*proto.Command) ([]*proto.Result, error) {
	if b.observe != nil {
		defer b.timed(time.Now())
	}
	return b.submitRouted(ctx, cmds)
}

// SubmitGroup proposes cmds to the log of group as one unit: group 0 is
// the metadata log (SubmitBatch), the others the queue groups the
// metadata log numbers (Node.GroupID).
func (b *Broker) SubmitGroup(ctx context.Context, group uint32, cmds []*proto.Command) ([]*proto.Result, error) {
	if group == 0 {
		return b.SubmitBatch(ctx, cmds)
	}
	id := b.node.GroupID(group)
	if id == "" {
		return nil, fmt.Errorf("no queue group numbered %d in the metadata log", group)
	}
	if b.observe != nil {
		defer b.timed(time.Now())
	}
	return b.node.SubmitGroup(ctx, id, cmds)
}

func (b *Broker) timed(start time.Time) { b.observe(time.Since(start)) }

// Reply carries a direct reply to another node's channel (amqp.Replier).
func (b *Broker) Reply(ctx context.Context, node string, r *proto.DirectReply) (bool, error) {
	return b.node.Reply(ctx, node, r)
}

// Authenticate checks a user's password and returns the user's tags.
func (b *Broker) Authenticate(user, password string) (tags []string, ok bool) {
	var hash []byte
	b.node.View(func(m *fsm.Machine) {
		hash, tags, ok = m.User(user)
	})
	if !ok || !fsm.CheckPassword(hash, fsm.PasswordSaltLen, password) {
		return nil, false
	}
	return tags, true
}

// Unacked returns those of tags the applied state of group's log holds
// as unacknowledged deliveries of the channel. A group this node does
// not run cannot be read here and reports every tag unacknowledged: a
// caller that must tell a settled tag from a held one asks a member
// (FarUnacked), since settling a settled tag again is refused (406).
func (b *Broker) Unacked(group uint32, ch *proto.ChannelRef, tags []uint64) (out []uint64) {
	if group == 0 {
		b.node.View(func(m *fsm.Machine) { out = m.Unacked(ch, tags) })
		return out
	}
	if !b.node.ViewGroup(b.node.GroupID(group), func(m *fsm.Machine) { out = m.Unacked(ch, tags) }) {
		return tags
	}
	return out
}

// FarUnacked reads, from a member of group's log when this node does not
// run it, those of tags that the log holds as unacknowledged deliveries
// of the channel after a Tick the member proposed during the call
// (cluster's RemoteGroupUnacked); here is true for a log this node runs.
func (b *Broker) FarUnacked(ctx context.Context, group uint32, ch *proto.ChannelRef, tags []uint64) (unacked []uint64, here bool, err error) {
	if group == 0 {
		return nil, true, nil
	}
	id := b.node.GroupID(group)
	if b.node.ViewGroup(id, func(*fsm.Machine) {}) {
		return nil, true, nil
	}
	unacked, err = b.node.RemoteGroupUnacked(ctx, id, ch, tags)
	return unacked, false, err
}

// Gets returns the log tags of the basic.get deliveries that the applied
// state of the log holding queue has as the channel's, and that log's
// group number. A queue group this node does not run is read from a
// member, after a Tick the member proposed (RemoteGroupGets); err says
// that read failed.
func (b *Broker) Gets(ctx context.Context, vhost, queue string, ch *proto.ChannelRef) (num uint32, tags []uint64, err error) {
	id := group.DefaultID
	if b.placing() {
		id = b.queueGroup(ctx, vhost, queue)
	}
	if b.node.ViewGroup(id, func(m *fsm.Machine) { num, tags = m.Group(), m.Gets(ch) }) {
		return num, tags, nil
	}
	return b.node.RemoteGroupGets(ctx, id, ch)
}

// ConsumerLoad returns what the applied state of the consumer's group
// holds of its credit and its queue.
func (b *Broker) ConsumerLoad(ref *proto.ConsumerRef) (l fsm.ConsumerLoad, ok bool) {
	b.node.ViewGroup(b.consumers.get(ref), func(m *fsm.Machine) { l, ok = m.ConsumerLoad(ref) })
	return l, ok
}

// VhostExists reports whether a vhost exists in the applied state.
func (b *Broker) VhostExists(name string) (ok bool) {
	b.node.View(func(m *fsm.Machine) { ok = m.VhostExists(name) })
	return ok
}

// Permission returns a user's patterns in a vhost.
func (b *Broker) Permission(user, vhost string) (configure, write, read string, ok bool) {
	b.node.View(func(m *fsm.Machine) { configure, write, read, ok = m.Permission(user, vhost) })
	return configure, write, read, ok
}

// UserExists reports whether a user exists in the applied state.
func (b *Broker) UserExists(name string) (ok bool) {
	b.node.View(func(m *fsm.Machine) { _, _, ok = m.User(name) })
	return ok
}

// QueueCount counts a vhost's queues in the applied state; it walks them,
// and runs only when a queue limit is set.
func (b *Broker) QueueCount(vhost, name string) (count int, exists bool) {
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
