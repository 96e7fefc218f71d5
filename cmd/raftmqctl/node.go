package main

import (
	"context"
	"fmt"
	"sort"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/raftmq/raftmq/proto"
)

// The node verbs: status, ping and await_startup, from ClusterStatus, the
// one call every node answers from its own state.

func init() {
	verbs["status"] = verb{max: 0, run: nodeStatus,
		help: "The node's id, version, uptime, raft state and term, the leader, its listeners and the\n" +
			"cluster's members."}
	verbs["ping"] = verb{max: 0, run: ping,
		help: "Exit 0 when the node answers, 69 when it does not within -t."}
	verbs["await_startup"] = verb{max: 0, run: awaitStartup,
		help: "Wait until the node answers and is ready: it knows a leader and has applied the\n" +
			"cluster's log. Exit 0 then, 69 when -t runs out first."}
}

// listener is one address a node serves.
type listener struct {
	Protocol string `json:"protocol"`
	Address  string `json:"address"`
}

func nodeStatus(c *call) error {
	c.inform("Status of node %s ...", c.o.node)
	r, err := c.c.ClusterStatus(c.ctx, &proto.ClusterStatusRequest{Consistent: c.o.consistent})
	if err != nil {
		return err
	}
	var self *proto.NodeStatus
	for _, n := range r.GetNodes() {
		if n.GetId() == r.GetNodeId() {
			self = n
		}
	}
	var ls []listener
	if self != nil {
		for _, l := range []listener{{"amqp", self.GetAmqpAddr()}, {"grpc", self.GetGrpcAddr()}, {"raft", self.GetRaftAddr()}} {
			if l.Address != "" {
				ls = append(ls, l)
			}
		}
	}
	members := make([]string, 0, len(r.GetNodes()))
	for _, n := range r.GetNodes() {
		members = append(members, n.GetId())
	}
	sort.Strings(members)
	if c.o.json {
		return writeJSON(c.out, map[string]any{
			"node_id": r.GetNodeId(), "raft_state": r.GetRaftState(), "term": r.GetTerm(),
			"leader_id": r.GetLeaderId(), "leader_addr": r.GetLeaderAddr(),
			"applied_index": r.GetAppliedIndex(), "listeners": ls, "members": members,
			"raftmq_version": r.GetVersion(), "uptime": r.GetUptimeMs() / 1000,
		})
	}
	leader := r.GetLeaderId()
	if leader == "" {
		leader = "(none)"
	}
	fmt.Fprintf(c.out, "Node: %s\n", r.GetNodeId())
	// rabbitmqctl status's wording for the two.
	fmt.Fprintf(c.out, "raftmq version: %s\n", r.GetVersion())
	fmt.Fprintf(c.out, "Uptime (seconds): %d\n", r.GetUptimeMs()/1000)
	fmt.Fprintf(c.out, "Raft state: %s (term %d, applied index %d)\n", r.GetRaftState(), r.GetTerm(), r.GetAppliedIndex())
	fmt.Fprintf(c.out, "Leader: %s\n", leader)
	fmt.Fprintln(c.out, "Listeners:")
	for _, l := range ls {
		fmt.Fprintf(c.out, "  %s %s\n", l.Protocol, l.Address)
	}
	_, err = fmt.Fprintf(c.out, "Cluster members: %d\n", len(members))
	return err
}

func ping(c *call) error {
	c.inform("Will ping %s. This only checks that the node answers.", c.o.node)
	if _, err := c.c.ClusterStatus(c.ctx, &proto.ClusterStatusRequest{}); err != nil {
		return exitError{exitUnavailable, fmt.Sprintf("ping of %s failed: %s", c.o.node, status.Convert(err).Message())}
	}
	return c.done("Ping succeeded", nil)
}

// awaitPoll is how often await_startup asks a node that is not ready.
var awaitPoll = 200 * time.Millisecond

func awaitStartup(c *call) error {
	c.inform("Waiting for %s to start ...", c.o.node)
	const noAnswer = "no answer"
	last := noAnswer
	for {
		r, err := c.c.ClusterStatus(c.ctx, &proto.ClusterStatusRequest{})
		switch {
		case err != nil && status.Code(err) == codes.DeadlineExceeded && last != noAnswer:
			// The deadline cut this call short (the server may say so
			// before our context does): the reason to report is the
			// previous answer's.
		case err != nil:
			last = status.Convert(err).Message()
		case r.GetLeaderId() == "":
			last = "no leader is known"
		case r.GetAppliedIndex() == 0:
			// A node that knows a leader but has applied nothing does
			// not hold the cluster's users yet and refuses logins.
			last = "the node has not applied the cluster's log"
		default:
			return c.done(fmt.Sprintf("Node %s is ready", r.GetNodeId()), map[string]any{"node_id": r.GetNodeId()})
		}
		select {
		case <-c.ctx.Done():
			return exitError{exitUnavailable, fmt.Sprintf("%s did not start within %v: %s", c.o.node, c.o.timeout, last)}
		case <-time.After(awaitPoll):
		}
	}
}

// clusterView fetches the cluster's leader and voters for list_queues'
// leader and members columns (every queue is in the one raft group).
func clusterView(ctx context.Context, c proto.AdminClient, consistent bool) (leader string, members []string, err error) {
	r, err := c.ClusterStatus(ctx, &proto.ClusterStatusRequest{Consistent: consistent})
	if err != nil {
		return "", nil, err
	}
	for _, n := range r.GetNodes() {
		if n.GetSuffrage() == "voter" {
			members = append(members, n.GetId())
		}
	}
	sort.Strings(members)
	return r.GetLeaderId(), members, nil
}

func init() {
	verbs["environment"] = verb{args: "[column ...]", max: -1, run: environment,
		columns: columnNames(settingColumns), defaults: []string{"name", "value"},
		help: "The node's settings: every raftmq flag with the value the node runs with (from its command\n" +
			"line, its environment or the default). Secrets (--cluster-secret, --default-password,\n" +
			"--gossip-key) show only <set>."}
}

var settingColumns = []column[*proto.Setting]{
	{"name", func(s *proto.Setting) any { return s.GetName() }},
	{"value", func(s *proto.Setting) any { return s.GetValue() }},
}

func environment(c *call) error {
	r, err := c.c.Environment(c.ctx, &proto.EnvironmentRequest{})
	if err != nil {
		return err
	}
	c.inform("Application environment of node %s ...", r.GetNodeId())
	return listing(c, r.GetSettings(), settingColumns, []string{"name", "value"})
}
