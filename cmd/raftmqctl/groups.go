package main

import (
	"context"
	"sort"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/raftmq/raftmq/proto"
)

// The Raft groups: every queue is in one, which replicates it as a Ra
// cluster replicates a RabbitMQ quorum queue. list_queues shows a queue's
// group, leader, members and online members; rabbitmq-queues' grow,
// shrink and rebalance change the groups.

// metadataGroup is the name the nodes give their metadata group (which
// holds every queue; queue groups run beside it).
const metadataGroup = "metadata"

func init() {
	verbs["list_groups"] = verb{args: "[column ...]", max: -1, run: listGroups,
		columns: columnNames(groupColumns), defaults: groupDefaults,
		help: "The Raft groups the node knows, as that node sees them (its raft state, indexes and log)."}
	verbs["grow"] = verb{args: "NODE [all|even] [--errors-only]", min: 1, max: 2, pre: checkGrow, run: grow,
		help: "Adds NODE as a voter to each group it is not a member of that has fewer voters than its\n" +
			"target (every node, for the metadata group); with even, only to the groups with an even\n" +
			"number of voters. Lists the queues of the groups changed, as rabbitmq-queues grow does."}
	verbs["shrink"] = verb{args: "NODE [--errors-only]", min: 1, max: 1, run: shrink,
		help: "Removes NODE from the members of every queue group, except a group's last member and\n" +
			"where the group's other online members would be fewer than a quorum; NODE stays in the\n" +
			"cluster and serves its clients, and the spreads leave it out until grow. Without queue\n" +
			"groups, removes NODE from the metadata group's voters. Lists the queues of the groups,\n" +
			"as rabbitmq-queues shrink does."}
	verbs["rebalance"] = verb{args: "[all|classic|quorum]", max: 1, pre: checkRebalance, run: rebalance,
		help: "Moves the groups' leaderships so that each online node leads its share of them, and lists\n" +
			"what each node leads, as rabbitmq-queues rebalance does (with one group, nothing moves)."}
}

var groupDefaults = []string{"name", "leader", "members", "online"}

var groupColumns = []column[*proto.GroupInfo]{
	{"name", func(g *proto.GroupInfo) any { return g.GetName() }},
	{"leader", func(g *proto.GroupInfo) any { return g.GetLeader() }},
	{"members", func(g *proto.GroupInfo) any { return nonNil(g.GetMembers()) }},
	{"online", func(g *proto.GroupInfo) any { return nonNil(g.GetOnline()) }},
	{"state", func(g *proto.GroupInfo) any { return g.GetState() }},
	{"term", func(g *proto.GroupInfo) any { return g.GetTerm() }},
	{"commit_index", func(g *proto.GroupInfo) any { return g.GetCommitIndex() }},
	{"last_applied", func(g *proto.GroupInfo) any { return g.GetLastApplied() }},
	{"last_log_index", func(g *proto.GroupInfo) any { return g.GetLastLogIndex() }},
	{"snapshot_index", func(g *proto.GroupInfo) any { return g.GetSnapshotIndex() }},
	{"log_segments", func(g *proto.GroupInfo) any { return g.GetLogSegments() }},
	{"commit_latency_us", func(g *proto.GroupInfo) any { return g.GetCommitLatencyUs() }},
	{"target_size", func(g *proto.GroupInfo) any { return g.GetTargetSize() }},
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func listGroups(c *call) error {
	r, err := c.c.ListGroups(c.ctx, &proto.ListGroupsRequest{})
	if err != nil {
		return err
	}
	c.inform("Listing Raft groups on node %s ...", r.GetNodeId())
	return listing(c, r.GetGroups(), groupColumns, groupDefaults)
}

// groupsView is the groups the node knows, by name. A node without
// ListGroups (an older release) has one group, the cluster's voters,
// read from its cluster status.
func groupsView(ctx context.Context, c proto.AdminClient, consistent bool) (map[string]*proto.GroupInfo, error) {
	r, err := c.ListGroups(ctx, &proto.ListGroupsRequest{})
	if status.Code(err) == codes.Unimplemented {
		cs, err := c.ClusterStatus(ctx, &proto.ClusterStatusRequest{Consistent: consistent})
		if err != nil {
			return nil, err
		}
		g := &proto.GroupInfo{Name: metadataGroup, Leader: cs.GetLeaderId()}
		for _, n := range cs.GetNodes() {
			if n.GetSuffrage() == "voter" {
				g.Members = append(g.Members, n.GetId())
				if h := n.GetHealth(); h == "" || h == "alive" {
					g.Online = append(g.Online, n.GetId())
				}
			}
		}
		sort.Strings(g.Members)
		sort.Strings(g.Online)
		return map[string]*proto.GroupInfo{g.GetName(): g}, nil
	}
	if err != nil {
		return nil, err
	}
	out := map[string]*proto.GroupInfo{}
	for _, g := range r.GetGroups() {
		out[g.GetName()] = g
	}
	return out, nil
}

// queueGroup is the group of q in groups (a queue a node of an older
// release lists names none: it is in the one group).
func queueGroup(groups map[string]*proto.GroupInfo, q *proto.QueueInfo) *proto.GroupInfo {
	name := q.GetRaftGroup()
	if name == "" {
		name = metadataGroup
	}
	if g, ok := groups[name]; ok {
		return g
	}
	return &proto.GroupInfo{Name: name}
}

func checkGrow(_ *options, args []string) error {
	if len(args) == 2 && args[1] != "all" && args[1] != "even" {
		return usagef("strategy '%s' is not recognised.", args[1])
	}
	return nil
}

func checkRebalance(_ *options, args []string) error {
	if len(args) == 1 && args[0] != "all" && args[0] != "classic" && args[0] != "quorum" {
		return usagef("type %s is not supported. Try one of all, classic, quorum.", args[0])
	}
	return nil
}

func grow(c *call) error {
	strategy := "all"
	if len(c.args) == 2 {
		strategy = c.args[1]
	}
	c.inform("Growing %s quorum queues on %s...", strategy, c.args[0])
	r, err := c.c.GrowGroups(c.ctx, &proto.GrowGroupsRequest{NodeId: c.args[0], Even: strategy == "even"})
	if err != nil {
		return err
	}
	return groupChanges(c, r)
}

func shrink(c *call) error {
	c.inform("Shrinking quorum queues on %s...", c.args[0])
	r, err := c.c.ShrinkGroups(c.ctx, &proto.ShrinkGroupsRequest{NodeId: c.args[0]})
	if err != nil {
		return err
	}
	return groupChanges(c, r)
}

var queueChangeColumns = []column[*proto.QueueChange]{
	{"vhost", func(q *proto.QueueChange) any { return q.GetVhost() }},
	{"name", func(q *proto.QueueChange) any { return q.GetName() }},
	{"size", func(q *proto.QueueChange) any { return q.GetSize() }},
	{"result", func(q *proto.QueueChange) any { return q.GetResult() }},
}

// groupChanges prints what grow or shrink did: each group's outcome as
// an informational line, and the queues of the groups changed in
// rabbitmq-queues' columns (with --errors-only, those whose group failed).
func groupChanges(c *call, r *proto.GroupChangesResponse) error {
	for _, g := range r.GetGroups() {
		c.inform("Raft group %s: %d members, %s", g.GetGroup(), g.GetSize(), g.GetResult())
	}
	var rows []*proto.QueueChange
	for _, q := range r.GetQueues() {
		if !c.o.errorsOnly || q.GetResult() != "ok" {
			rows = append(rows, q)
		}
	}
	all := *c
	all.args = nil
	return listing(&all, rows, queueChangeColumns, columnNames(queueChangeColumns)())
}

var leadershipColumns = []column[*proto.NodeLeadership]{
	{"Node name", func(n *proto.NodeLeadership) any { return n.GetNodeId() }},
	{"Number of quorum queues", func(n *proto.NodeLeadership) any { return n.GetQuorumQueues() }},
	{"Number of replicated classic queues", func(n *proto.NodeLeadership) any { return n.GetClassicQueues() }},
	{"Number of raft groups", func(n *proto.NodeLeadership) any { return n.GetGroups() }},
}

func rebalance(c *call) error {
	kind := "all replicated"
	if len(c.args) == 1 && c.args[0] != "all" {
		kind = c.args[0]
	}
	c.inform("Re-balancing leaders of %s queues...", kind)
	r, err := c.c.RebalanceGroups(c.ctx, &proto.RebalanceGroupsRequest{})
	if err != nil {
		return err
	}
	all := *c
	all.args = nil
	return listing(&all, r.GetNodes(), leadershipColumns, columnNames(leadershipColumns)())
}

// groupColumnsOf sets the leader, members, online and raft_group columns
// of list_queues from the queues' groups.
func groupColumnsOf(cols []column[*proto.QueueInfo], groups map[string]*proto.GroupInfo) []column[*proto.QueueInfo] {
	cols = append([]column[*proto.QueueInfo]{}, cols...)
	for i := range cols {
		switch cols[i].name {
		case "leader":
			cols[i].get = func(q *proto.QueueInfo) any { return queueGroup(groups, q).GetLeader() }
		case "members":
			cols[i].get = func(q *proto.QueueInfo) any { return nonNil(queueGroup(groups, q).GetMembers()) }
		case "online":
			cols[i].get = func(q *proto.QueueInfo) any { return nonNil(queueGroup(groups, q).GetOnline()) }
		case "raft_group":
			cols[i].get = func(q *proto.QueueInfo) any { return queueGroup(groups, q).GetName() }
		}
	}
	return cols
}
