package cluster

import (
	"github.com/hashicorp/raft"
	"github.com/raftmq/raftmq/cluster/links"
)

// network is the node's links to the other nodes (package links): raft's
// transport and the address peers dial it at, the connections it dialed
// (ended by Close), and those that carry direct replies (reply.go).
type network struct {
	trans      *raft.NetworkTransport
	advert     string          // advertised raft address
	out        *links.Outbound // the connections it dialed, ended by Close
	replyConns peerConns       // direct replies to other nodes (reply.go)
}

// Links cuts this node's outgoing traffic to chosen addresses: a
// fault-injection seam for tests (links.Links).
type Links = links.Links

// NewLinks returns Links with nothing blocked.
func NewLinks() *Links { return links.New() }
