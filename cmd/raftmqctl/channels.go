package main

import (
	"fmt"
	"sort"

	"github.com/raftmq/raftmq/proto"
)

// list_channels joins the admin API's consumers, which name their
// channel, with the connections they are on. The API has no channel
// listing of its own, so a channel without consumers is not shown: its
// connection's channels column (list_connections) still counts it.

func init() {
	verbs["list_channels"] = verb{args: "[column ...]", max: -1, run: listChannels,
		columns: columnNames(channelColumns), defaults: channelDefaults,
		help: "The channels that have consumers, on every node and in every vhost. A channel without\n" +
			"consumers is not listed (the admin API does not report it); list_connections counts\n" +
			"each connection's channels."}
}

// channelRow is one channel: its consumers and its connection.
type channelRow struct {
	ref       *proto.ChannelRef
	conn      *proto.ConnectionInfo // nil when the connection was not listed
	consumers []*proto.ConsumerInfo
}

func (r *channelRow) unacked() uint64 {
	var n uint64
	for _, c := range r.consumers {
		n += c.GetUnacked()
	}
	return n
}

// channelDefaults are rabbitmqctl's.
var channelDefaults = []string{"pid", "user", "consumer_count", "messages_unacknowledged"}

var channelColumns = []column[*channelRow]{
	{"pid", func(r *channelRow) any { return channelPid(r.ref) }},
	{"node", func(r *channelRow) any { return r.ref.GetNode() }},
	{"connection", func(r *channelRow) any { return r.ref.GetConnection() }},
	{"number", func(r *channelRow) any { return r.ref.GetChannel() }},
	{"peer", func(r *channelRow) any { return r.conn.GetPeer() }},
	{"user", func(r *channelRow) any { return r.conn.GetUser() }},
	{"vhost", func(r *channelRow) any { return r.conn.GetVhost() }},
	{"consumer_count", func(r *channelRow) any { return len(r.consumers) }},
	{"messages_unacknowledged", func(r *channelRow) any { return r.unacked() }},
}

// channelPid names a channel where rabbitmqctl shows its Erlang process,
// <node.connection.number>, in list_channels' pid and list_consumers'
// channel_pid alike.
func channelPid(ref *proto.ChannelRef) string {
	return fmt.Sprintf("<%s.%s.%d>", ref.GetNode(), ref.GetConnection(), ref.GetChannel())
}

func listChannels(c *call) error {
	conns, err := c.c.ListConnections(c.ctx, &proto.ListConnectionsRequest{Local: c.o.local})
	if err != nil {
		return err
	}
	cons, err := c.c.ListConsumers(c.ctx, &proto.ListRequest{Consistent: c.o.consistent})
	if err != nil {
		return err
	}
	type key struct {
		node, conn string
		ch         uint32
	}
	byConn := make(map[key]*proto.ConnectionInfo, len(conns.GetConnections()))
	for _, x := range conns.GetConnections() {
		byConn[key{x.GetNode(), x.GetId(), 0}] = x
	}
	rows := make(map[key]*channelRow)
	for _, x := range cons.GetConsumers() {
		ref := x.GetConsumer().GetChannel()
		k := key{ref.GetNode(), ref.GetConnection(), ref.GetChannel()}
		r := rows[k]
		if r == nil {
			conn, ok := byConn[key{k.node, k.conn, 0}]
			if !ok && c.o.local {
				// --local: only this node's connections' channels.
				continue
			}
			r = &channelRow{ref: ref, conn: conn}
			rows[k] = r
		}
		r.consumers = append(r.consumers, x)
	}
	out := make([]*channelRow, 0, len(rows))
	for _, r := range rows {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i].ref, out[j].ref
		if a.GetNode() != b.GetNode() {
			return a.GetNode() < b.GetNode()
		}
		if a.GetConnection() != b.GetConnection() {
			return a.GetConnection() < b.GetConnection()
		}
		return a.GetChannel() < b.GetChannel()
	})
	c.inform("Listing channels ...")
	return listing(c, out, channelColumns, channelDefaults)
}
