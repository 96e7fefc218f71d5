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
// which this node does not run, from a member: the first that gossip and
// the metadata leader find answering, in turn, as the effects stream
// picks one.
func (n *Node) RemoteGroupQueues(ctx context.Context, id string) (*proto.GroupQueuesResponse, error) {
	var last error
	for attempt := range 3 {
		member, addr := n.effectsSource(id, attempt)
		if member == "" || addr == "" {
			return nil, fmt.Errorf("queue group %q: no member known", id)
		}
		conn, err := n.dialInternal(member, addr)
		if err != nil {
			last = err
			continue
		}
		actx, cancel := context.WithTimeout(ctx, groupQueuesWait)
		resp, err := proto.NewInternalClient(conn).GroupQueues(actx, &proto.GroupQueuesRequest{Group: id})
		cancel()
		_ = conn.Close()
		if err == nil {
			return resp, nil
		}
		last = fmt.Errorf("%s: %w", member, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("queue group %q: %w", id, last)
}
