package ops

import (
	"context"
	"errors"
	"slices"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/proto"
)

// The Raft groups, as rabbitmq-queues and the management API show
// RabbitMQ's quorum queues: a queue's leader, members and online members
// are its group's; grow, shrink and rebalance change the groups. They run
// on the metadata group's leader (cluster.Node's GrowGroups and
// ShrinkGroups change the metadata group's voters and the queue groups'
// members through its log; RebalanceGroups hands over the groups it
// leads, and asks each other node to hand over those it leads).

// ListGroups answers raftmq.v1.Admin's ListGroups: the groups as this
// node knows them.
func (s *Service) ListGroups(_ context.Context, _ *proto.ListGroupsRequest) (*proto.ListGroupsResponse, error) {
	resp := &proto.ListGroupsResponse{NodeId: s.node.NodeID()}
	for _, g := range s.node.Groups() {
		resp.Groups = append(resp.Groups, &proto.GroupInfo{Id: g.ID, Name: g.Name, Leader: g.Leader,
			Members: g.Voters(), Online: g.OnlineVoters(), State: g.State, Term: g.Term,
			CommitIndex: g.CommitIndex, LastApplied: g.LastApplied, LastLogIndex: g.LastLogIndex,
			SnapshotIndex: g.SnapshotIndex, LogSegments: uint32(g.Segments),
			CommitLatencyUs: g.CommitLatency.Microseconds(), TargetSize: uint32(g.TargetSize)})
	}
	return resp, nil
}

// queueGroupNames sets each queue's raft_group to its group's name.
func (s *Service) queueGroupNames(qs ...*proto.QueueInfo) {
	for _, q := range qs {
		q.RaftGroup = cluster.GroupName(q.GetRaftGroup())
	}
}

// GrowGroups answers raftmq.v1.Admin's GrowGroups (rabbitmq-queues grow).
// A follower forwards it to the leader.
func (s *Service) GrowGroups(ctx context.Context, req *proto.GrowGroupsRequest) (*proto.GroupChangesResponse, error) {
	return changeGroups(ctx, s, req.GetNodeId(), req, proto.AdminClient.GrowGroups, func() ([]GroupChange, error) {
		return s.node.GrowGroups(ctx, req.GetNodeId(), req.GetEven())
	})
}

// ShrinkGroups answers raftmq.v1.Admin's ShrinkGroups (rabbitmq-queues
// shrink). A follower forwards it to the leader.
func (s *Service) ShrinkGroups(ctx context.Context, req *proto.ShrinkGroupsRequest) (*proto.GroupChangesResponse, error) {
	return changeGroups(ctx, s, req.GetNodeId(), req, proto.AdminClient.ShrinkGroups, func() ([]GroupChange, error) {
		return s.node.ShrinkGroups(ctx, req.GetNodeId())
	})
}

// changeGroups runs change on the leader for the member id and lists the
// outcome per group and per queue of the changed groups.
func changeGroups[Req any](ctx context.Context, s *Service, id string, req Req,
	call func(proto.AdminClient, context.Context, Req, ...grpc.CallOption) (*proto.GroupChangesResponse, error),
	change func() ([]GroupChange, error)) (*proto.GroupChangesResponse, error) {
	if id == "" {
		return nil, fail(Invalid, "node id must not be empty")
	}
	return onLeader(ctx, s, req, call, func() (*proto.GroupChangesResponse, error) {
		if !s.isMember(id) {
			return nil, fail(NotFound, "node %q is not a member", id)
		}
		changes, err := change()
		if err != nil {
			return nil, nodeError(err, Precondition, "change the groups")
		}
		resp := &proto.GroupChangesResponse{}
		byGroup := map[string]*proto.GroupChange{}
		for _, c := range changes {
			gc := &proto.GroupChange{Group: cluster.GroupName(c.Group), Size: uint32(c.Size), Result: changeResult(c.Err)}
			resp.Groups = append(resp.Groups, gc)
			byGroup[c.Group] = gc
		}
		s.node.View(func(st State) {
			for _, q := range st.Queues("") {
				if gc, ok := byGroup[q.GetRaftGroup()]; ok {
					resp.Queues = append(resp.Queues, &proto.QueueChange{Vhost: q.GetVhost(), Name: q.GetName(),
						Group: gc.GetGroup(), Size: gc.GetSize(), Result: gc.GetResult()})
				}
			}
		})
		return resp, nil
	})
}

// changeResult is rabbitmq-queues' result text of a group's change.
func changeResult(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, cluster.ErrLastMember):
		return "error: the last node cannot be removed"
	default:
		return "error: " + err.Error()
	}
}

// groupLeaders is the leader of every group, as the node leading it
// says, after a rebalance: this node runs only some of the queue groups,
// and what it knows of the others' leaders comes to it later. Of two
// nodes that say they lead a group (one cut off and not told yet), the
// later term's; a group no node says it leads (its leader did not
// answer) is taken as this node knows it, from its raft or from gossip.
func (s *Service) groupLeaders(ctx context.Context) map[string]string {
	leaders, terms := map[string]string{}, map[string]uint64{}
	claim := func(node, group string, term uint64) {
		if _, ok := leaders[group]; !ok || term > terms[group] {
			leaders[group], terms[group] = node, term
		}
	}
	self := s.node.NodeID()
	local := s.node.Groups()
	for _, g := range local {
		if g.State == raftLeader {
			claim(self, g.ID, g.Term)
		}
	}
	askPeers(ctx, s, "rebalance", func(ctx context.Context, c proto.AdminClient) (*proto.ListGroupsResponse, error) {
		return c.ListGroups(ctx, &proto.ListGroupsRequest{})
	}, func(id string, r *proto.ListGroupsResponse) {
		for _, g := range r.GetGroups() {
			if g.GetState() == raftLeader {
				claim(id, g.GetId(), g.GetTerm())
			}
		}
	})
	for _, g := range local {
		if _, ok := leaders[g.ID]; !ok && g.Leader != "" {
			leaders[g.ID] = g.Leader
		}
	}
	return leaders
}

// raftLeader is a group's state, in GroupStatus and GroupInfo, on the
// node that leads it.
const raftLeader = "Leader"

// handBackKey marks the RebalanceGroups the metadata leader asks of
// every other node: that node hands the queue groups it leads to the
// members meant to lead them, and answers what it leads.
const handBackKey = "raftmq-hand-back"

// RebalanceGroups answers raftmq.v1.Admin's RebalanceGroups
// (rabbitmq-queues rebalance): the leaderships moved so that each online
// node leads its share of the groups, and what each node then leads. A
// follower forwards it to the leader, which spreads the queue groups and
// hands back those it leads (cluster.Node.RebalanceGroups), then asks
// every other alive node to hand back the queue groups it leads.
func (s *Service) RebalanceGroups(ctx context.Context, req *proto.RebalanceGroupsRequest) (*proto.RebalanceGroupsResponse, error) {
	if md, ok := metadata.FromIncomingContext(ctx); ok && len(md.Get(handBackKey)) > 0 {
		if _, err := s.node.RebalanceGroups(ctx); err != nil {
			return nil, nodeError(err, Precondition, "rebalance")
		}
		return &proto.RebalanceGroupsResponse{}, nil
	}
	return onLeader(ctx, s, req, proto.AdminClient.RebalanceGroups, func() (*proto.RebalanceGroupsResponse, error) {
		if _, err := s.node.RebalanceGroups(ctx); err != nil {
			return nil, nodeError(err, Precondition, "rebalance")
		}
		askPeers(ctx, s, "rebalance", func(ctx context.Context, c proto.AdminClient) (*proto.RebalanceGroupsResponse, error) {
			return c.RebalanceGroups(metadata.AppendToOutgoingContext(ctx, handBackKey, s.node.NodeID()), req)
		}, func(string, *proto.RebalanceGroupsResponse) {})
		led, err := s.node.RebalanceGroups(ctx)
		if err != nil {
			return nil, nodeError(err, Precondition, "rebalance")
		}
		byNode := map[string]*proto.NodeLeadership{}
		for id := range led {
			byNode[id] = &proto.NodeLeadership{NodeId: id}
		}
		leaders := s.groupLeaders(ctx)
		for _, id := range leaders {
			if byNode[id] == nil {
				byNode[id] = &proto.NodeLeadership{NodeId: id}
			}
			byNode[id].Groups++
		}
		s.node.View(func(st State) {
			for _, q := range st.Queues("") {
				nl, ok := byNode[leaders[q.GetRaftGroup()]]
				if !ok {
					continue
				}
				if t, _ := proto.TableJSON(q.GetArguments())["x-queue-type"].(string); t == "quorum" {
					nl.QuorumQueues++
				} else {
					nl.ClassicQueues++
				}
			}
		})
		resp := &proto.RebalanceGroupsResponse{}
		for _, nl := range byNode {
			resp.Nodes = append(resp.Nodes, nl)
		}
		slices.SortFunc(resp.Nodes, func(a, b *proto.NodeLeadership) int {
			return strings.Compare(a.GetNodeId(), b.GetNodeId())
		})
		return resp, nil
	})
}
