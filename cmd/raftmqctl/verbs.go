package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"text/tabwriter"

	"github.com/raftmq/raftmq/proto"
)

// call is one verb invocation.
type call struct {
	ctx  context.Context
	c    proto.AdminClient
	o    *options
	args []string
	out  io.Writer
	// info receives informational lines; stderr, so that stdout stays
	// the result alone for scripts.
	info io.Writer
}

// inform prints an informational line unless --quiet or JSON output.
func (c *call) inform(format string, args ...any) {
	if c.o.quiet || c.o.json || c.info == nil {
		return
	}
	fmt.Fprintf(c.info, format+"\n", args...)
}

// verb is one entry of the verb table.
type verb struct {
	// args is the synopsis of the positional arguments.
	args string
	// min and max bound the positional arguments (max -1: unbounded).
	min, max int
	// pre validates the arguments before anything is sent (optional).
	pre func(o *options, args []string) error
	run func(c *call) error
	// help is what raftmqctl help VERB says beyond the synopsis.
	help string
	// columns lists the columns of a list verb, defaults those shown
	// when none are named.
	columns  func() []string
	defaults []string
}

// columnNames is a verb's columns for its help.
func columnNames[T any](cols []column[T]) func() []string {
	return func() []string {
		names := make([]string, len(cols))
		for i, c := range cols {
			names[i] = c.name
		}
		return names
	}
}

func (v verb) check(o *options, args []string) error {
	if v.pre == nil {
		return nil
	}
	return v.pre(o, args)
}

// done reports a successful write: a line of text, or {"ok":true,...}.
func (c *call) done(text string, extra map[string]any) error {
	if c.o.json {
		doc := map[string]any{"ok": true}
		for k, v := range extra {
			doc[k] = v
		}
		return writeJSON(c.out, doc)
	}
	_, err := fmt.Fprintln(c.out, text)
	return err
}

// verbs is the verb table.
var verbs = map[string]verb{
	"cluster_status": {args: "", max: 0, run: clusterStatus},
	"list_queues": {args: "[column ...]", max: -1, run: listQueues,
		help: "leader, members and online are the leader, voters and online voters of the queue's raft\n" +
			"group (raft_group), which replicates it; state is always running.",
		columns: columnNames(queueColumns), defaults: queueDefaults},
	"list_exchanges": {args: "[column ...]", max: -1, run: listExchanges,
		columns: columnNames(exchangeColumns), defaults: exchangeDefaults},
	"list_bindings": {args: "[column ...]", max: -1, run: listBindings,
		columns: columnNames(bindingColumns), defaults: bindingDefaults},
	"list_consumers": {args: "[column ...]", max: -1, run: listConsumers,
		columns: columnNames(consumerColumns), defaults: consumerDefaults},
	"list_connections": {args: "[column ...] [--local]", max: -1, run: listConnections,
		columns: columnNames(connectionColumns), defaults: connectionDefaults},
	"close_connection": {args: "NODE ID [REASON]", min: 2, max: 3, run: closeConnection},
	"set_policy":       {args: "NAME PATTERN DEFINITION [--priority N] [--apply-to queues|exchanges|all]", min: 3, max: 3, pre: checkPolicy, run: setPolicy(false)},
	"clear_policy":     {args: "NAME", min: 1, max: 1, run: clearPolicy(false)},
	"list_policies": {args: "[column ...]", max: -1, run: listPolicies(false),
		columns: columnNames(policyColumns), defaults: policyDefaults},
	"set_operator_policy":   {args: "NAME PATTERN DEFINITION [--priority N] [--apply-to queues|exchanges|all]", min: 3, max: 3, pre: checkPolicy, run: setPolicy(true)},
	"clear_operator_policy": {args: "NAME", min: 1, max: 1, run: clearPolicy(true)},
	"list_operator_policies": {args: "[column ...]", max: -1, run: listPolicies(true),
		columns: columnNames(policyColumns), defaults: policyDefaults},
	"purge_queue":     {args: "NAME", min: 1, max: 1, run: purgeQueue},
	"delete_queue":    {args: "NAME [--if-unused] [--if-empty]", min: 1, max: 1, run: deleteQueue},
	"add_user":        {args: "NAME PASSWORD", min: 2, max: 2, run: addUser},
	"delete_user":     {args: "NAME", min: 1, max: 1, run: deleteUser},
	"change_password": {args: "NAME PASSWORD", min: 2, max: 2, run: changePassword},
	"set_user_tags":   {args: "NAME [TAG ...]", min: 1, max: -1, run: setUserTags},
	"list_users": {args: "[column ...]", max: -1, run: listUsers,
		columns: columnNames(userColumns), defaults: userDefaults},
	"set_permissions":   {args: "[-p vhost] USER CONF WRITE READ", min: 4, max: 4, run: setPermissions},
	"clear_permissions": {args: "[-p vhost] USER", min: 1, max: 1, run: clearPermissions},
	"list_permissions": {args: "[-p vhost] [column ...]", max: -1, run: listPermissions,
		columns: columnNames(permissionColumns), defaults: permissionDefaults},
	"add_vhost":    {args: "NAME [--description TEXT]", min: 1, max: 1, run: addVhost},
	"delete_vhost": {args: "NAME", min: 1, max: 1, run: deleteVhost},
	"list_vhosts": {args: "[column ...]", max: -1, run: listVhosts,
		columns: columnNames(vhostColumns), defaults: vhostDefaults},
	"forget_cluster_node": {args: "NODE", min: 1, max: 1, run: forgetClusterNode},
	"transfer_leadership": {args: "[NODE]", max: 1, run: transferLeadership},
	"digest":              {args: "[GROUP]", max: 1, run: digest},
}

// ---- cluster ----

func clusterStatus(c *call) error {
	r, err := c.c.ClusterStatus(c.ctx, &proto.ClusterStatusRequest{Consistent: c.o.consistent})
	if err != nil {
		return err
	}
	if c.o.json {
		return writeProtoJSON(c.out, r)
	}
	leader := r.GetLeaderId()
	if leader == "" {
		leader = "(none)"
	}
	fmt.Fprintf(c.out, "Cluster status of node %s\n", r.GetNodeId())
	fmt.Fprintf(c.out, "Leader: %s\n", leader)
	fmt.Fprintf(c.out, "Raft: state %s, term %d, commit index %d, applied index %d, last log index %d\n",
		r.GetRaftState(), r.GetTerm(), r.GetCommitIndex(), r.GetAppliedIndex(), r.GetLastLogIndex())
	fmt.Fprintf(c.out, "Log clock (unix ms): %d\n", r.GetClockMs())
	if p := r.GetClockProblem(); p != "" {
		fmt.Fprintf(c.out, "Clock: %s (this node does not lead)\n", p)
	}
	fmt.Fprintln(c.out)
	tw := tabwriter.NewWriter(c.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "node\traft_addr\tgrpc_addr\tamqp_addr\thealth\tsuffrage\tleader")
	for _, n := range r.GetNodes() {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%v\n", n.GetId(), n.GetRaftAddr(), n.GetGrpcAddr(), n.GetAmqpAddr(),
			n.GetHealth(), n.GetSuffrage(), n.GetLeader())
	}
	return tw.Flush()
}

func forgetClusterNode(c *call) error {
	if _, err := c.c.RemoveNode(c.ctx, &proto.RemoveNodeRequest{NodeId: c.args[0]}); err != nil {
		return err
	}
	return c.done(fmt.Sprintf("Removed node %s from the cluster", c.args[0]), nil)
}

func transferLeadership(c *call) error {
	req := &proto.TransferLeadershipRequest{}
	if len(c.args) == 1 {
		req.NodeId = c.args[0]
	}
	r, err := c.c.TransferLeadership(c.ctx, req)
	if err != nil {
		return err
	}
	return c.done(fmt.Sprintf("Leader is now %s", r.GetLeaderId()), map[string]any{"leader_id": r.GetLeaderId()})
}

// digest prints the node's applied index and state digest of the metadata
// log, or of queue group GROUP (list_groups names them): equal on every
// member at the same index.
func digest(c *call) error {
	req := &proto.DigestRequest{}
	if len(c.args) == 1 {
		req.Group = c.args[0]
	}
	r, err := c.c.Digest(c.ctx, req)
	if err != nil {
		return err
	}
	if c.o.json {
		return writeProtoJSON(c.out, r)
	}
	_, err = fmt.Fprintf(c.out, "%s %d %s\n", r.GetNodeId(), r.GetAppliedIndex(), r.GetDigest())
	return err
}

// ---- queues and topology ----

// wants reports whether args names any of cols.
func wants(args []string, cols ...string) bool {
	for _, a := range args {
		for _, c := range cols {
			if a == c {
				return true
			}
		}
	}
	return false
}

var queueDefaults = []string{"name", "messages"}

var queueColumns = []column[*proto.QueueInfo]{
	{"name", func(q *proto.QueueInfo) any { return q.GetName() }},
	{"vhost", func(q *proto.QueueInfo) any { return q.GetVhost() }},
	{"durable", func(q *proto.QueueInfo) any { return q.GetDurable() }},
	{"exclusive", func(q *proto.QueueInfo) any { return q.GetExclusive() }},
	{"auto_delete", func(q *proto.QueueInfo) any { return q.GetAutoDelete() }},
	{"arguments", func(q *proto.QueueInfo) any { return proto.TableJSON(q.GetArguments()) }},
	{"messages", func(q *proto.QueueInfo) any { return q.GetReady() + q.GetUnacked() }},
	{"messages_ready", func(q *proto.QueueInfo) any { return q.GetReady() }},
	{"messages_unacknowledged", func(q *proto.QueueInfo) any { return q.GetUnacked() }},
	{"message_bytes", func(q *proto.QueueInfo) any { return q.GetReadyBytes() + q.GetUnackedBytes() }},
	{"message_bytes_ready", func(q *proto.QueueInfo) any { return q.GetReadyBytes() }},
	{"message_bytes_unacknowledged", func(q *proto.QueueInfo) any { return q.GetUnackedBytes() }},
	{"messages_persistent", func(q *proto.QueueInfo) any { return q.GetMessagesPersistent() }},
	{"head_message_timestamp", func(q *proto.QueueInfo) any {
		if ts := q.GetHeadMessageTimestamp(); ts != 0 {
			return ts
		}
		return ""
	}},
	{"consumers", func(q *proto.QueueInfo) any { return q.GetConsumers() }},
	{"policy", func(q *proto.QueueInfo) any { return q.GetPolicy() }},
	{"operator_policy", func(q *proto.QueueInfo) any { return q.GetOperatorPolicy() }},
	{"effective_message_ttl", func(q *proto.QueueInfo) any { return q.GetEffectiveMessageTtl() }},
	{"effective_expires", func(q *proto.QueueInfo) any { return q.GetEffectiveExpires() }},
	{"effective_dead_letter_exchange", func(q *proto.QueueInfo) any { return q.GetEffectiveDeadLetterExchange() }},
	{"earliest_deadline", func(q *proto.QueueInfo) any { return q.GetEarliestDeadlineMs() }},
	{"lease_due", func(q *proto.QueueInfo) any { return q.GetLeaseDueMs() }},
	{"owner_connection", func(q *proto.QueueInfo) any { return q.GetOwnerConnection() }},
	{"type", queueType},
	// Every queue is replicated by its raft group and serves while the
	// group has a leader: state is always running.
	{"state", func(*proto.QueueInfo) any { return "running" }},
	// leader, members (voters), online (voters online) and raft_group are
	// the queue's group's, filled in by listQueues (groups.go).
	{"leader", nil},
	{"members", nil},
	{"online", nil},
	{"raft_group", nil},
}

// queueType is the queue's x-queue-type argument, "classic" without one
// as RabbitMQ reports it.
func queueType(q *proto.QueueInfo) any {
	if t, ok := proto.TableJSON(q.GetArguments())["x-queue-type"].(string); ok && t != "" {
		return t
	}
	return "classic"
}

func listQueues(c *call) error {
	r, err := c.c.ListQueues(c.ctx, &proto.ListQueuesRequest{Vhost: c.o.vhost, Consistent: c.o.consistent})
	if err != nil {
		return err
	}
	cols := queueColumns
	if wants(c.args, "leader", "members", "online", "raft_group") {
		// Only asked for when shown: it is one more call.
		groups, err := groupsView(c.ctx, c.c, c.o.consistent)
		if err != nil {
			return err
		}
		cols = groupColumnsOf(cols, groups)
	}
	c.inform("Listing queues for vhost %s ...", c.o.vhost)
	return listing(c, r.GetQueues(), cols, queueDefaults)
}

var exchangeDefaults = []string{"name", "type"}

var exchangeColumns = []column[*proto.ExchangeInfo]{
	{"name", func(x *proto.ExchangeInfo) any { return x.GetName() }},
	{"vhost", func(x *proto.ExchangeInfo) any { return x.GetVhost() }},
	{"type", func(x *proto.ExchangeInfo) any { return x.GetType() }},
	{"durable", func(x *proto.ExchangeInfo) any { return x.GetDurable() }},
	{"auto_delete", func(x *proto.ExchangeInfo) any { return x.GetAutoDelete() }},
	{"internal", func(x *proto.ExchangeInfo) any { return x.GetInternal() }},
	{"arguments", func(x *proto.ExchangeInfo) any { return proto.TableJSON(x.GetArguments()) }},
	{"policy", func(x *proto.ExchangeInfo) any { return x.GetPolicy() }},
}

func listExchanges(c *call) error {
	r, err := c.c.ListExchanges(c.ctx, &proto.ListRequest{Vhost: c.o.vhost, Consistent: c.o.consistent})
	if err != nil {
		return err
	}
	c.inform("Listing exchanges for vhost %s ...", c.o.vhost)
	return listing(c, r.GetExchanges(), exchangeColumns, exchangeDefaults)
}

var bindingDefaults = []string{"source_name", "source_kind", "destination_name", "destination_kind", "routing_key", "arguments"}

var bindingColumns = []column[*proto.BindingInfo]{
	{"source_name", func(b *proto.BindingInfo) any { return b.GetSource() }},
	{"source_kind", func(*proto.BindingInfo) any { return "exchange" }},
	{"destination_name", func(b *proto.BindingInfo) any { return b.GetDestination() }},
	{"destination_kind", func(b *proto.BindingInfo) any { return b.GetDestinationKind() }},
	{"routing_key", func(b *proto.BindingInfo) any { return b.GetRoutingKey() }},
	{"arguments", func(b *proto.BindingInfo) any { return proto.TableJSON(b.GetArguments()) }},
	{"vhost", func(b *proto.BindingInfo) any { return b.GetVhost() }},
}

func listBindings(c *call) error {
	r, err := c.c.ListBindings(c.ctx, &proto.ListRequest{Vhost: c.o.vhost, Consistent: c.o.consistent})
	if err != nil {
		return err
	}
	c.inform("Listing bindings for vhost %s ...", c.o.vhost)
	return listing(c, r.GetBindings(), bindingColumns, bindingDefaults)
}

// consumerDefaults are rabbitmqctl's.
var consumerDefaults = []string{"queue_name", "channel_pid", "consumer_tag", "ack_required", "prefetch_count", "active", "arguments"}

var consumerColumns = []column[*proto.ConsumerInfo]{
	{"queue_name", func(x *proto.ConsumerInfo) any { return x.GetQueue() }},
	{"channel_pid", func(x *proto.ConsumerInfo) any { return channelPid(x.GetConsumer().GetChannel()) }},
	{"vhost", func(x *proto.ConsumerInfo) any { return x.GetVhost() }},
	{"node", func(x *proto.ConsumerInfo) any { return x.GetConsumer().GetChannel().GetNode() }},
	{"connection", func(x *proto.ConsumerInfo) any { return x.GetConsumer().GetChannel().GetConnection() }},
	{"channel", func(x *proto.ConsumerInfo) any { return x.GetConsumer().GetChannel().GetChannel() }},
	{"consumer_tag", func(x *proto.ConsumerInfo) any { return x.GetConsumer().GetTag() }},
	{"ack_required", func(x *proto.ConsumerInfo) any { return !x.GetNoAck() }},
	{"exclusive", func(x *proto.ConsumerInfo) any { return x.GetExclusive() }},
	{"prefetch_count", func(x *proto.ConsumerInfo) any { return x.GetPrefetch() }},
	{"messages_unacknowledged", func(x *proto.ConsumerInfo) any { return x.GetUnacked() }},
	{"active", func(x *proto.ConsumerInfo) any { return x.GetActive() }},
	{"activity_status", func(x *proto.ConsumerInfo) any { return x.GetActivityStatus() }},
	{"arguments", func(x *proto.ConsumerInfo) any { return proto.TableJSON(x.GetArguments()) }},
}

func listConsumers(c *call) error {
	r, err := c.c.ListConsumers(c.ctx, &proto.ListRequest{Vhost: c.o.vhost, Consistent: c.o.consistent})
	if err != nil {
		return err
	}
	c.inform("Listing consumers in vhost %s ...", c.o.vhost)
	return listing(c, r.GetConsumers(), consumerColumns, consumerDefaults)
}

var connectionDefaults = []string{"node", "id", "peer", "user", "vhost", "channels"}

var connectionColumns = []column[*proto.ConnectionInfo]{
	{"node", func(x *proto.ConnectionInfo) any { return x.GetNode() }},
	{"id", func(x *proto.ConnectionInfo) any { return x.GetId() }},
	{"peer", func(x *proto.ConnectionInfo) any { return x.GetPeer() }},
	{"peer_host", func(x *proto.ConnectionInfo) any { h, _ := splitHostPort(x.GetPeer()); return h }},
	{"peer_port", func(x *proto.ConnectionInfo) any { _, p := splitHostPort(x.GetPeer()); return p }},
	// Every connection listed is open: the admin API lists none that are
	// still in the handshake or closing, nor RabbitMQ's flow states.
	{"state", func(*proto.ConnectionInfo) any { return "running" }},
	// name is RabbitMQ's "peer -> node address", filled in by
	// listConnections from the node's AMQP address.
	{"name", nil},
	{"user", func(x *proto.ConnectionInfo) any { return x.GetUser() }},
	{"vhost", func(x *proto.ConnectionInfo) any { return x.GetVhost() }},
	{"channels", func(x *proto.ConnectionInfo) any { return x.GetChannels() }},
	{"client_product", func(x *proto.ConnectionInfo) any { return x.GetClientProduct() }},
	{"client_version", func(x *proto.ConnectionInfo) any { return x.GetClientVersion() }},
	{"connected_at", func(x *proto.ConnectionInfo) any { return x.GetConnectedAtMs() }},
	{"timeout", func(x *proto.ConnectionInfo) any { return x.GetHeartbeatS() }},
	{"frame_max", func(x *proto.ConnectionInfo) any { return x.GetFrameMax() }},
	{"ssl", func(x *proto.ConnectionInfo) any { return x.GetTls() }},
	{"client_properties", func(x *proto.ConnectionInfo) any { return proto.TableJSON(x.GetClientProperties()) }},
	// The management API's name for the client's connection_name property
	// (rabbitmqctl shows it inside client_properties only).
	{"user_provided_name", func(x *proto.ConnectionInfo) any { return x.GetUserProvidedName() }},
}

func listConnections(c *call) error {
	r, err := c.c.ListConnections(c.ctx, &proto.ListConnectionsRequest{Local: c.o.local})
	if err != nil {
		return err
	}
	cols := append([]column[*proto.ConnectionInfo]{}, connectionColumns...)
	amqpAddr := map[string]string{}
	if wants(c.args, "name") {
		// Only asked for when shown: it is one more call.
		st, err := c.c.ClusterStatus(c.ctx, &proto.ClusterStatusRequest{Consistent: c.o.consistent})
		if err != nil {
			return err
		}
		for _, n := range st.GetNodes() {
			amqpAddr[n.GetId()] = n.GetAmqpAddr()
		}
	}
	for i := range cols {
		if cols[i].name == "name" {
			cols[i].get = func(x *proto.ConnectionInfo) any { return x.GetPeer() + " -> " + amqpAddr[x.GetNode()] }
		}
	}
	c.inform("Listing connections ...")
	return listing(c, r.GetConnections(), cols, connectionDefaults)
}

// splitHostPort is a peer address's host and port ("" when it has none).
func splitHostPort(addr string) (host, port string) {
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return addr, ""
	}
	return h, p
}

func closeConnection(c *call) error {
	req := &proto.CloseConnectionRequest{Node: c.args[0], Id: c.args[1], Reason: "closed by raftmqctl"}
	if len(c.args) == 3 {
		req.Reason = c.args[2]
	}
	if _, err := c.c.CloseConnection(c.ctx, req); err != nil {
		return err
	}
	return c.done(fmt.Sprintf("Closed connection %s on node %s", req.Id, req.Node), nil)
}

func purgeQueue(c *call) error {
	r, err := c.c.PurgeQueue(c.ctx, &proto.PurgeQueueRequest{Vhost: c.o.vhost, Name: c.args[0]})
	if err != nil {
		return err
	}
	return c.done(fmt.Sprintf("Purged %d messages from queue %q in vhost %q", r.GetMessageCount(), c.args[0], c.o.vhost),
		map[string]any{"message_count": r.GetMessageCount()})
}

func deleteQueue(c *call) error {
	r, err := c.c.DeleteQueue(c.ctx, &proto.DeleteQueueRequest{Vhost: c.o.vhost, Name: c.args[0], IfUnused: c.o.ifUnused, IfEmpty: c.o.ifEmpty})
	if err != nil {
		return err
	}
	return c.done(fmt.Sprintf("Deleted queue %q in vhost %q (%d messages)", c.args[0], c.o.vhost, r.GetMessageCount()),
		map[string]any{"message_count": r.GetMessageCount()})
}

// ---- policies ----

func checkPolicy(o *options, args []string) error {
	switch o.applyTo {
	case "queues", "exchanges", "all":
	default:
		return usagef("--apply-to %q must be one of queues, exchanges, all", o.applyTo)
	}
	if _, err := parseDefinition(args[2]); err != nil {
		return usagef("%v", err)
	}
	return nil
}

func setPolicy(operator bool) func(c *call) error {
	return func(c *call) error {
		def, err := parseDefinition(c.args[2])
		if err != nil {
			return usagef("%v", err)
		}
		if _, err := c.c.SetPolicy(c.ctx, &proto.SetPolicyRequest{
			Vhost: c.o.vhost, Name: c.args[0], Pattern: c.args[1], ApplyTo: c.o.applyTo,
			Priority: int32(c.o.priority), Definition: def, Operator: operator,
		}); err != nil {
			return err
		}
		kind := "policy"
		if operator {
			kind = "operator policy"
		}
		return c.done(fmt.Sprintf("Set %s %q for pattern %q to %s with priority %d for vhost %q",
			kind, c.args[0], c.args[1], c.args[2], c.o.priority, c.o.vhost), nil)
	}
}

func clearPolicy(operator bool) func(c *call) error {
	return func(c *call) error {
		if _, err := c.c.ClearPolicy(c.ctx, &proto.ClearPolicyRequest{Vhost: c.o.vhost, Name: c.args[0], Operator: operator}); err != nil {
			return err
		}
		kind := "policy"
		if operator {
			kind = "operator policy"
		}
		return c.done(fmt.Sprintf("Cleared %s %q in vhost %q", kind, c.args[0], c.o.vhost), nil)
	}
}

var policyDefaults = []string{"vhost", "name", "pattern", "apply_to", "definition", "priority"}

var policyColumns = []column[*proto.PolicyInfo]{
	{"vhost", func(p *proto.PolicyInfo) any { return p.GetVhost() }},
	{"name", func(p *proto.PolicyInfo) any { return p.GetName() }},
	{"pattern", func(p *proto.PolicyInfo) any { return p.GetPattern() }},
	{"apply_to", func(p *proto.PolicyInfo) any { return p.GetApplyTo() }},
	{"definition", func(p *proto.PolicyInfo) any { return proto.PolicyDefinitionJSON(p.GetDefinition()) }},
	{"priority", func(p *proto.PolicyInfo) any { return p.GetPriority() }},
}

func listPolicies(operator bool) func(c *call) error {
	return func(c *call) error {
		r, err := c.c.ListPolicies(c.ctx, &proto.ListPoliciesRequest{Vhost: c.o.vhost, Operator: operator, Consistent: c.o.consistent})
		if err != nil {
			return err
		}
		return listing(c, r.GetPolicies(), policyColumns, policyDefaults)
	}
}

// ---- users, permissions, vhosts ----

func addUser(c *call) error {
	if _, err := c.c.AddUser(c.ctx, &proto.AddUserRequest{Name: c.args[0], Password: c.args[1]}); err != nil {
		return err
	}
	return c.done(fmt.Sprintf("Added user %q", c.args[0]), nil)
}

func deleteUser(c *call) error {
	if _, err := c.c.DeleteUser(c.ctx, &proto.DeleteUserRequest{Name: c.args[0]}); err != nil {
		return err
	}
	return c.done(fmt.Sprintf("Deleted user %q", c.args[0]), nil)
}

func changePassword(c *call) error {
	if _, err := c.c.ChangePassword(c.ctx, &proto.ChangePasswordRequest{Name: c.args[0], Password: c.args[1]}); err != nil {
		return err
	}
	return c.done(fmt.Sprintf("Changed the password of user %q", c.args[0]), nil)
}

func setUserTags(c *call) error {
	tags := append([]string{}, c.args[1:]...)
	if _, err := c.c.SetUserTags(c.ctx, &proto.SetUserTagsRequest{Name: c.args[0], Tags: tags}); err != nil {
		return err
	}
	return c.done(fmt.Sprintf("Set the tags of user %q to [%s]", c.args[0], strings.Join(tags, ", ")), nil)
}

var userDefaults = []string{"user", "tags"}

var userColumns = []column[*proto.UserInfo]{
	{"user", func(u *proto.UserInfo) any { return u.GetName() }},
	{"tags", func(u *proto.UserInfo) any { return append([]string{}, u.GetTags()...) }},
}

func listUsers(c *call) error {
	r, err := c.c.ListUsers(c.ctx, &proto.ListRequest{Consistent: c.o.consistent})
	if err != nil {
		return err
	}
	c.inform("Listing users ...")
	return listing(c, r.GetUsers(), userColumns, userDefaults)
}

func setPermissions(c *call) error {
	if _, err := c.c.SetPermissions(c.ctx, &proto.SetPermissionsRequest{
		User: c.args[0], Vhost: c.o.vhost, Configure: c.args[1], Write: c.args[2], Read: c.args[3],
	}); err != nil {
		return err
	}
	return c.done(fmt.Sprintf("Set permissions of user %q in vhost %q", c.args[0], c.o.vhost), nil)
}

func clearPermissions(c *call) error {
	// The node clears nothing for a user that does not exist, and says
	// nothing; rabbitmqctl refuses it (exit 67), and so does raftmqctl.
	users, err := c.c.ListUsers(c.ctx, &proto.ListRequest{Consistent: c.o.consistent})
	if err != nil {
		return err
	}
	known := false
	for _, u := range users.GetUsers() {
		known = known || u.GetName() == c.args[0]
	}
	if !known {
		return rabbitError{exitNoUser, fmt.Sprintf("Error:\nUser %s does not exist", c.args[0])}
	}
	if _, err := c.c.ClearPermissions(c.ctx, &proto.ClearPermissionsRequest{User: c.args[0], Vhost: c.o.vhost}); err != nil {
		return err
	}
	return c.done(fmt.Sprintf("Cleared permissions of user %q in vhost %q", c.args[0], c.o.vhost), nil)
}

var permissionDefaults = []string{"user", "configure", "write", "read"}

var permissionColumns = []column[*proto.PermissionInfo]{
	{"user", func(p *proto.PermissionInfo) any { return p.GetUser() }},
	{"vhost", func(p *proto.PermissionInfo) any { return p.GetVhost() }},
	{"configure", func(p *proto.PermissionInfo) any { return p.GetConfigure() }},
	{"write", func(p *proto.PermissionInfo) any { return p.GetWrite() }},
	{"read", func(p *proto.PermissionInfo) any { return p.GetRead() }},
}

func listPermissions(c *call) error {
	r, err := c.c.ListPermissions(c.ctx, &proto.ListRequest{Vhost: c.o.vhost, Consistent: c.o.consistent})
	if err != nil {
		return err
	}
	c.inform("Listing permissions for vhost %s ...", c.o.vhost)
	if len(r.GetPermissions()) == 0 {
		// rabbitmqctl refuses a vhost that does not exist, where the
		// node answers with no permissions.
		v, err := c.c.ListVhosts(c.ctx, &proto.ListRequest{Vhost: c.o.vhost, Consistent: c.o.consistent})
		if err != nil {
			return err
		}
		if len(v.GetVhosts()) == 0 {
			return noSuchVhost(c.o.vhost)
		}
	}
	return listing(c, r.GetPermissions(), permissionColumns, permissionDefaults)
}

func addVhost(c *call) error {
	if _, err := c.c.AddVhost(c.ctx, &proto.AddVhostRequest{Name: c.args[0], Description: c.o.description}); err != nil {
		return err
	}
	return c.done(fmt.Sprintf("Added vhost %q", c.args[0]), nil)
}

func deleteVhost(c *call) error {
	if _, err := c.c.DeleteVhost(c.ctx, &proto.DeleteVhostRequest{Name: c.args[0]}); err != nil {
		return err
	}
	return c.done(fmt.Sprintf("Deleted vhost %q", c.args[0]), nil)
}

var vhostDefaults = []string{"name"}

var vhostColumns = []column[*proto.VhostInfo]{
	{"name", func(v *proto.VhostInfo) any { return v.GetName() }},
	{"description", func(v *proto.VhostInfo) any { return v.GetDescription() }},
}

func listVhosts(c *call) error {
	r, err := c.c.ListVhosts(c.ctx, &proto.ListRequest{Consistent: c.o.consistent})
	if err != nil {
		return err
	}
	c.inform("Listing vhosts ...")
	return listing(c, r.GetVhosts(), vhostColumns, vhostDefaults)
}
