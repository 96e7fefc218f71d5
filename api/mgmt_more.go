package api

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// ---- connections, channels, consumers ----

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
	resp, err := q.m.admin.ListConnections(q.ctx, &proto.ListConnectionsRequest{})
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
		props = TableJSON(c.GetClientProperties())
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

func (q *req) connections() error {
	name := q.seg(1)
	var found *proto.ConnectionInfo
	conns := q.connectionList()
	if name != "" {
		for _, c := range conns {
			if connectionName(c) == name || c.GetId() == name {
				found = c
			}
		}
		if found == nil {
			return notFound()
		}
	}
	switch q.r.Method {
	case http.MethodGet:
		if found != nil {
			if q.seg(2) == "channels" {
				q.list(q.channelList(func(ch *proto.ChannelRef) bool { return ch.GetConnection() == found.GetId() }))
				return nil
			}
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
		if _, err := q.m.admin.CloseConnection(q.ctx, &proto.CloseConnectionRequest{Node: found.GetNode(), Id: found.GetId(), Reason: reason}); err != nil {
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
	q.view(func(s State) {
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
	q.view(func(s State) {
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
				"arguments": TableJSON(c.GetArguments()), "queue": map[string]any{"name": c.GetQueue(), "vhost": c.GetVhost()},
				"channel_details": details,
			})
		}
	})
	q.list(out)
	return nil
}

// ---- policies ----

// PolicyDefinitionJSON is a policy definition with RabbitMQ's keys, as the
// management API and raftmqctl show it.
func PolicyDefinitionJSON(d *proto.PolicyDefinition) map[string]any {
	out := map[string]any{}
	if d.MessageTtl != nil {
		out["message-ttl"] = d.GetMessageTtl()
	}
	if d.Expires != nil {
		out["expires"] = d.GetExpires()
	}
	if d.DeadLetterExchange != nil {
		out["dead-letter-exchange"] = d.GetDeadLetterExchange()
	}
	if d.DeadLetterRoutingKey != nil {
		out["dead-letter-routing-key"] = d.GetDeadLetterRoutingKey()
	}
	if d.MaxLength != nil {
		out["max-length"] = d.GetMaxLength()
	}
	if d.MaxLengthBytes != nil {
		out["max-length-bytes"] = d.GetMaxLengthBytes()
	}
	if d.Overflow != nil {
		out["overflow"] = d.GetOverflow()
	}
	if d.DeliveryLimit != nil {
		out["delivery-limit"] = d.GetDeliveryLimit()
	}
	if d.ConsumerTimeout != nil {
		out["consumer-timeout"] = d.GetConsumerTimeout()
	}
	return out
}

// policyDefFromJSON reads the keys raftmq applies; the others come back in
// unknown so that the caller refuses them (the API) or reports them (an
// import).
func policyDefFromJSON(b map[string]any) (def *proto.PolicyDefinition, unknown []string, err error) {
	def = &proto.PolicyDefinition{}
	for k := range b {
		switch k {
		case "message-ttl", "expires", "max-length", "max-length-bytes", "delivery-limit", "consumer-timeout":
			n, err := fieldInt(b, k, 0)
			if err != nil {
				return nil, nil, err
			}
			switch k {
			case "message-ttl":
				def.MessageTtl = &n
			case "expires":
				def.Expires = &n
			case "max-length":
				def.MaxLength = &n
			case "delivery-limit":
				def.DeliveryLimit = &n
			case "consumer-timeout":
				def.ConsumerTimeout = &n
			default:
				def.MaxLengthBytes = &n
			}
		case "dead-letter-exchange", "dead-letter-routing-key", "overflow":
			s, err := fieldString(b, k, "")
			if err != nil {
				return nil, nil, err
			}
			switch k {
			case "dead-letter-exchange":
				def.DeadLetterExchange = &s
			case "dead-letter-routing-key":
				def.DeadLetterRoutingKey = &s
			default:
				def.Overflow = &s
			}
		default:
			unknown = append(unknown, k)
		}
	}
	sort.Strings(unknown)
	return def, unknown, nil
}

func policyJSON(p *proto.PolicyInfo) map[string]any {
	return map[string]any{"vhost": p.GetVhost(), "name": p.GetName(), "pattern": p.GetPattern(),
		"apply-to": p.GetApplyTo(), "definition": PolicyDefinitionJSON(p.GetDefinition()), "priority": p.GetPriority()}
}

// policyFromJSON reads a policy body (PUT /api/policies/v/n, or one policy
// of a definitions file).
func policyFromJSON(vhost, name string, b map[string]any, operator bool) (*proto.SetPolicyRequest, []string, error) {
	pattern, err := fieldString(b, "pattern", "")
	if err != nil {
		return nil, nil, err
	}
	applyTo, err := fieldString(b, "apply-to", "all")
	if err != nil {
		return nil, nil, err
	}
	prio, err := fieldInt(b, "priority", 0)
	if err != nil {
		return nil, nil, err
	}
	dm, ok := b["definition"].(map[string]any)
	if !ok {
		return nil, nil, badRequest("policy definition must be an object")
	}
	def, unknown, err := policyDefFromJSON(dm)
	if err != nil {
		return nil, nil, err
	}
	return &proto.SetPolicyRequest{Vhost: vhost, Name: name, Pattern: pattern, ApplyTo: applyTo, Priority: int32(prio),
		Definition: def, Operator: operator}, unknown, nil
}

func (q *req) policies(operator bool) error {
	vhost, name := q.seg(1), q.seg(2)
	if vhost != "" {
		if _, err := q.vhostArg(1); err != nil {
			return err
		}
	}
	// Policymakers manage policies where they have permissions; operator
	// policies are administrators' (as in RabbitMQ).
	allowed := func(v string) bool {
		if operator {
			return q.user.admin()
		}
		_, ok := q.user.perms[v]
		return q.user.admin() || (q.user.policymaker() && ok)
	}
	switch q.r.Method {
	case http.MethodGet:
		if operator && !q.user.admin() {
			return notAuthorised("Not administrator user")
		}
		if !q.user.policymaker() && !q.user.monitor() {
			return notAuthorised("Not policymaker user")
		}
		var out []map[string]any
		q.view(func(s State) {
			for _, p := range s.Policies(vhost, operator) {
				if (name == "" || p.GetName() == name) && (q.user.monitor() || allowed(p.GetVhost())) {
					out = append(out, policyJSON(p))
				}
			}
		})
		if name != "" {
			if len(out) == 0 {
				return notFound()
			}
			q.ok(out[0])
			return nil
		}
		q.list(out)
		return nil
	case http.MethodPut:
		if name == "" {
			return methodNotAllowed()
		}
		if !allowed(vhost) {
			return notAuthorised("Not policymaker user")
		}
		b, err := q.body()
		if err != nil {
			return err
		}
		req, unknown, err := policyFromJSON(vhost, name, b, operator)
		if err != nil {
			return err
		}
		if len(unknown) > 0 {
			return badRequest("raftmq does not apply the policy keys %v", unknown)
		}
		existed := false
		q.view(func(s State) {
			for _, p := range s.Policies(vhost, operator) {
				existed = existed || p.GetName() == name
			}
		})
		if _, err := q.m.admin.SetPolicy(q.ctx, req); err != nil {
			return err
		}
		q.created(existed)
		return nil
	case http.MethodDelete:
		if name == "" {
			return methodNotAllowed()
		}
		if !allowed(vhost) {
			return notAuthorised("Not policymaker user")
		}
		if _, err := q.m.admin.ClearPolicy(q.ctx, &proto.ClearPolicyRequest{Vhost: vhost, Name: name, Operator: operator}); err != nil {
			return err
		}
		q.noContent()
		return nil
	}
	return methodNotAllowed()
}

// ---- health ----

func (q *req) health() error {
	if q.r.Method != http.MethodGet {
		return methodNotAllowed()
	}
	if q.seg(1) != "checks" {
		return notFound()
	}
	okJSON := map[string]string{"status": "ok"}
	failed := func(reason string) error {
		writeJSON(q.w, http.StatusServiceUnavailable, map[string]string{"status": "failed", "reason": reason})
		return nil
	}
	switch q.seg(2) {
	case "alarms", "local-alarms":
		return q.alarmsCheck(q.seg(2) == "local-alarms")
	case "clocks", "local-clock":
		return q.clockCheck(q.seg(2) == "local-clock")
	case "virtual-hosts":
	case "ready-to-serve-clients":
		if reason := notReady(q.m.node); reason != "" {
			return failed(reason)
		}
	case "node-is-quorum-critical":
		voters, alive := 0, 0
		for _, mb := range q.m.node.Members() {
			if strings.EqualFold(mb.GetSuffrage(), "voter") {
				voters++
				if mb.GetHealth() == "" || mb.GetHealth() == "alive" {
					alive++
				}
			}
		}
		if voters > 1 && alive-1 < voters/2+1 {
			return failed(fmt.Sprintf("stopping this node would leave %d of %d raft voters, fewer than a majority", alive-1, voters))
		}
	case "port-listener":
		port := q.seg(3)
		for _, mb := range q.m.node.Members() {
			if mb.GetId() == q.m.node.NodeID() && (portOf(mb.GetAmqpAddr()) == port || portOf(mb.GetGrpcAddr()) == port) {
				q.ok(okJSON)
				return nil
			}
		}
		if portOf(q.m.addr) == port {
			q.ok(okJSON)
			return nil
		}
		return failed(fmt.Sprintf("no listener on port %s", port))
	default:
		return notFound()
	}
	q.ok(okJSON)
	return nil
}

// aliveness declares the queue aliveness-test in the vhost, publishes a
// message to it and takes it back, all through the log, as RabbitMQ's
// check does.
func (q *req) aliveness() error {
	if q.r.Method != http.MethodGet {
		return methodNotAllowed()
	}
	vhost, err := q.vhostArg(1)
	if err != nil {
		return err
	}
	if e := q.user.may(vhost, permConfigure, "queue", "aliveness-test"); e != nil {
		return e
	}
	ctx, cancel := context.WithTimeout(q.ctx, 10*time.Second)
	defer cancel()
	if _, err := q.m.admin.DeclareQueue(ctx, &proto.QueueDeclare{Vhost: vhost, Name: "aliveness-test"}); err != nil {
		return err
	}
	if _, err := q.m.admin.Publish(ctx, &proto.Publish{Vhost: vhost, RoutingKey: "aliveness-test", Body: []byte("test_message")}); err != nil {
		return err
	}
	msgs, err := q.m.admin.GetMessages(ctx, vhost, "aliveness-test", 1, false)
	if err != nil {
		return err
	}
	if len(msgs) == 0 {
		writeJSON(q.w, http.StatusServiceUnavailable, map[string]string{"status": "failed", "reason": "the test message did not come back"})
		return nil
	}
	q.ok(map[string]string{"status": "ok"})
	return nil
}

// ---- writes shared with the definitions import ----

// putUser writes a user from a body with password, or password_hash (and
// hashing_algorithm), and tags. A body with neither keeps the user's
// current password (RabbitMQ would make it passwordless; raftmq has no
// passwordless users).
func (m *Management) putUser(ctx context.Context, name string, b map[string]any) (existed bool, err error) {
	tags := tagsOf(b["tags"])
	var (
		oldHash []byte
		oldAlg  string
	)
	m.node.View(func(s State) {
		oldHash, oldAlg, existed = s.UserPasswordHash(name)
		oldHash = slices.Clone(oldHash)
	})
	if pw, ok := b["password"].(string); ok {
		_, err := m.admin.AddUserOrReplace(ctx, name, pw, tags)
		return existed, err
	}
	if h, ok := b["password_hash"].(string); ok {
		alg, err := fieldString(b, "hashing_algorithm", fsm.PasswordHashAlgorithm)
		if err != nil {
			return existed, err
		}
		if alg != fsm.PasswordHashAlgorithm {
			return existed, badRequest("hashing_algorithm %q is not supported: raftmq checks %s hashes only", alg, fsm.PasswordHashAlgorithm)
		}
		hash, err := base64.StdEncoding.DecodeString(h)
		if err != nil {
			return existed, badRequest("password_hash is not base64: %v", err)
		}
		if len(hash) != 0 && len(hash) != fsm.PasswordSaltLen+32 {
			return existed, badRequest("password_hash must hold a %d-byte salt and a SHA-256 digest", fsm.PasswordSaltLen)
		}
		return existed, m.admin.PutUser(ctx, name, hash, alg, tags)
	}
	if !existed {
		return false, badRequest("Mandatory field 'password' or 'password_hash' is missing")
	}
	return true, m.admin.PutUser(ctx, name, oldHash, oldAlg, tags)
}

// AddUserOrReplace writes a user with a new salted hash of password,
// whether it exists or not (the management API's PUT /api/users/u; the
// gRPC AddUser refuses an existing user).
func (s *AdminServer) AddUserOrReplace(ctx context.Context, name, password string, tags []string) (bool, error) {
	hash, err := hashPassword(password)
	if err != nil {
		return false, err
	}
	return true, s.PutUser(ctx, name, hash, fsm.PasswordHashAlgorithm, tags)
}

// putPermission sets a user's permissions in a vhost from a body with
// configure, write and read.
func (m *Management) putPermission(ctx context.Context, vhost, user string, b map[string]any) (existed bool, err error) {
	var pats [3]string
	for i, k := range []string{"configure", "write", "read"} {
		if pats[i], err = fieldString(b, k, ""); err != nil {
			return false, err
		}
		if _, err := regexp.Compile(pats[i]); err != nil {
			return false, badRequest("%s pattern %q does not compile: %v", k, pats[i], err)
		}
	}
	userFound, vhostFound := false, false
	m.node.View(func(s State) {
		for _, u := range s.Users() {
			userFound = userFound || u.GetName() == user
		}
		for _, v := range s.Vhosts() {
			vhostFound = vhostFound || v.GetName() == vhost
		}
		for _, p := range s.Permissions() {
			existed = existed || (p.GetUser() == user && p.GetVhost() == vhost)
		}
	})
	if !userFound || !vhostFound {
		return false, badRequest("no_such_user_or_vhost: user '%s', vhost '%s'", user, vhost)
	}
	_, err = m.admin.SetPermissions(ctx, &proto.SetPermissionsRequest{User: user, Vhost: vhost, Configure: pats[0], Write: pats[1], Read: pats[2]})
	return existed, err
}
