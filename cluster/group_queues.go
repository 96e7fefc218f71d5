package cluster

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// GroupQueues implements proto.InternalServer: the queues and consumers
// of a queue group this node runs, as it applied them.
func (fs *forwardServer) GroupQueues(_ context.Context, req *proto.GroupQueuesRequest) (*proto.GroupQueuesResponse, error) {
	id := req.GetGroup()
	if fs.n.queueGroup(id) == nil {
		return nil, status.Errorf(codes.NotFound, "%s does not run queue group %q", fs.n.cfg.NodeID, id)
	}
	resp := &proto.GroupQueuesResponse{}
	fs.n.ViewGroup(id, func(m *fsm.Machine) { resp.Queues, resp.Consumers = m.Queues(""), m.Consumers("") })
	return resp, nil
}

// groupQueuesWait bounds the read of a queue group this node does not
// run from one member: an operator's page waits no longer for a member
// that does not answer before it asks the next.
const groupQueuesWait = time.Second

// RemoteGroupQueues reads the queues and consumers of queue group id,
// which this node does not run, from a member.
func (n *Node) RemoteGroupQueues(ctx context.Context, id string) (resp *proto.GroupQueuesResponse, err error) {
	err = n.askMember(ctx, id, groupQueuesWait, func(ctx context.Context, c proto.InternalClient) (err error) {
		resp, err = c.GroupQueues(ctx, &proto.GroupQueuesRequest{Group: id})
		return err
	})
	return resp, err
}

// GroupGets implements proto.InternalServer: the unsettled basic.get
// deliveries of a channel in a queue group this node runs, once this node
// applied a Tick it proposed now.
func (fs *forwardServer) GroupGets(ctx context.Context, req *proto.GroupGetsRequest) (*proto.GroupGetsResponse, error) {
	if err := fs.tickGroup(ctx, req.GetGroup(), req.GetChannel()); err != nil {
		return nil, err
	}
	resp := &proto.GroupGetsResponse{}
	fs.n.ViewGroup(req.GetGroup(), func(m *fsm.Machine) { resp.Number, resp.Tags = m.Group(), m.Gets(req.GetChannel()) })
	return resp, nil
}

// tickGroup returns once this node, which must run queue group id, has
// applied a Tick it proposed there now: a read of the group's state after
// it sees every entry committed before the call. ch must name a channel.
func (fs *forwardServer) tickGroup(ctx context.Context, id string, ch *proto.ChannelRef) error {
	qg := fs.n.queueGroup(id)
	if qg == nil {
		return status.Errorf(codes.NotFound, "%s does not run queue group %q", fs.n.cfg.NodeID, id)
	}
	if ch == nil {
		return status.Error(codes.InvalidArgument, "no channel named")
	}
	return qg.tick(ctx)
}

// tick returns once this node applied a Tick it proposed in the group
// now; the error is a gRPC status.
func (qg *queueGroup) tick(ctx context.Context) error {
	tick := []*proto.Command{{Cmd: &proto.Command_Tick{Tick: &proto.Tick{}}}}
	if _, err := qg.g.Submitter().SubmitBatch(ctx, tick); err != nil {
		return status.Errorf(codes.Unavailable, "queue group %q: %v", qg.id, err)
	}
	return nil
}

// groupGetsWait bounds one member's answer to GroupGets or GroupUnacked,
// and the Tick an effects stream's fence waits for: a Tick through the
// group, which an election holds up for a second or two.
const groupGetsWait = 5 * time.Second

// RemoteGroupGets reads, from a member of queue group id (which this node
// does not run), the group's number and the log tags of the channel's
// basic.get deliveries not yet settled, as the member applied them after
// a Tick it proposed during the call.
func (n *Node) RemoteGroupGets(ctx context.Context, id string, ch *proto.ChannelRef) (number uint32, tags []uint64, err error) {
	err = n.askMember(ctx, id, groupGetsWait, func(ctx context.Context, c proto.InternalClient) error {
		resp, err := c.GroupGets(ctx, &proto.GroupGetsRequest{Group: id, Channel: ch})
		number, tags = resp.GetNumber(), resp.GetTags()
		return err
	})
	return number, tags, err
}

// askMember calls ask on a member of queue group id, waiting at most wait
// for each: the first member that gossip and the metadata leader find
// answering, then the next, as the effects stream picks one.
func (n *Node) askMember(ctx context.Context, id string, wait time.Duration, ask func(context.Context, proto.InternalClient) error) error {
	var last error
	for attempt := range 3 {
		member, addr := n.effectsSource(id, attempt)
		if member == "" || addr == "" {
			return fmt.Errorf("queue group %q: no member known", id)
		}
		conn, err := n.dialInternal(member, addr)
		if err != nil {
			last = err
			continue
		}
		actx, cancel := context.WithTimeout(ctx, wait)
		err = ask(actx, proto.NewInternalClient(conn))
		cancel()
		_ = conn.Close()
		if err == nil {
			return nil
		}
		last = fmt.Errorf("%s: %w", member, err)
		if ctx.Err() != nil {
			break
		}
	}
	return fmt.Errorf("queue group %q: %w", id, last)
}

// GroupUnacked implements proto.InternalServer: those of the tags that a
// queue group this node runs holds as unacknowledged deliveries of the
// channel, once this node applied a Tick it proposed now.
func (fs *forwardServer) GroupUnacked(ctx context.Context, req *proto.GroupUnackedRequest) (*proto.GroupUnackedResponse, error) {
	if err := fs.tickGroup(ctx, req.GetGroup(), req.GetChannel()); err != nil {
		return nil, err
	}
	resp := &proto.GroupUnackedResponse{}
	fs.n.ViewGroup(req.GetGroup(), func(m *fsm.Machine) { resp.Tags = m.Unacked(req.GetChannel(), req.GetTags()) })
	return resp, nil
}

// RemoteGroupUnacked reads, from a member of queue group id (which this
// node does not run), those of tags that the group's log holds as
// unacknowledged deliveries of the channel, as the member applied them
// after a Tick it proposed during the call: what the log took back before
// the call began (this node declared down while it was silent) shows as
// settled.
func (n *Node) RemoteGroupUnacked(ctx context.Context, id string, ch *proto.ChannelRef, tags []uint64) (unacked []uint64, err error) {
	err = n.askMember(ctx, id, groupGetsWait, func(ctx context.Context, c proto.InternalClient) error {
		resp, err := c.GroupUnacked(ctx, &proto.GroupUnackedRequest{Group: id, Channel: ch, Tags: tags})
		unacked = resp.GetTags()
		return err
	})
	return unacked, err
}
