package main

import (
	"strings"

	"github.com/raftmq/raftmq/proto"
)

// list_groups: the queue groups the node runs, from ClusterStatus (no
// rabbitmqctl verb shows Ra's groups so; rabbitmq-queues quorum_status
// is the nearest, per queue).

func init() {
	verbs["list_groups"] = verb{args: "[column ...]", max: -1, run: listGroups,
		columns: columnNames(groupColumns), defaults: groupDefaults,
		help: "The queue groups this node is a member of, one a row: id, members, leader, raft_state,\n" +
			"term, commit_index, applied_index (raft's) and fsm_index (its state machine's).\n" +
			"None until the cluster runs queue groups (--queue-groups)."}
}

var groupColumns = []column[*proto.GroupStatus]{
	{"id", func(g *proto.GroupStatus) any { return g.GetId() }},
	{"members", func(g *proto.GroupStatus) any { return strings.Join(g.GetMembers(), ",") }},
	{"leader", func(g *proto.GroupStatus) any { return g.GetLeaderId() }},
	{"raft_state", func(g *proto.GroupStatus) any { return g.GetRaftState() }},
	{"term", func(g *proto.GroupStatus) any { return g.GetTerm() }},
	{"commit_index", func(g *proto.GroupStatus) any { return g.GetCommitIndex() }},
	{"applied_index", func(g *proto.GroupStatus) any { return g.GetAppliedIndex() }},
	{"fsm_index", func(g *proto.GroupStatus) any { return g.GetFsmIndex() }},
}

var groupDefaults = []string{"id", "members", "leader", "raft_state", "term", "commit_index", "applied_index", "fsm_index"}

func listGroups(c *call) error {
	c.inform("Listing queue groups of node %s ...", c.o.node)
	r, err := c.c.ClusterStatus(c.ctx, &proto.ClusterStatusRequest{})
	if err != nil {
		return err
	}
	return listing(c, r.GetGroups(), groupColumns, groupDefaults)
}
