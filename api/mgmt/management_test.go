package mgmt

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/raftmq/raftmq/api/ops"
	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/fsm"
)

// mgmtClient calls a management handler as one user.
type mgmtClient struct {
	t          *testing.T
	base       string
	user, pass string
}

func (c mgmtClient) do(method, path string, body any) (int, []byte, http.Header) {
	c.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			c.t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	r, err := http.NewRequest(method, c.base+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	if c.user != "" {
		r.SetBasicAuth(c.user, c.pass)
	}
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out, resp.Header
}

// must calls and fails the test unless the status is want.
func (c mgmtClient) must(want int, method, path string, body any) []byte {
	c.t.Helper()
	code, out, _ := c.do(method, path, body)
	if code != want {
		c.t.Fatalf("%s %s: %d %s, want %d", method, path, code, out, want)
	}
	return out
}

func (c mgmtClient) getJSON(path string, v any) {
	c.t.Helper()
	if err := json.Unmarshal(c.must(http.StatusOK, "GET", path, nil), v); err != nil {
		c.t.Fatalf("GET %s: %v", path, err)
	}
}

// serveManagement serves the management API of node n on loopback.
func serveManagement(t *testing.T, n *cluster.Node) string {
	t.Helper()
	admin := ops.New(ops.Deps{Node: ops.FromCluster(n)})
	t.Cleanup(func() { _ = admin.Close() })
	srv := httptest.NewServer(New(Options{Ops: admin}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// followerManagement starts a three-node cluster and serves the
// management API of a follower.
func followerManagement(t *testing.T) (*clustertest.Cluster, *cluster.Node, mgmtClient) {
	c := clustertest.New(t, 3)
	leader := c.WaitForLeader(clustertest.Timeout)
	follower := c.Followers()[0]
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		if reason := ops.NotReady(ops.FromCluster(follower)); reason != "" {
			return fmt.Errorf("follower: %s", reason)
		}
		return nil
	})
	return c, leader, mgmtClient{t: t, base: serveManagement(t, follower), user: "guest", pass: "guest"}
}

func TestManagementFollowerTopologyPublishGet(t *testing.T) {
	_, leader, c := followerManagement(t)

	// A declare through the follower commits: the leader has the queue.
	if code := c.must(http.StatusCreated, "PUT", "/api/queues/%2F/q1", map[string]any{"durable": "true", "arguments": map[string]any{"x-message-ttl": 60000}}); code == nil {
		t.Fatal("no body expected")
	}
	leader.View(func(m *fsm.Machine) {
		if _, ok := m.Queue("/", "q1"); !ok {
			t.Fatal("the leader has no queue q1 after a PUT through a follower")
		}
	})
	// Again with the same arguments: nothing changes, 204.
	c.must(http.StatusNoContent, "PUT", "/api/queues/%2F/q1", map[string]any{"durable": true, "arguments": map[string]any{"x-message-ttl": 60000}})
	// Different arguments: RabbitMQ's 400 with the AMQP text after the
	// code's name, as RabbitMQ's reason reads.
	code, body, _ := c.do("PUT", "/api/queues/%2F/q1", map[string]any{"durable": true})
	if code != http.StatusBadRequest || !strings.Contains(string(body), `"reason":"inequivalent arg 'x-message-ttl'`) || !strings.Contains(string(body), `"error":"bad_request"`) {
		t.Fatalf("inequivalent declare: %d %s", code, body)
	}

	var q map[string]any
	c.getJSON("/api/queues/%2F/q1", &q)
	if q["name"] != "q1" || q["vhost"] != "/" || q["durable"] != true || q["effective_message_ttl"] != float64(60000) ||
		q["arguments"].(map[string]any)["x-message-ttl"] != float64(60000) || q["type"] != "classic" {
		t.Fatalf("queue %v", q)
	}

	c.must(http.StatusCreated, "PUT", "/api/exchanges/%2F/x1", map[string]any{"type": "topic", "durable": true})
	c.must(http.StatusCreated, "POST", "/api/bindings/%2F/e/x1/q/q1", map[string]any{"routing_key": "a.#"})
	var binds []map[string]any
	c.getJSON("/api/bindings/%2F/e/x1/q/q1", &binds)
	if len(binds) != 1 || binds[0]["routing_key"] != "a.#" || binds[0]["properties_key"] != "a.%23" {
		t.Fatalf("bindings %v", binds)
	}
	c.getJSON("/api/queues/%2F/q1/bindings", &binds)
	if len(binds) != 2 || binds[0]["source"] != "" || binds[1]["source"] != "x1" {
		t.Fatalf("queue bindings (the default exchange's first) %v", binds)
	}

	var routed map[string]bool
	if err := json.Unmarshal(c.must(http.StatusOK, "POST", "/api/exchanges/%2F/x1/publish",
		map[string]any{"routing_key": "a.b", "payload": "hello", "payload_encoding": "string",
			"properties": map[string]any{"content_type": "text/plain", "headers": map[string]any{"k": "v"}}}), &routed); err != nil || !routed["routed"] {
		t.Fatalf("publish: %v %v", routed, err)
	}
	// amq.default is the default exchange.
	if err := json.Unmarshal(c.must(http.StatusOK, "POST", "/api/exchanges/%2F/amq.default/publish",
		map[string]any{"routing_key": "q1", "payload": "AAEC/w==", "payload_encoding": "base64"}), &routed); err != nil || !routed["routed"] {
		t.Fatalf("publish to amq.default: %v %v", routed, err)
	}
	json.Unmarshal(c.must(http.StatusOK, "POST", "/api/exchanges/%2F/x1/publish", map[string]any{"routing_key": "zzz", "payload": "x"}), &routed)
	if routed["routed"] {
		t.Fatal("a message no binding matches was routed")
	}

	get := func(body map[string]any) []map[string]any {
		var out []map[string]any
		if err := json.Unmarshal(c.must(http.StatusOK, "POST", "/api/queues/%2F/q1/get", body), &out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	// ack_requeue_true leaves both messages, the first now redelivered.
	msgs := get(map[string]any{"count": "1", "ackmode": "ack_requeue_true", "encoding": "auto"})
	if len(msgs) != 1 || msgs[0]["payload"] != "hello" || msgs[0]["payload_encoding"] != "string" || msgs[0]["redelivered"] != false ||
		msgs[0]["message_count"] != float64(1) || msgs[0]["exchange"] != "x1" || msgs[0]["routing_key"] != "a.b" ||
		msgs[0]["properties"].(map[string]any)["content_type"] != "text/plain" {
		t.Fatalf("get requeue: %v", msgs)
	}
	msgs = get(map[string]any{"count": 5, "ackmode": "ack_requeue_false", "encoding": "auto", "truncate": 3})
	if len(msgs) != 2 || msgs[0]["redelivered"] != true || msgs[0]["payload"] != "hel" || msgs[0]["payload_bytes"] != float64(5) ||
		msgs[1]["payload_encoding"] != "base64" || msgs[1]["payload"] != "AAEC" {
		t.Fatalf("get take (truncated to 3 bytes; binary as base64): %v", msgs)
	}
	if msgs = get(map[string]any{"count": 1, "ackmode": "ack_requeue_false"}); len(msgs) != 0 {
		t.Fatalf("the queue should be empty, got %v", msgs)
	}
	// No channel of the gets stays behind in the state.
	leader.View(func(m *fsm.Machine) {
		if s := m.Stats(); s.Unacked != 0 {
			t.Fatalf("%d deliveries left unacked by management gets", s.Unacked)
		}
	})

	// Purge, delete with if-empty, bindings by properties key.
	c.must(http.StatusOK, "POST", "/api/exchanges/%2F/amq.default/publish", map[string]any{"routing_key": "q1", "payload": "x"})
	code, body, _ = c.do("DELETE", "/api/queues/%2F/q1?if-empty=true", nil)
	if code != http.StatusBadRequest {
		t.Fatalf("delete if-empty of a queue with a message: %d %s", code, body)
	}
	c.must(http.StatusNoContent, "DELETE", "/api/queues/%2F/q1/contents", nil)
	c.must(http.StatusNoContent, "DELETE", "/api/bindings/%2F/e/x1/q/q1/a.%2523", nil)
	c.getJSON("/api/bindings/%2F/e/x1/q/q1", &binds)
	if len(binds) != 0 {
		t.Fatalf("binding left after its delete: %v", binds)
	}
	c.must(http.StatusNoContent, "DELETE", "/api/queues/%2F/q1?if-empty=true", nil)
	c.must(http.StatusNoContent, "DELETE", "/api/exchanges/%2F/x1", nil)
	c.must(http.StatusNotFound, "GET", "/api/queues/%2F/q1", nil)
	code, body, _ = c.do("GET", "/api/exchanges/%2F/x1", nil)
	if code != http.StatusNotFound || string(bytes.TrimSpace(body)) != `{"error":"Object Not Found","reason":"Not Found"}` {
		t.Fatalf("missing exchange: %d %s", code, body)
	}
	c.must(http.StatusNotFound, "GET", "/api/queues/nosuchvhost", nil)
	// Deleting what is not there is 404, as in RabbitMQ's API (tools
	// read it as "already gone"); AMQP's queue.delete of it stays ok.
	for _, path := range []string{"/api/queues/%2F/q1", "/api/exchanges/%2F/x1", "/api/permissions/%2F/nobody"} {
		code, body, _ := c.do("DELETE", path, nil)
		if code != http.StatusNotFound || string(bytes.TrimSpace(body)) != `{"error":"Object Not Found","reason":"Not Found"}` {
			t.Errorf("DELETE %s of nothing: %d %s, want 404", path, code, body)
		}
	}
}

func TestManagementAuth(t *testing.T) {
	c := clustertest.New(t, 1)
	n := c.WaitForLeader(clustertest.Timeout)
	base := serveManagement(t, n)
	guest := mgmtClient{t: t, base: base, user: "guest", pass: "guest"}
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		if code, _, _ := guest.do("GET", "/api/whoami", nil); code != http.StatusOK {
			return fmt.Errorf("whoami %d", code)
		}
		return nil
	})
	guest.must(http.StatusCreated, "PUT", "/api/users/mon", map[string]any{"password": "pw-mon", "tags": "monitoring"})
	guest.must(http.StatusCreated, "PUT", "/api/users/plain", map[string]any{"password": "pw-plain", "tags": ""})
	guest.must(http.StatusCreated, "PUT", "/api/users/mgr", map[string]any{"password": "pw-mgr", "tags": []string{"management"}})
	guest.must(http.StatusCreated, "PUT", "/api/vhosts/v2", nil)
	guest.must(http.StatusCreated, "PUT", "/api/permissions/v2/mgr", map[string]any{"configure": "^mgr\\.", "write": ".*", "read": ".*"})
	guest.must(http.StatusCreated, "PUT", "/api/permissions/v2/guest", map[string]any{"configure": ".*", "write": ".*", "read": ".*"})
	guest.must(http.StatusCreated, "PUT", "/api/queues/v2/other", nil)

	for _, tc := range []struct {
		user, pass, reason string
	}{
		{"", "", "Login failed"},
		{"guest", "wrong", "Login failed"},
		{"nobody", "x", "Login failed"},
		{"plain", "pw-plain", "Not management user"},
	} {
		code, body, h := mgmtClient{t: t, base: base, user: tc.user, pass: tc.pass}.do("GET", "/api/overview", nil)
		var e map[string]string
		_ = json.Unmarshal(body, &e)
		if code != http.StatusUnauthorized || e["error"] != "not_authorized" || e["reason"] != tc.reason ||
			h.Get("WWW-Authenticate") != `Basic realm="RabbitMQ Management"` {
			t.Fatalf("%q: %d %v %v", tc.user, code, e, h)
		}
	}

	mon := mgmtClient{t: t, base: base, user: "mon", pass: "pw-mon"}
	var who map[string]any
	mon.getJSON("/api/whoami", &who)
	if who["name"] != "mon" || !slices.Equal(toStrings(who["tags"]), []string{"monitoring"}) {
		t.Fatalf("whoami %v", who)
	}
	var qs []map[string]any
	mon.getJSON("/api/queues", &qs) // monitoring sees every vhost
	if len(qs) != 1 || qs[0]["name"] != "other" {
		t.Fatalf("monitoring user's queues %v", qs)
	}
	mon.must(http.StatusUnauthorized, "GET", "/api/users", nil)
	mon.must(http.StatusUnauthorized, "GET", "/api/definitions", nil)
	mon.must(http.StatusUnauthorized, "PUT", "/api/queues/v2/x", nil) // no permissions in v2

	mgr := mgmtClient{t: t, base: base, user: "mgr", pass: "pw-mgr"}
	var vhosts []map[string]any
	mgr.getJSON("/api/vhosts", &vhosts) // only the vhosts it has permissions in
	if len(vhosts) != 1 || vhosts[0]["name"] != "v2" {
		t.Fatalf("management user's vhosts %v", vhosts)
	}
	mgr.must(http.StatusUnauthorized, "GET", "/api/queues/%2F", nil)
	mgr.must(http.StatusUnauthorized, "GET", "/api/nodes", nil)
	mgr.must(http.StatusCreated, "PUT", "/api/queues/v2/mgr.q", nil)
	code, body, _ := mgr.do("PUT", "/api/queues/v2/elsewhere", nil) // configure is ^mgr\.
	if code != http.StatusUnauthorized || !strings.Contains(string(body), "access to queue 'elsewhere' in vhost 'v2' refused") {
		t.Fatalf("declare outside the configure pattern: %d %s", code, body)
	}
	mgr.must(http.StatusUnauthorized, "PUT", "/api/policies/v2/p", map[string]any{"pattern": ".*", "definition": map[string]any{"max-length": 1}})

	// guest is refused beyond loopback, as RabbitMQ's loopback_users.
	h := New(Options{Ops: ops.New(ops.Deps{Node: ops.FromCluster(n)})})
	r := httptest.NewRequest("GET", "/api/overview", nil)
	r.RemoteAddr = "192.0.2.7:40000"
	r.SetBasicAuth("guest", "guest")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusUnauthorized || !strings.Contains(w.Body.String(), "User can only log in via localhost") {
		t.Fatalf("guest from beyond loopback: %d %s", w.Code, w.Body)
	}
	r = httptest.NewRequest("GET", "/api/overview", nil)
	r.RemoteAddr = "192.0.2.7:40000"
	r.SetBasicAuth("mon", "pw-mon")
	w = httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusOK {
		t.Fatalf("another user from beyond loopback: %d %s", w.Code, w.Body)
	}
}

func toStrings(v any) []string {
	var out []string
	for _, e := range v.([]any) {
		out = append(out, e.(string))
	}
	return out
}

// readCompat reads one of the reference files RabbitMQ 3.10.8 produced.
func readCompat(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/rabbitmq-3.10.8/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// topology is the comparable part of a definitions document: each list
// as sorted canonical JSON of its objects.
func topology(t *testing.T, raw []byte) map[string][]string {
	t.Helper()
	var d map[string]any
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, k := range []string{"users", "vhosts", "permissions", "policies", "queues", "exchanges", "bindings", "parameters"} {
		var items []string
		for _, o := range d[k].([]any) {
			m := o.(map[string]any)
			delete(m, "limits")
			j, _ := json.Marshal(m)
			items = append(items, string(j))
		}
		sort.Strings(items)
		out[k] = items
	}
	return out
}

func TestManagementDefinitionsRoundTrip(t *testing.T) {
	_, leader, c := followerManagement(t)
	file := readCompat(t, "definitions.json")

	var res ImportResult
	if err := json.Unmarshal(c.must(http.StatusOK, "POST", "/api/definitions", file), &res); err != nil {
		t.Fatal(err)
	}
	// Every argument raftmq keeps without acting on it is named, once per
	// object; x-single-active-consumer, x-max-priority and x-delivery-limit
	// are acted on.
	for _, want := range []string{
		"global parameter 'cluster_name'",
		"global parameter 'internal_cluster_id'",
	} {
		if !slices.ContainsFunc(res.Warnings, func(w string) bool { return strings.Contains(w, want) }) {
			t.Errorf("no warning %q in %q", want, res.Warnings)
		}
	}
	if len(res.Warnings) != 2 {
		t.Errorf("warnings %q, want exactly the two above", res.Warnings)
	}

	// The users log in with the passwords they had in RabbitMQ (the
	// check AMQP logins use).
	for user, pw := range map[string]string{"guest": "guest", "ops": "0ps", "alice": "s3cret"} {
		leader.View(func(m *fsm.Machine) {
			h, _, ok := m.UserPasswordHash(user)
			if !ok || !fsm.CheckPassword(h, fsm.PasswordSaltLen, pw) {
				t.Errorf("user %s cannot log in with its RabbitMQ password", user)
			}
		})
	}
	alice := mgmtClient{t: t, base: c.base, user: "alice", pass: "s3cret"}
	var who map[string]any
	alice.getJSON("/api/whoami", &who)

	// Export gives back the same topology (users with the same hashes).
	export := c.must(http.StatusOK, "GET", "/api/definitions", nil)
	got, want := topology(t, export), topology(t, file)
	for k := range want {
		if !slices.Equal(got[k], want[k]) {
			t.Errorf("%s:\n got %v\nwant %v", k, got[k], want[k])
		}
	}
	// Importing again, the file or the export, changes no definition (a
	// queue's x-expires lease restarts, as on any declare).
	c.must(http.StatusOK, "POST", "/api/definitions", file)
	c.must(http.StatusOK, "POST", "/api/definitions", export)
	again := topology(t, c.must(http.StatusOK, "GET", "/api/definitions", nil))
	for k := range want {
		if !slices.Equal(again[k], want[k]) {
			t.Errorf("after importing again, %s:\n got %v\nwant %v", k, again[k], want[k])
		}
	}
	// A vhost's definitions carry no vhost field, and import into another
	// vhost: its topology only.
	var vd map[string]any
	c.getJSON("/api/definitions/orders", &vd)
	if qs := vd["queues"].([]any); len(qs) != 8 || qs[0].(map[string]any)["vhost"] != nil {
		t.Fatalf("orders' queues %v", qs)
	}
	c.must(http.StatusCreated, "PUT", "/api/vhosts/copy", nil)
	c.must(http.StatusCreated, "PUT", "/api/permissions/copy/guest", map[string]any{"configure": ".*", "write": ".*", "read": ".*"})
	if err := json.Unmarshal(c.must(http.StatusOK, "POST", "/api/definitions/copy", file), &res); err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(res.Warnings, func(w string) bool {
		return strings.Contains(w, "users are not imported through the definitions of vhost 'copy'")
	}) {
		t.Errorf("a vhost import of users is not reported: %q", res.Warnings)
	}
	var copied []map[string]any
	c.getJSON("/api/queues/copy", &copied)
	if len(copied) != 8 {
		t.Fatalf("vhost copy has %d queues, want the file's 8", len(copied))
	}
}

// TestManagementShapesMatchRabbitMQ compares the JSON of raftmq's answers
// with RabbitMQ 3.10.8's for the same definitions: every field RabbitMQ
// gives is there with the same JSON type, except the statistics and
// Erlang internals listed.
func TestManagementShapesMatchRabbitMQ(t *testing.T) {
	_, _, c := followerManagement(t)
	c.must(http.StatusOK, "POST", "/api/definitions", readCompat(t, "definitions.json"))
	var samples map[string]any
	if err := json.Unmarshal(readCompat(t, "management-api-samples.json"), &samples); err != nil {
		t.Fatal(err)
	}
	// Fields raftmq does not give: Erlang process and memory statistics,
	// and per-second rates it does not sample.
	absent := map[string]bool{
		"backing_queue_status": true, "garbage_collection": true, "reductions": true, "reductions_details": true,
		"memory": true, "idle_since": true, "head_message_timestamp": true, "recoverable_slaves": true,
		"message_bytes_paged_out": true, "message_bytes_persistent": true, "message_bytes_ram": true,
		"message_bytes_unacknowledged": true, "messages_paged_out": true, "messages_persistent": true,
		"messages_ram": true, "messages_ready_ram": true, "messages_unacknowledged_ram": true,
		"consumer_capacity": true, "consumer_utilisation": true, "single_active_consumer_ctag": true,
		"message_bytes_dlx": true, "messages_dlx": true, "open_files": true,
		"churn_rates": true, "sample_retention_policies": true, "release_series_support_status": true,
		"socket_opts": true,
	}
	for _, path := range []string{"/api/queues/orders", "/api/exchanges/orders", "/api/bindings/orders", "/api/users",
		"/api/vhosts", "/api/permissions", "/api/policies", "/api/whoami", "/api/overview", "/api/aliveness-test/%2F",
		"/api/health/checks/alarms"} {
		var got any
		c.getJSON(path, &got)
		sameShape(t, path, samples["GET "+path], got, absent)
	}
}

func jsonType(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case map[string]any:
		return "object"
	case []any:
		return "array"
	case string:
		return "string"
	case float64:
		return "number"
	case bool:
		return "bool"
	}
	return fmt.Sprintf("%T", v)
}

// sameShape checks that got has every key of want (recursively, arrays
// by their first element) with the same JSON type; a null on either side
// matches anything.
func sameShape(t *testing.T, where string, want, got any, absent map[string]bool) {
	t.Helper()
	if want == nil || got == nil {
		return
	}
	if jsonType(want) != jsonType(got) {
		t.Errorf("%s: %s, RabbitMQ gives %s", where, jsonType(got), jsonType(want))
		return
	}
	switch w := want.(type) {
	case []any:
		g := got.([]any)
		if len(w) > 0 && len(g) > 0 {
			sameShape(t, where+"[0]", w[0], g[0], absent)
		}
	case map[string]any:
		g := got.(map[string]any)
		for k, wv := range w {
			if absent[k] {
				continue
			}
			gv, ok := g[k]
			if !ok {
				t.Errorf("%s: no field %q", where, k)
				continue
			}
			// Objects keyed by data (cluster_state by node, arguments)
			// are compared by type only.
			if k == "cluster_state" || k == "arguments" || k == "effective_policy_definition" || k == "definition" {
				if jsonType(gv) != jsonType(wv) {
					t.Errorf("%s.%s: %s, RabbitMQ gives %s", where, k, jsonType(gv), jsonType(wv))
				}
				continue
			}
			sameShape(t, where+"."+k, wv, gv, absent)
		}
	}
}
