package mgmt

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"testing"

	"github.com/raftmq/raftmq/api/ops"
	"github.com/raftmq/raftmq/api/ops/opstest"
	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/proto"
)

// TestManagementObjects covers the routes beyond queues and definitions
// on a single node whose AMQP connections are a fixed list.
func TestManagementObjects(t *testing.T) {
	c := clustertest.New(t, 1)
	n := c.WaitForLeader(clustertest.Timeout)
	conns := &opstest.Conns{Open: []*proto.ConnectionInfo{
		{Node: n.NodeID(), Id: "c1", Peer: "127.0.0.1:40001", User: "guest", Vhost: "/", Channels: 1,
			UserProvidedName: "orders-worker", ClientProperties: &proto.Table{Fields: []*proto.Field{
				{Key: "connection_name", Value: &proto.Value{Kind: &proto.Value_LongString{LongString: []byte("orders-worker")}}},
				{Key: "product", Value: &proto.Value{Kind: &proto.Value_LongString{LongString: []byte("amqp091-go")}}},
			}}},
	}}
	admin := ops.New(ops.Deps{Node: ops.FromCluster(n), Conns: conns})
	g := serveOps(t, admin)

	// Connections: listed, found by name, closed on their node.
	var cs []map[string]any
	g.getJSON("/api/connections", &cs)
	name := n.NodeID() + "/c1"
	if len(cs) != 1 || cs[0]["name"] != "127.0.0.1:40001 -> "+name || cs[0]["peer_port"] != float64(40001) || cs[0]["user"] != "guest" {
		t.Fatalf("connections %v", cs)
	}
	if cp, _ := cs[0]["client_properties"].(map[string]any); cs[0]["user_provided_name"] != "orders-worker" ||
		cp["connection_name"] != "orders-worker" || cp["product"] != "amqp091-go" {
		t.Fatalf("client's name and properties %v", cs[0])
	}
	path := "/api/connections/" + url.PathEscape(cs[0]["name"].(string))
	var one map[string]any
	g.getJSON(path, &one)
	if one["id"] != "c1" {
		t.Fatalf("connection %v", one)
	}
	g.must(http.StatusNoContent, "DELETE", path, nil)
	if !slices.Equal(conns.Closed, []string{"c1:Closed via management plugin"}) {
		t.Fatalf("closed %v", conns.Closed)
	}
	g.must(http.StatusNotFound, "DELETE", "/api/connections/nope", nil)

	// A consumer on that connection shows with its channel.
	g.must(http.StatusCreated, "PUT", "/api/queues/%2F/work", nil)
	ch := &proto.ChannelRef{Node: n.NodeID(), Connection: "c1", Channel: 3}
	if r, err := n.Submit(opstest.Context(t), &proto.Command{Cmd: &proto.Command_Consume{Consume: &proto.Consume{
		Vhost: "/", Queue: "work", Consumer: &proto.ConsumerRef{Channel: ch, Tag: "ctag-1"}, Prefetch: 5,
	}}}); err != nil || r.GetCode() != 0 {
		t.Fatal(err, r)
	}
	var consumers, channels []map[string]any
	g.getJSON("/api/consumers/%2F", &consumers)
	if len(consumers) != 1 || consumers[0]["consumer_tag"] != "ctag-1" || consumers[0]["prefetch_count"] != float64(5) ||
		consumers[0]["queue"].(map[string]any)["name"] != "work" ||
		consumers[0]["channel_details"].(map[string]any)["name"] != "127.0.0.1:40001 -> "+name+" (3)" {
		t.Fatalf("consumers %v", consumers)
	}
	g.getJSON("/api/channels", &channels)
	if len(channels) != 1 || channels[0]["number"] != float64(3) || channels[0]["consumer_count"] != float64(1) {
		t.Fatalf("channels %v", channels)
	}

	// Policies and operator policies, and what a queue shows of them.
	g.must(http.StatusCreated, "PUT", "/api/policies/%2F/ttl", map[string]any{"pattern": "^work$", "apply-to": "queues",
		"definition": map[string]any{"message-ttl": 5000, "dead-letter-exchange": "amq.fanout"}, "priority": 1})
	g.must(http.StatusNoContent, "PUT", "/api/policies/%2F/ttl", map[string]any{"pattern": "^work$", "apply-to": "queues",
		"definition": map[string]any{"message-ttl": 5000, "dead-letter-exchange": "amq.fanout", "consumer-timeout": 60000}, "priority": 1})
	code, body, _ := g.do("PUT", "/api/policies/%2F/ha", map[string]any{"pattern": ".*", "definition": map[string]any{"ha-mode": "all"}})
	if code != http.StatusBadRequest {
		t.Fatalf("a policy key raftmq does not apply: %d %s", code, body)
	}
	g.must(http.StatusCreated, "PUT", "/api/operator-policies/%2F/cap", map[string]any{"pattern": ".*", "apply-to": "queues",
		"definition": map[string]any{"max-length": 10, "message-ttl": 1000}})
	var pol map[string]any
	g.getJSON("/api/policies/%2F/ttl", &pol)
	if pol["apply-to"] != "queues" || pol["priority"] != float64(1) || pol["definition"].(map[string]any)["message-ttl"] != float64(5000) ||
		pol["definition"].(map[string]any)["consumer-timeout"] != float64(60000) {
		t.Fatalf("policy %v", pol)
	}
	// RabbitMQ 4.3's delayed-retry keys, and LavinMQ's multiplier.
	retry := map[string]any{"delayed-retry-type": "failed", "delayed-retry-min": float64(100), "delayed-retry-max": float64(900), "delayed-retry-multiplier": float64(3)}
	g.must(http.StatusCreated, "PUT", "/api/policies/%2F/retry", map[string]any{"pattern": "^retry$", "apply-to": "queues", "definition": retry})
	g.getJSON("/api/policies/%2F/retry", &pol)
	if fmt.Sprint(pol["definition"]) != fmt.Sprint(retry) {
		t.Fatalf("retry policy %v, want %v", pol["definition"], retry)
	}
	// RabbitMQ's queue-leader-locator: its names only, and not in an
	// operator policy, which RabbitMQ has no such key for either.
	g.must(http.StatusCreated, "PUT", "/api/policies/%2F/near", map[string]any{"pattern": "^near-", "apply-to": "queues",
		"definition": map[string]any{"queue-leader-locator": "client-local"}})
	g.getJSON("/api/policies/%2F/near", &pol)
	if pol["definition"].(map[string]any)["queue-leader-locator"] != "client-local" {
		t.Fatalf("locator policy %v", pol)
	}
	for _, c := range []struct{ path, value string }{{"/api/policies/%2F/far", "nearest"}, {"/api/operator-policies/%2F/far", "balanced"}} {
		if code, body, _ := g.do("PUT", c.path, map[string]any{"pattern": ".*", "definition": map[string]any{"queue-leader-locator": c.value}}); code != http.StatusBadRequest {
			t.Fatalf("PUT %s with queue-leader-locator %s: %d %s", c.path, c.value, code, body)
		}
	}
	g.must(http.StatusNoContent, "DELETE", "/api/policies/%2F/near", nil)
	var q map[string]any
	g.getJSON("/api/queues/%2F/work", &q)
	if d, ok := q["messages_delayed"]; !ok || d != float64(0) {
		t.Fatalf("messages_delayed %v", d)
	}
	def := q["effective_policy_definition"].(map[string]any)
	// The operator policy's stricter TTL wins over the policy's here, as
	// its value is what raftmq applies (the lower of the two).
	if q["policy"] != "ttl" || q["operator_policy"] != "cap" || def["max-length"] != float64(10) ||
		def["dead-letter-exchange"] != "amq.fanout" || q["effective_message_ttl"] != float64(1000) {
		t.Fatalf("queue under policies %v", q)
	}
	g.must(http.StatusNoContent, "DELETE", "/api/policies/%2F/ttl", nil)
	g.must(http.StatusNoContent, "DELETE", "/api/operator-policies/%2F/cap", nil)
	g.must(http.StatusNotFound, "GET", "/api/policies/%2F/ttl", nil)

	// Users: a RabbitMQ hash as given, tags changed without the password.
	g.must(http.StatusCreated, "PUT", "/api/users/ops", map[string]any{"password_hash": "sDUr/nKRysXq57nU13I9lJcFnQ8bV8rpcnRkgpS8b1vqrG4E",
		"hashing_algorithm": "rabbit_password_hashing_sha256", "tags": "management"})
	ops := mgmtClient{t: t, base: g.base, user: "ops", pass: "0ps"}
	ops.must(http.StatusOK, "GET", "/api/whoami", nil)
	g.must(http.StatusNoContent, "PUT", "/api/users/ops", map[string]any{"tags": "administrator"})
	var who map[string]any
	ops.getJSON("/api/whoami", &who)
	if !slices.Equal(toStrings(who["tags"]), []string{"administrator"}) {
		t.Fatalf("whoami after the tags changed %v", who)
	}
	code, _, _ = g.do("PUT", "/api/users/md5", map[string]any{"password_hash": "AAAA", "hashing_algorithm": "rabbit_password_hashing_md5", "tags": ""})
	if code != http.StatusBadRequest {
		t.Fatalf("an md5 hash: %d", code)
	}
	g.must(http.StatusNoContent, "DELETE", "/api/users/ops", nil)
	ops.must(http.StatusUnauthorized, "GET", "/api/whoami", nil)

	// Vhosts and permissions.
	g.must(http.StatusCreated, "PUT", "/api/vhosts/v%2F2", map[string]any{"description": "slash inside"})
	var v map[string]any
	g.getJSON("/api/vhosts/v%2F2", &v)
	if v["name"] != "v/2" || v["description"] != "slash inside" {
		t.Fatalf("vhost %v", v)
	}
	g.must(http.StatusCreated, "PUT", "/api/permissions/v%2F2/guest", map[string]any{"configure": ".*", "write": ".*", "read": ".*"})
	var perms []map[string]any
	g.getJSON("/api/vhosts/v%2F2/permissions", &perms)
	if len(perms) != 1 || perms[0]["user"] != "guest" {
		t.Fatalf("vhost permissions %v", perms)
	}
	g.must(http.StatusNoContent, "DELETE", "/api/permissions/v%2F2/guest", nil)
	g.must(http.StatusNotFound, "GET", "/api/permissions/v%2F2/guest", nil)
	code, _, _ = g.do("PUT", "/api/permissions/v%2F2/nobody", map[string]any{"configure": ".*", "write": ".*", "read": ".*"})
	if code != http.StatusBadRequest {
		t.Fatalf("permissions of a missing user: %d", code)
	}
	g.must(http.StatusNoContent, "DELETE", "/api/vhosts/v%2F2", nil)
	g.must(http.StatusNotFound, "GET", "/api/vhosts/v%2F2", nil)

	// Nodes, overview, health checks, aliveness.
	var nodes []map[string]any
	g.getJSON("/api/nodes", &nodes)
	if len(nodes) != 1 || nodes[0]["name"] != n.NodeID() || nodes[0]["raft_leader"] != true || nodes[0]["running"] != true {
		t.Fatalf("nodes %v", nodes)
	}
	g.must(http.StatusOK, "GET", "/api/nodes/"+n.NodeID(), nil)
	g.must(http.StatusNotFound, "GET", "/api/nodes/nope", nil)
	var ov map[string]any
	g.getJSON("/api/overview", &ov)
	if ov["node"] != n.NodeID() || ov["object_totals"].(map[string]any)["queues"] != float64(1) ||
		ov["object_totals"].(map[string]any)["consumers"] != float64(1) {
		t.Fatalf("overview %v", ov)
	}
	for _, p := range []string{"alarms", "local-alarms", "virtual-hosts", "ready-to-serve-clients", "node-is-quorum-critical", "port-listener/5672"} {
		g.must(http.StatusOK, "GET", "/api/health/checks/"+p, nil)
	}
	code, body, _ = g.do("GET", "/api/health/checks/port-listener/1", nil)
	var st map[string]string
	_ = json.Unmarshal(body, &st)
	if code != http.StatusServiceUnavailable || st["status"] != "failed" {
		t.Fatalf("a port nothing listens on: %d %s", code, body)
	}
	g.must(http.StatusOK, "GET", "/api/aliveness-test/%2F", nil)
	g.must(http.StatusNotFound, "GET", "/api/aliveness-test/nope", nil)
	g.must(http.StatusNotFound, "GET", "/api/nosuchroute", nil)
	g.must(http.StatusMethodNotAllowed, "POST", "/api/overview", nil)
}
