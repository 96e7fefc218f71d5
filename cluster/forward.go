package cluster

import (
	"context"
	"fmt"
	"net"
	"slices"
	"time"

	"github.com/raftmq/raftmq/cluster/group"
	"github.com/raftmq/raftmq/proto"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// MaxForwardMessage is the largest forwarding message a node sends or
// accepts; a node's gRPC server should allow as much (grpc.MaxRecvMsgSize).
const MaxForwardMessage = 1 << 30

// forwardKeepalive is how often a follower pings the leader on its
// forwarding stream, so a dead leader is noticed without traffic.
const forwardKeepalive = 10 * time.Second

// handshakeTimeout bounds a new connection's TLS and HTTP/2 handshake on
// the node's gRPC server. gRPC's default is 120 s, and its Stop waits for
// every handshake in progress: a peer that connected and then went silent
// (a frozen process's connection, a half-open one) held a stopping node
// that long. A live peer or raftmqctl completes it in milliseconds.
const handshakeTimeout = 3 * time.Second

// baseServerOptions are ServerOptions without credentials.
func baseServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ConnectionTimeout(handshakeTimeout),
		grpc.MaxRecvMsgSize(MaxForwardMessage),
		grpc.MaxSendMsgSize(MaxForwardMessage),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime:             forwardKeepalive / 2,
			PermitWithoutStream: true,
		}),
	}
}

// dialInternal returns a client of the internal service of node id at
// addr (gRPC dials lazily, on the first call). With TLS, the server's
// certificate must name id.
func (n *Node) dialInternal(id, addr string) (*grpc.ClientConn, error) {
	return grpc.NewClient(addr,
		grpc.WithTransportCredentials(n.sec.InternalCredentials(id)),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return n.out.Dial(ctx, addr, 5*time.Second, n.cfg.Links.Dial)
		}),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: forwardKeepalive, Timeout: 5 * time.Second}),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(MaxForwardMessage), grpc.MaxCallRecvMsgSize(MaxForwardMessage)),
	)
}

// registerInternal registers the Internal service on s with every method
// behind the links' check of its callers (Checker.AuthorizeInternal,
// package linksec): the check belongs to the service, so a method added
// to it later cannot be served without it, and no other service on the
// port (the admin API) is affected.
func (n *Node) registerInternal(s *grpc.Server) {
	desc := proto.Internal_ServiceDesc
	desc.Methods = slices.Clone(desc.Methods)
	for i := range desc.Methods {
		h := desc.Methods[i].Handler
		desc.Methods[i].Handler = func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			if err := n.sec.AuthorizeInternal(ctx); err != nil {
				return nil, err
			}
			return h(srv, ctx, dec, ic)
		}
	}
	desc.Streams = slices.Clone(desc.Streams)
	for i := range desc.Streams {
		h := desc.Streams[i].Handler
		desc.Streams[i].Handler = func(srv any, st grpc.ServerStream) error {
			if err := n.sec.AuthorizeInternal(st.Context()); err != nil {
				return err
			}
			return h(srv, st)
		}
	}
	s.RegisterService(&desc, &forwardServer{n: n})
}

// forwardServer serves the internal service: the leader's side of
// Internal.Forward, and every node's Internal.Reply (reply.go); its callers
// are checked by registerInternal.
type forwardServer struct {
	proto.UnimplementedInternalServer
	n *Node
}

// Forward implements proto.InternalServer: the leader's side of the
// stream is the group's (group.ServeForward), the group the stream
// names (group.ForwardGroup; none: the metadata group). A stream for a
// queue group this node does not run has each request refused as not
// appended, and the follower looks for the leader again.
func (fs *forwardServer) Forward(stream grpc.BidiStreamingServer[proto.ForwardRequest, proto.ForwardResponse]) error {
	id := group.ForwardGroup(stream.Context())
	if id == group.DefaultID {
		return group.ServeForward(stream, fs.n.group.Batcher(), func() string { id, _ := fs.n.Leader(); return id }, fs.n.closing)
	}
	qg := fs.n.queueGroup(id)
	if qg == nil {
		return group.RefuseForward(stream, fmt.Sprintf("no group %q on %s", id, fs.n.cfg.NodeID))
	}
	return group.ServeForward(stream, qg.g.Batcher(), func() string { _, id := qg.g.Raft().LeaderWithID(); return string(id) }, fs.n.closing)
}
