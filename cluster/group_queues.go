package cluster

import (
	"context"
	"errors"
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
	return askMember(ctx, n, id, groupQueuesWait, func(ctx context.Context, c proto.InternalClient) (*proto.GroupQueuesResponse, error) {
		return c.GroupQueues(ctx, &proto.GroupQueuesRequest{Group: id})
	})
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
	resp, err := askMember(ctx, n, id, groupGetsWait, func(ctx context.Context, c proto.InternalClient) (*proto.GroupGetsResponse, error) {
		return c.GroupGets(ctx, &proto.GroupGetsRequest{Group: id, Channel: ch})
	})
	return resp.GetNumber(), resp.GetTags(), err
}

// askHedge is how long a question to a member of a queue group goes
// unanswered before the next member is asked as well. A member that froze
// answers nothing, and neither gossip nor raft finds it silent for a
// second or more; meanwhile the question waits, and so does a connection
// whose writer asked it after a silence (its deliveries and heartbeats
// with it). A live member answers a read at once, and one that ticks the
// group first within an election.
const askHedge = 300 * time.Millisecond

// askMember calls ask on a member of queue group id, waiting at most wait
// for each: the first member that gossip and the metadata leader find
// answering, as the effects stream picks one, then the next once that
// one failed or took askHedge, the first answer winning.
func askMember[T any](ctx context.Context, n *Node, id string, wait time.Duration, ask func(context.Context, proto.InternalClient) (T, error)) (T, error) {
	v, err := hedged(ctx, askHedge, 3, func(attempt int) (string, string) { return n.effectsSource(id, attempt) },
		func(ctx context.Context, member, addr string) (T, error) {
			conn, err := n.dialInternal(member, addr)
			if err != nil {
				var zero T
				return zero, err
			}
			defer conn.Close()
			actx, cancel := context.WithTimeout(ctx, wait)
			defer cancel()
			return ask(actx, proto.NewInternalClient(conn))
		})
	if err != nil {
		return v, fmt.Errorf("queue group %q: %w", id, err)
	}
	return v, nil
}

// hedged calls call on the members pick names for attempts 0 to
// attempts-1, each member once: the next one as soon as one failed, or
// after hedge without an answer. The first answer is the result, and
// the calls still out are cancelled. pick returns "" for the member when
// it knows none; the error is the last failure's when none answered.
func hedged[T any](ctx context.Context, hedge time.Duration, attempts int, pick func(attempt int) (member, addr string),
	call func(ctx context.Context, member, addr string) (T, error)) (T, error) {
	var zero T
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type answer struct {
		v      T
		err    error
		member string
	}
	answers := make(chan answer, attempts)
	asked := map[string]bool{}
	attempt, out := 0, 0
	// next asks the next member not asked yet; false when none is left.
	next := func() bool {
		for attempt < attempts {
			member, addr := pick(attempt)
			attempt++
			if member == "" || addr == "" || asked[member] {
				continue
			}
			asked[member], out = true, out+1
			go func() {
				v, err := call(ctx, member, addr)
				answers <- answer{v, err, member}
			}()
			return true
		}
		return false
	}
	if !next() {
		return zero, errors.New("no member known")
	}
	timer := time.NewTimer(hedge)
	defer timer.Stop()
	var last error
	for out > 0 {
		select {
		case a := <-answers:
			out--
			if a.err == nil {
				return a.v, nil
			}
			last = fmt.Errorf("%s: %w", a.member, a.err)
			if ctx.Err() == nil && next() {
				timer.Reset(hedge)
			}
		case <-timer.C:
			if next() {
				timer.Reset(hedge)
			}
		}
	}
	return zero, last
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
	resp, err := askMember(ctx, n, id, groupGetsWait, func(ctx context.Context, c proto.InternalClient) (*proto.GroupUnackedResponse, error) {
		return c.GroupUnacked(ctx, &proto.GroupUnackedRequest{Group: id, Channel: ch, Tags: tags})
	})
	return resp.GetTags(), err
}
