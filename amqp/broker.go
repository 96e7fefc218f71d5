package amqp

import (
	"context"

	"github.com/raftmq/raftmq/fsm"

	"github.com/raftmq/raftmq/proto"
)

// Broker is what the AMQP server needs from the node it runs on.
type Broker interface {
	// NodeID names this node in channel, connection and consumer references.
	NodeID() string
	// Submit proposes one command through the replicated log and returns its
	// result once it committed and this node applied it (so every effect of
	// that entry for this node was already handed to the server's Sink).
	Submit(ctx context.Context, cmd *proto.Command) (*proto.Result, error)
	// SubmitBatch proposes several commands as one unit (one log entry where
	// possible) and returns one result per command.
	SubmitBatch(ctx context.Context, cmds []*proto.Command) ([]*proto.Result, error)
	// SubmitGroup is SubmitBatch for the log of one group: commands that
	// name deliveries by log tag (settlements, requeues, and the Tick
	// that resolves them) go to the log that assigned the deliveries
	// (fsm.Delivery.Group). Group 0 is the metadata group, the log
	// Submit and SubmitBatch propose to for such commands; the server
	// keeps using those for group 0.
	SubmitGroup(ctx context.Context, group uint32, cmds []*proto.Command) ([]*proto.Result, error)
	// Unacked returns those of tags that the applied state of group's log
	// still holds as unacknowledged deliveries of the channel. A log never
	// hands out a channel's tag twice, so a tag missing was settled.
	Unacked(group uint32, ch *proto.ChannelRef, tags []uint64) []uint64
	// FarUnacked is Unacked for the log of a queue group this node does
	// not run, which Unacked cannot read: those of tags that a member
	// holds as unacknowledged deliveries of the channel once it applied a
	// Tick proposed during the call, so that what the log took back
	// before the call shows as settled. here is true, and nothing is
	// read, when this node runs group's log (Unacked reads it); err when
	// no member answered.
	FarUnacked(ctx context.Context, group uint32, ch *proto.ChannelRef, tags []uint64) (unacked []uint64, here bool, err error)
	// Gets returns the log tags of the basic.get deliveries that the
	// applied state of the log holding queue has as the channel's, and
	// that log's group (0 for the metadata group). A log this node does
	// not run is read from one that does, which may fail (err).
	Gets(ctx context.Context, vhost, queue string, ch *proto.ChannelRef) (group uint32, tags []uint64, err error)
	// ConsumerLoad returns what the applied state holds of a consumer's
	// credit and its queue; false when it has no such consumer.
	ConsumerLoad(ref *proto.ConsumerRef) (fsm.ConsumerLoad, bool)
	// Authenticate checks a user's password and returns the user's tags.
	Authenticate(user, password string) (tags []string, ok bool)
	// UserExists reports whether a user exists in the applied state (the
	// EXTERNAL mechanism authenticates by certificate, not password).
	UserExists(name string) bool
	// QueueCount returns the number of queues of a vhost in the applied
	// state and whether the queue name is one of them.
	QueueCount(vhost, name string) (count int, exists bool)
	// VhostExists reports whether a vhost exists in the applied state.
	VhostExists(name string) bool
	// Permission returns a user's configure, write and read patterns in a
	// vhost; ok is false when the user has no access to it.
	Permission(user, vhost string) (configure, write, read string, ok bool)
}
