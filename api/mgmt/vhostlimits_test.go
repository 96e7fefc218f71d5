package mgmt

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/clustertest"
)

// TestManagementVhostLimits: a limit is set by PUT {"value": n} and
// cleared by DELETE, one at a time; GET lists them in RabbitMQ's shape;
// max-queues refuses the queue past it; bad names and bodies are refused
// with a 400, writes by a non-administrator with a 401; the definitions
// carry the limits as RabbitMQ's vhost-limits parameter, and an import
// sets them.
func TestManagementVhostLimits(t *testing.T) {
	g := oneNodeManagement(t)
	waitForDefaults(t, g)

	g.must(http.StatusNoContent, "PUT", "/api/vhost-limits/%2F/max-queues", map[string]any{"value": 1})
	g.must(http.StatusNoContent, "PUT", "/api/vhost-limits/%2F/max-connections", map[string]any{"value": 256})
	for _, path := range []string{"/api/vhost-limits", "/api/vhost-limits/%2F"} {
		if body := strings.TrimSpace(string(g.must(http.StatusOK, "GET", path, nil))); body != `[{"value":{"max-connections":256,"max-queues":1},"vhost":"/"}]` {
			t.Fatalf("GET %s: %s", path, body)
		}
	}

	g.must(http.StatusCreated, "PUT", "/api/queues/%2F/q1", nil)
	code, body, _ := g.do("PUT", "/api/queues/%2F/q2", nil)
	if code == http.StatusCreated || !strings.Contains(string(body), "cannot declare queue 'q2': queue limit in vhost '/' (1) is reached") {
		t.Fatalf("queue past max-queues: %d %s", code, body)
	}

	// The definitions carry the limits as RabbitMQ exports them.
	var defs struct {
		Parameters []map[string]any `json:"parameters"`
	}
	g.getJSON("/api/definitions", &defs)
	if len(defs.Parameters) != 1 || defs.Parameters[0]["component"] != "vhost-limits" || defs.Parameters[0]["name"] != "limits" ||
		defs.Parameters[0]["vhost"] != "/" || defs.Parameters[0]["value"].(map[string]any)["max-queues"] != float64(1) {
		t.Fatalf("definitions parameters %v", defs.Parameters)
	}

	g.must(http.StatusNoContent, "DELETE", "/api/vhost-limits/%2F/max-queues", nil)
	g.must(http.StatusCreated, "PUT", "/api/queues/%2F/q2", nil)
	if body := strings.TrimSpace(string(g.must(http.StatusOK, "GET", "/api/vhost-limits/%2F", nil))); body != `[{"value":{"max-connections":256},"vhost":"/"}]` {
		t.Fatalf("after DELETE: %s", body)
	}

	for _, r := range []struct {
		path   string
		body   any
		reason string
	}{
		{"/api/vhost-limits/%2F/max-channels", map[string]any{"value": 1}, "Validation failed\n\nUnrecognised terms"},
		{"/api/vhost-limits/%2F/max-queues", map[string]any{"max": 1}, "Validation failed\n\nvalue is missing"},
		{"/api/vhost-limits/%2F/max-queues", map[string]any{"value": "many"}, "value must be an integer"},
	} {
		code, body, _ := g.do("PUT", r.path, r.body)
		var e map[string]string
		_ = json.Unmarshal(body, &e)
		if code != http.StatusBadRequest || !strings.HasPrefix(e["reason"], r.reason) {
			t.Fatalf("PUT %s %v: %d %s", r.path, r.body, code, body)
		}
	}
	g.must(http.StatusNotFound, "PUT", "/api/vhost-limits/nosuch/max-queues", map[string]any{"value": 1})

	g.must(http.StatusCreated, "PUT", "/api/users/mon", map[string]any{"password": "pw-mon", "tags": "monitoring"})
	mon := mgmtClient{t: t, base: g.base, user: "mon", pass: "pw-mon"}
	mon.must(http.StatusOK, "GET", "/api/vhost-limits", nil)
	mon.must(http.StatusUnauthorized, "PUT", "/api/vhost-limits/%2F/max-queues", map[string]any{"value": 1})
	mon.must(http.StatusUnauthorized, "DELETE", "/api/vhost-limits/%2F/max-connections", nil)

	// An import replaces a vhost's limits with the parameter's.
	g.must(http.StatusOK, "POST", "/api/definitions", map[string]any{"parameters": []any{
		map[string]any{"vhost": "/", "component": "vhost-limits", "name": "limits", "value": map[string]any{"max-queues": 5, "max-channels": 3}}}})
	if body := strings.TrimSpace(string(g.must(http.StatusOK, "GET", "/api/vhost-limits/%2F", nil))); body != `[{"value":{"max-queues":5},"vhost":"/"}]` {
		t.Fatalf("after import: %s", body)
	}
}

// waitForDefaults waits until the leader's defaults (guest) are applied.
func waitForDefaults(t *testing.T, g mgmtClient) {
	t.Helper()
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		if code, _, _ := g.do("GET", "/api/whoami", nil); code != http.StatusOK {
			return fmt.Errorf("whoami %d", code)
		}
		return nil
	})
}

// While a server of the cluster runs a release before vhost limits
// (protocol 11), setting one is refused with a reason that says so, and
// nothing is set.
func TestManagementVhostLimitsWaitForEveryServer(t *testing.T) {
	c := clustertest.New(t, 2, clustertest.WithConfig(func(i int, cfg *cluster.Config) {
		if i == 1 {
			cfg.Protocol = 11
		}
	}))
	n := c.WaitForLeader(clustertest.Timeout)
	g := mgmtClient{t: t, base: serveManagement(t, n), user: "guest", pass: "guest"}
	waitForDefaults(t, g)
	code, body, _ := g.do("PUT", "/api/vhost-limits/%2F/max-queues", map[string]any{"value": 1})
	if code < 400 || !strings.Contains(string(body), "needs protocol version 12") {
		t.Fatalf("PUT with a server at protocol 11: %d %s", code, body)
	}
	if body := strings.TrimSpace(string(g.must(http.StatusOK, "GET", "/api/vhost-limits", nil))); body != "[]" {
		t.Fatalf("limits after the refusal: %s", body)
	}
}
