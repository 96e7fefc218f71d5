package cluster

import (
	"github.com/hashicorp/raft"
	"github.com/raftmq/raftmq/cluster/linksec"
	"google.golang.org/grpc"
)

// ServerOptions are the gRPC server options a node's gRPC server needs:
// message sizes for forwarded publishes, a keepalive policy that lets
// followers ping at forwardKeepalive (gRPC's default policy answers such
// pings with GOAWAY "too_many_pings", which breaks the forwarding stream),
// and, given a non-nil TLS (at most one), its server credentials: an
// operator's TLS requires a client certificate signed by the cluster CA on
// every connection; a secret's TLS (linksec.SecretTLS) verifies one when
// given and also serves plain connections, and the internal service
// refuses calls without a node certificate either way.
func ServerOptions(sec ...*linksec.TLS) []grpc.ServerOption {
	opts := baseServerOptions()
	if len(sec) > 0 && sec[0] != nil {
		opts = append(opts, grpc.Creds(sec[0].GRPCCredentials()))
	}
	return opts
}

// newLinkChecker is the links' security (package linksec) over this
// node's view of the cluster: its gossip members and raft configuration.
func (n *Node) newLinkChecker() *linksec.Checker {
	return linksec.NewChecker(n.cfg.TLS, linksec.View{
		Self: n.cfg.NodeID,
		Members: func() []string {
			var ids []string
			for id := range n.members.All() {
				ids = append(ids, id)
			}
			return ids
		},
		Servers: func() []string {
			var ids []string
			for _, s := range n.servers() {
				ids = append(ids, string(s.ID))
			}
			return ids
		},
		LeaderKnown: func() bool {
			r := n.group.Raft()
			if r == nil {
				return false
			}
			_, id := r.LeaderWithID()
			return id != ""
		},
		PeerID: n.peerID,
	}, n.cfg.Links.Dial)
}

// servers is the latest raft configuration this node has (nil before raft
// runs or when it cannot be read).
func (n *Node) servers() []raft.Server {
	r := n.group.Raft()
	if r == nil {
		return nil
	}
	f := r.GetConfiguration()
	if f.Error() != nil {
		return nil
	}
	return f.Configuration().Servers
}

// peerID is the id of the member whose raft or gRPC address is addr, or "".
func (n *Node) peerID(addr string) string {
	for id, m := range n.members.All() {
		if m.Meta.GetRaftAddr() == addr || m.Meta.GetGrpcAddr() == addr {
			return id
		}
	}
	for _, s := range n.servers() {
		if string(s.Address) == addr {
			return string(s.ID)
		}
	}
	return ""
}
