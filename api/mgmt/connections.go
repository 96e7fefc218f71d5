package mgmt

import (
	"fmt"
	"net/http"

	"github.com/raftmq/raftmq/api/ops"
	"github.com/raftmq/raftmq/proto"
)

// connectionName is how the API names a connection: RabbitMQ's
// "peer -> listener" form, with the node and raftmq's connection id in
// place of the listener so the name is unique in the cluster and leads to
// the node that holds it.
func connectionName(c *proto.ConnectionInfo) string {
	return fmt.Sprintf("%s -> %s/%s", c.GetPeer(), c.GetNode(), c.GetId())
}

// connectionList is every node's connections the user may see: monitors
// see all, others their own.
func (q *req) connectionList() []*proto.ConnectionInfo {
	resp, err := q.m.ops.ListConnections(q.ctx, &proto.ListConnectionsRequest{})
	if err != nil {
		return nil
	}
	var out []*proto.ConnectionInfo
	for _, c := range resp.GetConnections() {
		if q.user.monitor() || c.GetUser() == q.user.name {
			out = append(out, c)
		}
	}
	return out
}

func connectionJSON(c *proto.ConnectionInfo) map[string]any {
	host, port, _ := splitHostPort(c.GetPeer())
	props := map[string]any{"product": c.GetClientProduct(), "version": c.GetClientVersion()}
	if c.GetClientProperties() != nil {
		props = proto.TableJSON(c.GetClientProperties())
	}
	out := map[string]any{
		"name": connectionName(c), "node": c.GetNode(), "id": c.GetId(),
		"peer_host": host, "peer_port": port, "user": c.GetUser(), "vhost": c.GetVhost(),
		"channels": c.GetChannels(), "ssl": c.GetTls(), "protocol": "AMQP 0-9-1", "type": "network",
		"state": "running", "auth_mechanism": "PLAIN", "timeout": c.GetHeartbeatS(), "frame_max": c.GetFrameMax(),
		"connected_at": c.GetConnectedAtMs(), "user_who_performed_action": c.GetUser(),
		"client_properties": props,
	}
	// RabbitMQ shows the key only for a client that named its connection.
	if n := c.GetUserProvidedName(); n != "" {
		out["user_provided_name"] = n
	}
	return out
}

// connection is the connection the path names, by its name or id; nil
// when there is none.
func (q *req) connection(conns []*proto.ConnectionInfo) *proto.ConnectionInfo {
	name := q.arg("name")
	var found *proto.ConnectionInfo
	for _, c := range conns {
		if connectionName(c) == name || c.GetId() == name {
			found = c
		}
	}
	return found
}

func (q *req) connectionChannels() error {
	found := q.connection(q.connectionList())
	if found == nil {
		return notFound()
	}
	q.list(q.channelList(func(ch *proto.ChannelRef) bool { return ch.GetConnection() == found.GetId() }))
	return nil
}

func (q *req) connections() error {
	name := q.arg("name")
	var found *proto.ConnectionInfo
	conns := q.connectionList()
	if name != "" {
		if found = q.connection(conns); found == nil {
			return notFound()
		}
	}
	switch q.r.Method {
	case http.MethodGet:
		if found != nil {
			q.ok(connectionJSON(found))
			return nil
		}
		out := make([]map[string]any, 0, len(conns))
		for _, c := range conns {
			out = append(out, connectionJSON(c))
		}
		q.list(out)
		return nil
	case http.MethodDelete:
		if found == nil {
			return methodNotAllowed()
		}
		reason := q.r.Header.Get("X-Reason")
		if reason == "" {
			reason = "Closed via management plugin"
		}
		if _, err := q.m.ops.CloseConnection(q.ctx, &proto.CloseConnectionRequest{Node: found.GetNode(), Id: found.GetId(), Reason: reason}); err != nil {
			return err
		}
		q.noContent()
		return nil
	}
	return methodNotAllowed()
}

// channelList lists the channels raftmq's state knows of: those with
// consumers (the state machine tracks a channel by its consumers and
// deliveries; a channel that only publishes lives on its node alone).
func (q *req) channelList(keep func(*proto.ChannelRef) bool) []map[string]any {
	conns := map[string]*proto.ConnectionInfo{}
	for _, c := range q.connectionList() {
		conns[c.GetNode()+"\x00"+c.GetId()] = c
	}
	seen := map[string]map[string]any{}
	var order []string
	q.view(func(s ops.State) {
		for _, c := range s.Consumers("") {
			ch := c.GetConsumer().GetChannel()
			conn, ok := conns[ch.GetNode()+"\x00"+ch.GetConnection()]
			if !ok || !keep(ch) {
				continue
			}
			name := fmt.Sprintf("%s (%d)", connectionName(conn), ch.GetChannel())
			e, ok := seen[name]
			if !ok {
				e = map[string]any{"name": name, "node": ch.GetNode(), "number": ch.GetChannel(), "user": conn.GetUser(),
					"vhost": conn.GetVhost(), "state": "running", "consumer_count": 0, "messages_unacknowledged": uint64(0),
					"connection_details": map[string]any{"name": connectionName(conn), "peer_host": conn.GetPeer()}}
				seen[name] = e
				order = append(order, name)
			}
			e["consumer_count"] = e["consumer_count"].(int) + 1
			e["messages_unacknowledged"] = e["messages_unacknowledged"].(uint64) + c.GetUnacked()
			if c.GetPrefetch() > 0 {
				e["prefetch_count"] = c.GetPrefetch()
			}
		}
	})
	out := make([]map[string]any, 0, len(order))
	for _, n := range order {
		out = append(out, seen[n])
	}
	return out
}

func (q *req) channels() error {
	q.list(q.channelList(func(*proto.ChannelRef) bool { return true }))
	return nil
}

func (q *req) consumers() error {
	vhost, err := q.vhostScope()
	if err != nil {
		return err
	}
	conns := map[string]*proto.ConnectionInfo{}
	for _, c := range q.connectionList() {
		conns[c.GetNode()+"\x00"+c.GetId()] = c
	}
	var out []map[string]any
	q.view(func(s ops.State) {
		for _, c := range s.Consumers(vhost) {
			if !q.user.seesVhost(c.GetVhost()) {
				continue
			}
			ch := c.GetConsumer().GetChannel()
			details := map[string]any{"node": ch.GetNode(), "number": ch.GetChannel()}
			if conn, ok := conns[ch.GetNode()+"\x00"+ch.GetConnection()]; ok {
				details["connection_name"] = connectionName(conn)
				details["name"] = fmt.Sprintf("%s (%d)", connectionName(conn), ch.GetChannel())
				details["user"] = conn.GetUser()
				host, port, _ := splitHostPort(conn.GetPeer())
				details["peer_host"], details["peer_port"] = host, port
			} else if !q.user.monitor() {
				continue
			}
			out = append(out, map[string]any{
				"consumer_tag": c.GetConsumer().GetTag(), "exclusive": c.GetExclusive(), "ack_required": !c.GetNoAck(),
				"prefetch_count": c.GetPrefetch(), "active": c.GetActive(), "activity_status": c.GetActivityStatus(),
				"arguments": proto.TableJSON(c.GetArguments()), "queue": map[string]any{"name": c.GetQueue(), "vhost": c.GetVhost()},
				"channel_details": details,
			})
		}
	})
	q.list(out)
	return nil
}
