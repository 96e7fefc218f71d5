package mgmt

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/raftmq/raftmq/cluster/clustertest"
)

// oneNodeManagement serves a one-node cluster's management API once it
// answers.
func oneNodeManagement(t *testing.T) mgmtClient {
	t.Helper()
	cl := clustertest.New(t, 1)
	n := cl.WaitForLeader(clustertest.Timeout)
	c := mgmtClient{t: t, base: serveManagement(t, n), user: "guest", pass: "guest"}
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		if code, _, _ := c.do("GET", "/api/whoami", nil); code != http.StatusOK {
			return fmt.Errorf("whoami %d", code)
		}
		return nil
	})
	return c
}

// routedTo publishes through the API and reports whether a queue took it.
func routedTo(c mgmtClient, x, key string, props map[string]any) bool {
	c.t.Helper()
	var r map[string]bool
	if err := json.Unmarshal(c.must(http.StatusOK, "POST", "/api/exchanges/%2F/"+x+"/publish", map[string]any{
		"routing_key": key, "payload": "p", "payload_encoding": "string", "properties": props}), &r); err != nil {
		c.t.Fatal(err)
	}
	return r["routed"]
}

// The three picking exchange types are listed, declared and bound
// through the API, with RabbitMQ's refusals as 400s.
func TestManagementPickingExchanges(t *testing.T) {
	c := oneNodeManagement(t)
	var ov struct {
		Types []struct {
			Name string `json:"name"`
		} `json:"exchange_types"`
	}
	c.getJSON("/api/overview", &ov)
	var names []string
	for _, x := range ov.Types {
		names = append(names, x.Name)
	}
	for _, typ := range []string{"x-consistent-hash", "x-modulus-hash", "x-local-random"} {
		if !slices.Contains(names, typ) {
			t.Errorf("overview exchange_types %v lacks %s", names, typ)
		}
		c.must(http.StatusCreated, "PUT", "/api/exchanges/%2F/"+typ, map[string]any{"type": typ})
	}
	_, out, _ := c.do("PUT", "/api/exchanges/%2F/bad", map[string]any{"type": "x-consistent-hash",
		"arguments": map[string]any{"hash-header": "h", "hash-property": "message_id"}})
	if !strings.Contains(string(out), "hash-header and hash-property are mutually exclusive") {
		t.Errorf("both arguments: %s", out)
	}
	c.must(http.StatusCreated, "PUT", "/api/queues/%2F/q", map[string]any{"durable": true})
	code, out, _ := c.do("POST", "/api/bindings/%2F/e/x-consistent-hash/q/q", map[string]any{"routing_key": "heavy"})
	var refusal struct{ Reason string }
	_ = json.Unmarshal(out, &refusal)
	if code != http.StatusBadRequest || refusal.Reason != `The binding key must be an integer: <<"heavy">>` {
		t.Errorf("weight heavy: %d %s", code, out)
	}
	code, out, _ = c.do("POST", "/api/bindings/%2F/e/x-local-random/q/q", map[string]any{"routing_key": "k"})
	if code != http.StatusBadRequest || !strings.Contains(string(out), "Non empty binding 'k' key not permitted") {
		t.Errorf("local random with a key: %d %s", code, out)
	}
	for x, key := range map[string]string{"x-consistent-hash": "3", "x-modulus-hash": "any", "x-local-random": ""} {
		c.must(http.StatusCreated, "POST", "/api/bindings/%2F/e/"+x+"/q/q", map[string]any{"routing_key": key})
		if !routedTo(c, x, "k", nil) {
			t.Errorf("%s did not route to its one queue", x)
		}
	}
}

// Definitions import declares a consistent-hash exchange with its
// hash-header and weighted bindings, without a warning that the argument
// is not applied, and refuses a binding whose weight is no integer.
func TestManagementDefinitionsPickingExchanges(t *testing.T) {
	c := oneNodeManagement(t)
	defs := map[string]any{
		"queues": []any{map[string]any{"name": "a", "vhost": "/", "durable": true}, map[string]any{"name": "b", "vhost": "/", "durable": true}},
		"exchanges": []any{map[string]any{"name": "orders", "vhost": "/", "type": "x-consistent-hash", "durable": true,
			"arguments": map[string]any{"hash-header": "customer"}}},
		"bindings": []any{
			map[string]any{"source": "orders", "vhost": "/", "destination": "a", "destination_type": "queue", "routing_key": "1"},
			map[string]any{"source": "orders", "vhost": "/", "destination": "b", "destination_type": "queue", "routing_key": "2"},
		},
	}
	var res ImportResult
	if err := json.Unmarshal(c.must(http.StatusOK, "POST", "/api/definitions", defs), &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Warnings) != 0 {
		t.Errorf("warnings %v", res.Warnings)
	}
	var x map[string]any
	c.getJSON("/api/exchanges/%2F/orders", &x)
	if x["type"] != "x-consistent-hash" || x["arguments"].(map[string]any)["hash-header"] != "customer" {
		t.Fatalf("imported %v", x)
	}
	for i := 0; i < 20; i++ {
		if !routedTo(c, "orders", "k", map[string]any{"headers": map[string]any{"customer": fmt.Sprint(i)}}) {
			t.Fatalf("customer %d not routed", i)
		}
	}
	var qa, qb map[string]any
	c.getJSON("/api/queues/%2F/a", &qa)
	c.getJSON("/api/queues/%2F/b", &qb)
	if qa["messages"].(float64)+qb["messages"].(float64) != 20 {
		t.Fatalf("queues a %v and b %v after 20 messages", qa["messages"], qb["messages"])
	}
	defs["bindings"] = []any{map[string]any{"source": "orders", "vhost": "/", "destination": "a", "destination_type": "queue", "routing_key": "x"}}
	code, out, _ := c.do("POST", "/api/definitions", defs)
	if code != http.StatusBadRequest || !strings.Contains(string(out), "The binding key must be an integer") {
		t.Fatalf("import of a binding with weight x: %d %s", code, out)
	}
}
