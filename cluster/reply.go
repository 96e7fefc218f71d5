package cluster

import (
	"context"
	"fmt"
	"sync"

	"github.com/raftmq/raftmq/proto"
	"google.golang.org/grpc"
)

// Reply hands a direct reply to node, which delivers it to the channel its
// name designates, and reports whether it reached the reply consumer.
// Replies skip the log: they are transient and delivered at most once (as
// RabbitMQ's), so a node that is not a live member, or does not answer
// within ctx, loses them.
func (n *Node) Reply(ctx context.Context, node string, r *proto.DirectReply) (bool, error) {
	if node == n.cfg.NodeID {
		return n.cfg.Replies != nil && n.cfg.Replies.DirectReply(r), nil
	}
	m, ok := n.members.Get(node)
	if !ok || m.Health != HealthAlive || m.Meta.GetGrpcAddr() == "" {
		return false, fmt.Errorf("cluster: %q is no live member", node)
	}
	conn, err := n.replyConns.conn(n, node, m.Meta.GetGrpcAddr())
	if err != nil {
		return false, err
	}
	res, err := proto.NewInternalClient(conn).Reply(ctx, r)
	if err != nil {
		return false, err
	}
	return res.GetDelivered(), nil
}

// Reply implements proto.InternalServer: a reply for one of this node's
// channels. Its callers are checked by registerInternal, like Forward's.
func (fs *forwardServer) Reply(_ context.Context, r *proto.DirectReply) (*proto.DirectReplyResult, error) {
	sink := fs.n.cfg.Replies
	return &proto.DirectReplyResult{Delivered: sink != nil && sink.DirectReply(r)}, nil
}

// peerConns keeps one gRPC connection per node that replies were sent to:
// a reply is one unary call, and dialing (a TLS handshake) for each would
// cost more than the reply.
type peerConns struct {
	mu     sync.Mutex
	conns  map[string]peerConn
	closed bool
}

type peerConn struct {
	addr string
	cc   *grpc.ClientConn
}

// conn returns the connection to node at addr, dialing it when there is
// none or the node moved to another address.
func (p *peerConns) conn(n *Node, node, addr string) (*grpc.ClientConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrClosed
	}
	if c, ok := p.conns[node]; ok {
		if c.addr == addr {
			return c.cc, nil
		}
		_ = c.cc.Close()
		delete(p.conns, node)
	}
	cc, err := n.dialInternal(node, addr)
	if err != nil {
		return nil, err
	}
	if p.conns == nil {
		p.conns = map[string]peerConn{}
	}
	p.conns[node] = peerConn{addr: addr, cc: cc}
	return cc, nil
}

// close closes every connection; conn fails from now on.
func (p *peerConns) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, c := range p.conns {
		_ = c.cc.Close()
	}
	p.conns = nil
}
