package fsm

import (
	"github.com/raftmq/raftmq/internal/replycode"
	"github.com/raftmq/raftmq/proto"
)

// x-queue-leader-locator (level 20) is where RabbitMQ puts a new quorum
// queue's leader: client-local on the node of the declaring connection,
// balanced on the node leading the fewest (random and least-leaders, the
// older names, count as balanced). raftmq places a queue in a queue
// group, so client-local picks among the groups with the members the
// queue asks for (x-quorum-initial-group-size) those whose member meant
// to lead (the first the log names) is the declaring node, then those it
// is a member of, then the others, the fewest placed queues first within
// each. Without the argument, or from a declare of no connection (the
// management API, definitions), placement is balanced: the groups are
// shared, and queues declared from one node's clients would otherwise
// pile up in its groups. RabbitMQ defaults to client-local; raftmq to
// what its queue_leader_locator = balanced gives. Below level 20 the
// argument was accepted whatever its value and placement ignored it.
//
// From level 21 a policy's queue-leader-locator (the queue's own policy:
// RabbitMQ has no such operator policy key) is checked as the argument
// is, and wins over the argument, as RabbitMQ's lookup of the key has the
// policy's value win. A policy is how an operator makes client-local the
// default of a virtual host, where RabbitMQ also has a node setting
// (queue_leader_locator) that raftmq does not: a node's setting would make
// two replicas place one declare apart unless the declare carried it.

const leaderLocatorArg = "x-queue-leader-locator"

// checkLeaderLocatorArg refuses, as RabbitMQ does, a leader locator that
// is not one of the names it knows.
func checkLeaderLocatorArg(q *queueState) *proto.Result {
	v, ok := tableGet(q.args, leaderLocatorArg)
	if !ok {
		return nil
	}
	s, ok := valueString(v)
	if !ok {
		return invalidArg(leaderLocatorArg, q, "{unacceptable_type,"+typeName(v)+"}")
	}
	if KnownLeaderLocator(s) {
		return nil
	}
	return invalidArg(leaderLocatorArg, q, "invalid_queue_locator_arg")
}

// KnownLeaderLocator reports whether s is one of RabbitMQ's leader
// locators, the names the argument and the policy key take.
func KnownLeaderLocator(s string) bool {
	switch s {
	case "client-local", "balanced", "random", "least-leaders":
		return true
	}
	return false
}

// checkLocatorPolicy refuses a policy whose queue-leader-locator is not
// one of the names the argument takes.
func checkLocatorPolicy(d *proto.PolicyDefinition) *proto.Result {
	if d == nil || d.QueueLeaderLocator == nil || KnownLeaderLocator(d.GetQueueLeaderLocator()) {
		return nil
	}
	return refused(replycode.PreconditionFailed, "PRECONDITION_FAILED - invalid queue-leader-locator '"+d.GetQueueLeaderLocator()+"'")
}

// locateLocal reports whether a queue declared with args, under policy
// pol, asks for the declaring node's groups: pol's queue-leader-locator
// when it has one (from level 21), else the argument. A declare that got
// this far passed checkLeaderLocatorArg, a policy checkLocatorPolicy.
func (s *state) locateLocal(args *proto.Table, pol *policy) bool {
	if s.atLeast(levelLocatorPolicy) && pol != nil {
		if d := pol.def.GetDefinition(); d.QueueLeaderLocator != nil {
			return d.GetQueueLeaderLocator() == "client-local"
		}
	}
	v, ok := tableGet(args, leaderLocatorArg)
	if !ok {
		return false
	}
	str, _ := valueString(v)
	return str == "client-local"
}

// localTier ranks group g for a queue declared from node: 0 when node is
// the member meant to lead it, 1 a member, 2 neither.
func localTier(g QueueGroup, node string) int {
	switch {
	case len(g.Members) > 0 && g.Members[0].ID == node:
		return 0
	case g.HasMember(node):
		return 1
	}
	return 2
}
