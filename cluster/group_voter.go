package cluster

import (
	"context"
	"slices"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// A queue group's leader removes a server the metadata log no longer
// names among the group's members (steerQueueGroup), and hashicorp/raft
// tells the removed server nothing: once its leader stops sending, it
// stands for election again and again, its pre-votes refused by every
// member ("not in configuration"), until a long silence with another
// member leading lets it close its copy (queueGroup.removed). So such a
// server asks the leader, as soon as the leader falls silent to it,
// whether it is still a voter, and closes its copy when it is not.

// GroupVoter implements proto.InternalServer: whether req's node is a
// voter of the configuration of a queue group this node leads, read
// before a barrier of this leader's term committed, so that what it
// read is committed too and no later leader can go back on it.
func (fs *forwardServer) GroupVoter(ctx context.Context, req *proto.GroupVoterRequest) (*proto.GroupVoterResponse, error) {
	n := fs.n
	qg := n.queueGroup(req.GetGroup())
	if qg == nil {
		return nil, status.Errorf(codes.NotFound, "%s does not run queue group %q", n.cfg.NodeID, req.GetGroup())
	}
	r := qg.g.Raft()
	term := r.CurrentTerm()
	notLeader := status.Errorf(codes.FailedPrecondition, "%s does not lead queue group %q", n.cfg.NodeID, qg.id)
	if !qg.leading.Load() || r.State() != raft.Leader {
		return nil, notLeader
	}
	f := r.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	voter := slices.ContainsFunc(f.Configuration().Servers, func(s raft.Server) bool {
		return string(s.ID) == req.GetNode() && s.Suffrage == raft.Voter
	})
	if err := n.await(ctx, r.Barrier(n.cfg.LeaderWait)); err != nil {
		return nil, status.Errorf(codes.Unavailable, "queue group %q: barrier: %v", qg.id, err)
	}
	if r.CurrentTerm() != term {
		return nil, notLeader
	}
	return &proto.GroupVoterResponse{Voter: voter, Term: term}, nil
}

// askDropped asks, on a node that runs qg but is no longer meant to (the
// metadata log does not name it among qg's members, or the node left the
// metadata group), the group's leader as gossip names it whether this
// node is still a voter of the group, once no leader has been heard
// from for a heartbeat timeout (a member's leader is heard from more
// often). When it is not, qg is marked dropped and runQueueGroups closes
// it. A leader that cannot answer (one of an older release, or no
// longer leading) leaves the node to the silence rule. It reports
// whether to look again soon: the node is not meant to run qg and did
// not ask yet (it still hears from a leader, or gossip shows none). Once
// it asked, the next question waits for the next round of
// runQueueGroups (a second at most), as each answer costs the leader a
// barrier.
func (n *Node) askDropped(ctx context.Context, qg *queueGroup) (again bool) {
	r := qg.g.Raft()
	if qg.dropped.Load() || r.State() == raft.Shutdown {
		return false
	}
	spec := n.queueGroupSpec(qg.id)
	if spec.HasMember(n.cfg.NodeID) && n.metadataVoter() {
		return false
	}
	if r.State() == raft.Leader || time.Since(r.LastContact()) < n.cfg.HeartbeatTimeout {
		return true
	}
	// Any node that gossip shows leading the group will do: this
	// node's view of the members may be behind (it left the metadata
	// group, and the log it no longer learns may have moved the group).
	all := n.members.All()
	anyone := fsm.QueueGroup{ID: qg.id}
	for id := range all {
		anyone.Members = append(anyone.Members, fsm.GroupMember{ID: id})
	}
	leader, _ := gossipedLeader(anyone, all)
	if leader == "" || leader == n.cfg.NodeID {
		return true
	}
	m, ok := n.members.Get(leader)
	if !ok || m.Meta.GetGrpcAddr() == "" {
		return true
	}
	conn, err := n.dialInternal(leader, m.Meta.GetGrpcAddr())
	if err != nil {
		return false
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, n.cfg.LeaderWait)
	defer cancel()
	resp, err := proto.NewInternalClient(conn).GroupVoter(ctx, &proto.GroupVoterRequest{Group: qg.id, Node: n.cfg.NodeID})
	if err != nil {
		// A node out of the metadata group's configuration is refused
		// (PermissionDenied): the silence rule decides for it.
		n.log.Debug("asking a queue group's leader whether this node is still a member failed", "group", qg.id, "leader", leader, "err", err)
		return false
	}
	if resp.GetVoter() {
		return false
	}
	n.log.Info("the queue group's leader removed this node", "group", qg.id, "leader", leader, "term", resp.GetTerm())
	qg.dropped.Store(true)
	select {
	case n.regroup <- struct{}{}:
	default:
	}
	return false
}
