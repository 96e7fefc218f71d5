package mgmt

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"maps"
	"net/http"
	"net/url"
	"time"
	"unicode/utf8"

	"github.com/raftmq/raftmq/api/ops"
	"github.com/raftmq/raftmq/proto"
)

// ---- queues ----

// queueJSON is a queue in RabbitMQ's shape, with raftmq's own fields where
// it knows more (the effective TTLs after arguments and policies, when the
// next message dies, when the x-expires lease falls due).
func (q *req) queueJSON(x *proto.QueueInfo, pols map[string]*proto.PolicyInfo, groups queueGroups) map[string]any {
	typ := "classic"
	if v, ok := proto.TableJSON(x.GetArguments())["x-queue-type"].(string); ok && v != "" {
		typ = v
	}
	var pol, opol any
	def := map[string]any{}
	if p, ok := pols[x.GetVhost()+"\x00op\x00"+x.GetOperatorPolicy()]; ok && x.GetOperatorPolicy() != "" {
		opol = p.GetName()
		for k, v := range proto.PolicyDefinitionJSON(p.GetDefinition()) {
			def[k] = v
		}
	}
	if p, ok := pols[x.GetVhost()+"\x00\x00"+x.GetPolicy()]; ok && x.GetPolicy() != "" {
		pol = p.GetName()
		for k, v := range proto.PolicyDefinitionJSON(p.GetDefinition()) {
			if _, set := def[k]; !set {
				def[k] = v
			}
		}
	}
	var owner any
	if x.GetOwnerConnection() != "" {
		owner = map[string]any{"name": x.GetOwnerConnection()}
	}
	key := [2]string{x.GetVhost(), x.GetName()}
	g := groups.of(x)
	out := q.m.rates.details(map[string]uint64{"messages": x.GetReady() + x.GetUnacked(), "messages_ready": x.GetReady(),
		"messages_unacknowledged": x.GetUnacked()}, &key, q.lenRange, true, lengthKeys...)
	maps.Copy(out, map[string]any{
		"name": x.GetName(), "vhost": x.GetVhost(), "durable": x.GetDurable(), "exclusive": x.GetExclusive(),
		"auto_delete": x.GetAutoDelete(), "arguments": proto.TableJSON(x.GetArguments()),
		// A queue is replicated by its Raft group, as a quorum queue by
		// its Ra cluster: the group's leader, voters and online voters.
		"node": g.leader, "leader": g.leader, "members": g.members, "online": g.online,
		"raft_group": g.name,
		"type":       typ, "state": "running",
		"policy": pol, "operator_policy": opol, "effective_policy_definition": def,
		"consumers": x.GetConsumers(), "exclusive_consumer_tag": nil, "single_active_consumer_tag": nil,
		"message_bytes": x.GetReadyBytes() + x.GetUnackedBytes(), "message_bytes_ready": x.GetReadyBytes(),
		"message_bytes_unacknowledged": x.GetUnackedBytes(),
		// The state does not track these yet.
		"messages_persistent": x.GetMessagesPersistent(), "head_message_timestamp": optSeconds(x.GetHeadMessageTimestamp()),
		"message_stats":     q.m.queueStats(x.GetVhost(), x.GetName(), q.msgRange),
		"owner_pid_details": owner,
		// raftmq's own.
		"effective_message_ttl":          optMs(x.GetEffectiveMessageTtl()),
		"effective_expires":              optMs(x.GetEffectiveExpires()),
		"effective_dead_letter_exchange": x.GetEffectiveDeadLetterExchange(),
		"next_death":                     optTime(x.GetEarliestDeadlineMs()),
		"lease_due":                      optTime(x.GetLeaseDueMs()),
		// Returned messages waiting out a delayed retry, in neither
		// count above.
		"messages_delayed": x.GetMessagesDelayed(),
		"next_retry_due":   optTime(x.GetNextRetryDueMs()),
	})
	return out
}

// queueSortKey is the value of queueJSON's field k read from the queue
// itself, for the keys a listing is usually sorted by.
func queueSortKey(x *proto.QueueInfo, k string) (any, bool) {
	switch k {
	case "vhost":
		return x.GetVhost(), true
	case "messages":
		return x.GetReady() + x.GetUnacked(), true
	case "messages_ready":
		return x.GetReady(), true
	case "messages_unacknowledged":
		return x.GetUnacked(), true
	case "consumers":
		return x.GetConsumers(), true
	case "message_bytes":
		return x.GetReadyBytes(), true
	case "effective_message_ttl":
		return optMs(x.GetEffectiveMessageTtl()), true
	case "next_death":
		return optTime(x.GetEarliestDeadlineMs()), true
	case "lease_due":
		return optTime(x.GetLeaseDueMs()), true
	}
	return nil, false
}

// optMs is a duration in ms, or null when unset (-1).
func optMs(v int64) any {
	if v < 0 {
		return nil
	}
	return v
}

// optSeconds is a unix-seconds timestamp, or null when 0.
func optSeconds(s int64) any {
	if s == 0 {
		return nil
	}
	return s
}

// optTime is a unix-ms instant as RFC 3339 text, or null when 0.
func optTime(ms int64) any {
	if ms <= 0 {
		return nil
	}
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z07:00")
}

// queuePolicies are the policies queueJSON needs besides the queue.
func queuePolicies(s ops.State) map[string]*proto.PolicyInfo {
	pols := map[string]*proto.PolicyInfo{}
	for _, p := range s.Policies("", false) {
		pols[p.GetVhost()+"\x00\x00"+p.GetName()] = p
	}
	for _, p := range s.Policies("", true) {
		pols[p.GetVhost()+"\x00op\x00"+p.GetName()] = p
	}
	return pols
}

// groups are the Raft groups queueJSON shows the queues', read before the
// state's lock is taken (the node reads each group's raft and log files).
func (q *req) groups() queueGroups {
	groups := queueGroups{}
	for _, g := range q.m.node.Groups() {
		groups[g.ID] = groupView{name: g.Name, leader: g.Leader, members: nonNil(g.Voters()), online: nonNil(g.OnlineVoters())}
	}
	return groups
}

// groupView is a Raft group as queueJSON shows it for each of its queues.
type groupView struct {
	name, leader    string
	members, online []string
}

// queueGroups are the groups this node knows, by id.
type queueGroups map[string]groupView

// of is the group of queue x; an empty one (no leader, no members) when
// this node does not know it.
func (gs queueGroups) of(x *proto.QueueInfo) groupView {
	if g, ok := gs[x.GetRaftGroup()]; ok {
		return g
	}
	return groupView{members: []string{}, online: []string{}}
}

func (q *req) queues() error {
	vhost, err := q.vhostScope()
	if err != nil {
		return err
	}
	var rows []*row
	groups := q.groups()
	q.view(func(s ops.State) {
		pols := queuePolicies(s)
		for _, x := range s.Queues(vhost) {
			if q.user.seesVhost(x.GetVhost()) {
				rows = append(rows, &row{name: x.GetName(), key: func(k string) (any, bool) { return queueSortKey(x, k) },
					build: func() map[string]any { return q.queueJSON(x, pols, groups) }})
			}
		}
	})
	q.listRows(rows)
	return nil
}

// queuePurge serves DELETE /api/queues/v/q/contents.
func (q *req) queuePurge() error {
	vhost, name, err := q.object()
	if err != nil {
		return err
	}
	if e := q.user.may(vhost, permRead, "queue", name); e != nil {
		return e
	}
	if _, err := q.m.ops.PurgeQueue(q.ctx, &proto.PurgeQueueRequest{Vhost: vhost, Name: name}); err != nil {
		return err
	}
	q.noContent()
	return nil
}

// queueBindings serves GET /api/queues/v/q/bindings.
func (q *req) queueBindings() error {
	vhost, name, err := q.object()
	if err != nil {
		return err
	}
	return q.listBindings(vhost, func(b *proto.BindingInfo) bool {
		return b.GetDestination() == name && b.GetDestinationKind() == "queue"
	})
}

// listBindings lists the bindings of vhost ("": every vhost the user
// sees) that keep takes.
func (q *req) listBindings(vhost string, keep func(*proto.BindingInfo) bool) error {
	var out []map[string]any
	q.view(func(s ops.State) {
		for _, b := range q.bindingList(s, vhost) {
			if keep(b) {
				out = append(out, bindingJSON(b))
			}
		}
	})
	q.list(out)
	return nil
}

// queue serves one queue: GET, PUT (declare), DELETE.
func (q *req) queue() error {
	vhost, name, err := q.object()
	if err != nil {
		return err
	}
	switch q.r.Method {
	case http.MethodGet:
		var out map[string]any
		groups := q.groups()
		q.view(func(s ops.State) {
			if x, ok := s.Queue(vhost, name); ok {
				pols := queuePolicies(s)
				out = q.queueJSON(x, pols, groups)
			}
		})
		if out == nil {
			return notFound()
		}
		q.ok(out)
		return nil
	case http.MethodPut:
		if e := q.user.may(vhost, permConfigure, "queue", name); e != nil {
			return e
		}
		b, err := q.body()
		if err != nil {
			return err
		}
		d, err := queueDeclareFromJSON(vhost, name, b)
		if err != nil {
			return err
		}
		existed := false
		q.view(func(s ops.State) { _, existed = s.Queue(vhost, name) })
		if _, err := q.m.ops.DeclareQueue(q.ctx, d); err != nil {
			return err
		}
		q.created(existed)
		return nil
	case http.MethodDelete:
		if e := q.user.may(vhost, permConfigure, "queue", name); e != nil {
			return e
		}
		// RabbitMQ's API answers 404 for a queue that is not there, where
		// AMQP's queue.delete of it is ok.
		existed := false
		q.view(func(s ops.State) { _, existed = s.Queue(vhost, name) })
		if !existed {
			return notFound()
		}
		if _, err := q.m.ops.DeleteQueue(q.ctx, &proto.DeleteQueueRequest{Vhost: vhost, Name: name,
			IfEmpty: q.queryBool("if-empty"), IfUnused: q.queryBool("if-unused")}); err != nil {
			return err
		}
		q.noContent()
		return nil
	}
	return methodNotAllowed()
}

func queueDeclareFromJSON(vhost, name string, b map[string]any) (*proto.QueueDeclare, error) {
	durable, err := fieldBool(b, "durable", true)
	if err != nil {
		return nil, err
	}
	autoDelete, err := fieldBool(b, "auto_delete", false)
	if err != nil {
		return nil, err
	}
	args, err := fieldTable(b, "arguments")
	if err != nil {
		return nil, err
	}
	return &proto.QueueDeclare{Vhost: vhost, Name: name, Durable: durable, AutoDelete: autoDelete, Arguments: args}, nil
}

// queueGet serves POST /api/queues/v/q/get: ackmode ack_requeue_true (or
// reject_requeue_true) puts the messages back, ack_requeue_false (or
// reject_requeue_false) takes them; encoding auto gives a UTF-8 payload as
// a string and anything else as base64, base64 always base64; truncate
// cuts the payload to that many bytes.
func (q *req) queueGet() error {
	vhost, name, err := q.object()
	if err != nil {
		return err
	}
	if e := q.user.may(vhost, permRead, "queue", name); e != nil {
		return e
	}
	b, err := q.body()
	if err != nil {
		return err
	}
	count, err := fieldInt(b, "count", 1)
	if err != nil {
		return err
	}
	if count < 1 || count > 10000 {
		return badRequest("count must be between 1 and 10000, got %d", count)
	}
	ackmode, err := fieldString(b, "ackmode", "")
	if err != nil {
		return err
	}
	var requeue bool
	switch ackmode {
	case "ack_requeue_true", "reject_requeue_true":
		requeue = true
	case "ack_requeue_false", "reject_requeue_false":
	default:
		return badRequest("ackmode must be one of ack_requeue_true, ack_requeue_false, reject_requeue_true, reject_requeue_false, got %q", ackmode)
	}
	encoding, err := fieldString(b, "encoding", "auto")
	if err != nil {
		return err
	}
	if encoding != "auto" && encoding != "base64" {
		return badRequest("encoding must be auto or base64, got %q", encoding)
	}
	truncate, err := fieldInt(b, "truncate", -1)
	if err != nil {
		return err
	}
	msgs, err := q.m.ops.GetMessages(q.ctx, vhost, name, int(count), requeue)
	if err != nil {
		return err
	}
	out := make([]map[string]any, 0, len(msgs))
	for _, g := range msgs {
		body := g.GetBody()
		size := len(body)
		if truncate >= 0 && int64(len(body)) > truncate {
			body = body[:truncate]
		}
		payload, enc := string(body), "string"
		// The choice is made on the whole payload, so a cut cannot turn
		// a binary message into text.
		if encoding == "base64" || !utf8.Valid(g.GetBody()) {
			payload, enc = base64.StdEncoding.EncodeToString(body), "base64"
		}
		out = append(out, map[string]any{
			"payload": payload, "payload_bytes": size, "payload_encoding": enc,
			"redelivered": g.GetRedelivered(), "exchange": g.GetExchange(), "routing_key": g.GetRoutingKey(),
			"message_count": g.GetMessageCount(), "properties": propertiesJSON(g.GetProperties()),
		})
	}
	q.ok(out)
	return nil
}

// propertiesJSON shows only the properties a message has, as RabbitMQ
// does.
func propertiesJSON(p *proto.Properties) map[string]any {
	out := map[string]any{}
	if p == nil {
		return out
	}
	set := func(k string, v *string) {
		if v != nil {
			out[k] = *v
		}
	}
	set("content_type", p.ContentType)
	set("content_encoding", p.ContentEncoding)
	set("correlation_id", p.CorrelationId)
	set("reply_to", p.ReplyTo)
	set("expiration", p.Expiration)
	set("message_id", p.MessageId)
	set("type", p.Type)
	set("user_id", p.UserId)
	set("app_id", p.AppId)
	set("cluster_id", p.ClusterId)
	if p.DeliveryMode != nil {
		out["delivery_mode"] = p.GetDeliveryMode()
	}
	if p.Priority != nil {
		out["priority"] = p.GetPriority()
	}
	if p.Timestamp != nil {
		out["timestamp"] = p.GetTimestamp()
	}
	if p.Headers != nil {
		out["headers"] = proto.TableJSON(p.GetHeaders())
	}
	return out
}

// propertiesFromJSON reads a publish's properties object.
func propertiesFromJSON(b map[string]any) (*proto.Properties, error) {
	p := &proto.Properties{}
	// An absent property stays unset (nil), not empty.
	str := func(k string) (*string, error) {
		if v, ok := b[k]; !ok || v == nil {
			return nil, nil
		}
		s, err := fieldString(b, k, "")
		if err != nil {
			return nil, err
		}
		return &s, nil
	}
	var err error
	for k, dst := range map[string]**string{
		"content_type": &p.ContentType, "content_encoding": &p.ContentEncoding, "correlation_id": &p.CorrelationId,
		"reply_to": &p.ReplyTo, "expiration": &p.Expiration, "message_id": &p.MessageId, "type": &p.Type,
		"user_id": &p.UserId, "app_id": &p.AppId, "cluster_id": &p.ClusterId,
	} {
		if *dst, err = str(k); err != nil {
			return nil, err
		}
	}
	for k, dst := range map[string]**uint32{"delivery_mode": &p.DeliveryMode, "priority": &p.Priority} {
		if _, ok := b[k]; ok {
			n, err := fieldInt(b, k, 0)
			if err != nil {
				return nil, err
			}
			if n < 0 || n > 255 {
				return nil, badRequest("%s must be between 0 and 255", k)
			}
			u := uint32(n)
			*dst = &u
		}
	}
	if _, ok := b["timestamp"]; ok {
		n, err := fieldInt(b, "timestamp", 0)
		if err != nil {
			return nil, err
		}
		p.Timestamp = &n
	}
	if h, err := fieldTable(b, "headers"); err != nil {
		return nil, err
	} else if h != nil {
		p.Headers = h
	}
	return p, nil
}

// ---- exchanges ----

// wireExchange is the exchange's name as the path gives it: amq.default
// is the default exchange, as in RabbitMQ's API.
func wireExchange(name string) string {
	if name == "amq.default" {
		return ""
	}
	return name
}

func exchangeJSON(x *proto.ExchangeInfo) map[string]any {
	out := map[string]any{
		"name": x.GetName(), "vhost": x.GetVhost(), "type": x.GetType(), "durable": x.GetDurable(),
		"auto_delete": x.GetAutoDelete(), "internal": x.GetInternal(), "arguments": proto.TableJSON(x.GetArguments()),
		"user_who_performed_action": "",
	}
	if x.GetPolicy() != "" {
		out["policy"] = x.GetPolicy()
	}
	delayedExchangeJSON(x, out)
	return out
}

func (q *req) exchanges() error {
	vhost, err := q.vhostScope()
	if err != nil {
		return err
	}
	var rows []*row
	q.view(func(s ops.State) {
		for _, x := range s.Exchanges(vhost) {
			if q.user.seesVhost(x.GetVhost()) {
				rows = append(rows, &row{name: x.GetName(), build: func() map[string]any { return exchangeJSON(x) }})
			}
		}
	})
	q.listRows(rows)
	return nil
}

// exchangeBindings serves GET /api/exchanges/v/x/bindings/source and
// .../destination.
func (q *req) exchangeBindings() error {
	dir := q.arg("direction")
	if dir != "source" && dir != "destination" {
		return notFound()
	}
	vhost, name, err := q.object()
	if err != nil {
		return err
	}
	name = wireExchange(name)
	return q.listBindings(vhost, func(b *proto.BindingInfo) bool {
		return (dir == "source" && b.GetSource() == name) ||
			(dir == "destination" && b.GetDestinationKind() == "exchange" && b.GetDestination() == name)
	})
}

// exchange serves one exchange: GET, PUT (declare), DELETE.
func (q *req) exchange() error {
	vhost, name, err := q.object()
	if err != nil {
		return err
	}
	name = wireExchange(name)
	exists := func() (x *proto.ExchangeInfo) {
		q.view(func(s ops.State) {
			for _, e := range s.Exchanges(vhost) {
				if e.GetName() == name {
					x = e
				}
			}
		})
		return x
	}
	switch q.r.Method {
	case http.MethodGet:
		x := exists()
		if x == nil {
			return notFound()
		}
		q.ok(exchangeJSON(x))
		return nil
	case http.MethodPut:
		if e := q.user.may(vhost, permConfigure, "exchange", name); e != nil {
			return e
		}
		b, err := q.body()
		if err != nil {
			return err
		}
		d, err := exchangeDeclareFromJSON(vhost, name, b)
		if err != nil {
			return err
		}
		existed := exists() != nil
		if err := q.m.ops.DeclareExchange(q.ctx, d); err != nil {
			return err
		}
		q.created(existed)
		return nil
	case http.MethodDelete:
		if e := q.user.may(vhost, permConfigure, "exchange", name); e != nil {
			return e
		}
		if exists() == nil {
			return notFound()
		}
		if err := q.m.ops.DeleteExchange(q.ctx, vhost, name, q.queryBool("if-unused")); err != nil {
			return err
		}
		q.noContent()
		return nil
	}
	return methodNotAllowed()
}

func exchangeDeclareFromJSON(vhost, name string, b map[string]any) (*proto.ExchangeDeclare, error) {
	typ, err := fieldString(b, "type", "")
	if err != nil {
		return nil, err
	}
	if typ == "" {
		return nil, badRequest("Mandatory field 'type' is missing")
	}
	durable, err := fieldBool(b, "durable", true)
	if err != nil {
		return nil, err
	}
	autoDelete, err := fieldBool(b, "auto_delete", false)
	if err != nil {
		return nil, err
	}
	internal, err := fieldBool(b, "internal", false)
	if err != nil {
		return nil, err
	}
	args, err := fieldTable(b, "arguments")
	if err != nil {
		return nil, err
	}
	return &proto.ExchangeDeclare{Vhost: vhost, Name: name, Type: typ, Durable: durable, AutoDelete: autoDelete,
		Internal: internal, Arguments: args}, nil
}

// publish serves POST /api/exchanges/v/x/publish: payload with
// payload_encoding string or base64, routing_key, properties; the answer
// says whether a queue took it.
func (q *req) publish() error {
	vhost, exchange, err := q.object()
	if err != nil {
		return err
	}
	exchange = wireExchange(exchange)
	if e := q.user.may(vhost, permWrite, "exchange", exchange); e != nil {
		return e
	}
	b, err := q.body()
	if err != nil {
		return err
	}
	rk, err := fieldString(b, "routing_key", "")
	if err != nil {
		return err
	}
	payload, err := fieldString(b, "payload", "")
	if err != nil {
		return err
	}
	enc, err := fieldString(b, "payload_encoding", "string")
	if err != nil {
		return err
	}
	body := []byte(payload)
	switch enc {
	case "string":
	case "base64":
		if body, err = base64.StdEncoding.DecodeString(payload); err != nil {
			return badRequest("payload is not base64: %v", err)
		}
	default:
		return badRequest("payload_encoding must be string or base64, got %q", enc)
	}
	props := &proto.Properties{}
	if pv, ok := b["properties"]; ok && pv != nil {
		pm, ok := pv.(map[string]any)
		if !ok {
			return badRequest("properties must be an object")
		}
		if props, err = propertiesFromJSON(pm); err != nil {
			return err
		}
	}
	routed, err := q.m.ops.Publish(q.ctx, &proto.Publish{Vhost: vhost, Exchange: exchange, RoutingKey: rk, Properties: props, Body: body})
	if err != nil {
		return err
	}
	q.ok(map[string]bool{"routed": routed})
	return nil
}

// ---- bindings ----

// bindingList is the vhost's bindings ("" = all visible ones) with the
// default exchange's implicit binding of every queue first, as RabbitMQ
// lists them.
func (q *req) bindingList(s ops.State, vhost string) []*proto.BindingInfo {
	var out []*proto.BindingInfo
	for _, x := range s.Queues(vhost) {
		if q.user.seesVhost(x.GetVhost()) {
			out = append(out, &proto.BindingInfo{Vhost: x.GetVhost(), Source: "", Destination: x.GetName(),
				DestinationKind: "queue", RoutingKey: x.GetName()})
		}
	}
	for _, b := range s.Bindings(vhost) {
		if q.user.seesVhost(b.GetVhost()) && b.GetSource() != "" {
			out = append(out, b)
		}
	}
	return out
}

// propertiesKey names a binding among those between the same source and
// destination: its routing key, plus a digest of its arguments when it has
// some (RabbitMQ's key is opaque too; clients take it from the listing).
func propertiesKey(rk string, args *proto.Table) string {
	k := url.PathEscape(rk)
	if rk == "" {
		k = "~"
	}
	if len(args.GetFields()) == 0 {
		return k
	}
	j, _ := json.Marshal(proto.TableJSON(args))
	sum := sha256.Sum256(j)
	return k + "~" + base64.RawURLEncoding.EncodeToString(sum[:8])
}

func bindingJSON(b *proto.BindingInfo) map[string]any {
	return map[string]any{
		"source": b.GetSource(), "vhost": b.GetVhost(), "destination": b.GetDestination(),
		"destination_type": b.GetDestinationKind(), "routing_key": b.GetRoutingKey(),
		"arguments": proto.TableJSON(b.GetArguments()), "properties_key": propertiesKey(b.GetRoutingKey(), b.GetArguments()),
	}
}

func (q *req) bindings() error {
	vhost, err := q.vhostScope()
	if err != nil {
		return err
	}
	return q.listBindings(vhost, func(*proto.BindingInfo) bool { return true })
}

// binding serves /api/bindings/v/e/source/{q|e}/dest: the bindings
// between the two (GET) or a new one (POST); with /props, the one binding
// of that properties key (GET, DELETE).
func (q *req) binding() error {
	if q.arg("kind") != "q" && q.arg("kind") != "e" {
		return notFound()
	}
	vhost, err := q.vhostArg()
	if err != nil {
		return err
	}
	source, dest := wireExchange(q.arg("source")), q.arg("dest")
	kind := "queue"
	if q.arg("kind") == "e" {
		kind = "exchange"
		dest = wireExchange(dest)
	}
	var matching []*proto.BindingInfo
	q.view(func(s ops.State) {
		for _, b := range q.bindingList(s, vhost) {
			if b.GetSource() == source && b.GetDestination() == dest && b.GetDestinationKind() == kind {
				matching = append(matching, b)
			}
		}
	})
	if q.has("props") {
		props := q.arg("props")
		var found *proto.BindingInfo
		for _, b := range matching {
			if propertiesKey(b.GetRoutingKey(), b.GetArguments()) == props {
				found = b
			}
		}
		switch q.r.Method {
		case http.MethodGet:
			if found == nil {
				return notFound()
			}
			q.ok(bindingJSON(found))
			return nil
		case http.MethodDelete:
			if found == nil {
				return notFound()
			}
			if e := q.mayBind(vhost, source, kind, dest); e != nil {
				return e
			}
			if err := q.m.ops.Unbind(q.ctx, &proto.Unbind{Vhost: vhost, Source: source, Destination: dest,
				DestinationIsExchange: kind == "exchange", RoutingKey: found.GetRoutingKey(), Arguments: found.GetArguments()}); err != nil {
				return err
			}
			q.noContent()
			return nil
		}
		return methodNotAllowed()
	}
	switch q.r.Method {
	case http.MethodGet:
		out := make([]map[string]any, 0, len(matching))
		for _, b := range matching {
			out = append(out, bindingJSON(b))
		}
		q.list(out)
		return nil
	case http.MethodPost:
		if e := q.mayBind(vhost, source, kind, dest); e != nil {
			return e
		}
		b, err := q.body()
		if err != nil {
			return err
		}
		rk, err := fieldString(b, "routing_key", "")
		if err != nil {
			return err
		}
		args, err := fieldTable(b, "arguments")
		if err != nil {
			return err
		}
		if err := q.m.ops.Bind(q.ctx, &proto.Bind{Vhost: vhost, Source: source, Destination: dest,
			DestinationIsExchange: kind == "exchange", RoutingKey: rk, Arguments: args}); err != nil {
			return err
		}
		q.w.Header().Set("Location", propertiesKey(rk, args))
		q.w.WriteHeader(http.StatusCreated)
		return nil
	}
	return methodNotAllowed()
}

// mayBind: write on the destination, read on the source, as AMQP's bind.
func (q *req) mayBind(vhost, source, kind, dest string) *httpError {
	if e := q.user.may(vhost, permWrite, kind, dest); e != nil {
		return e
	}
	return q.user.may(vhost, permRead, "exchange", source)
}
