package mgmt

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/raftmq/raftmq/cluster/clustertest"
)

// TestManagementParametersAndLimits: runtime and global parameters, vhost
// limits (none set) and topic permissions read in RabbitMQ's shapes, and a write of
// what raftmq does not keep is refused with a 400 that says so, never
// taken and dropped.
func TestManagementParametersAndLimits(t *testing.T) {
	c := clustertest.New(t, 1)
	n := c.WaitForLeader(clustertest.Timeout)
	g := mgmtClient{t: t, base: serveManagement(t, n), user: "guest", pass: "guest"}
	waitForDefaults(t, g)
	for _, path := range []string{"/api/parameters", "/api/parameters/federation-upstream", "/api/parameters/federation-upstream/%2F",
		"/api/vhost-limits", "/api/vhost-limits/%2F", "/api/topic-permissions", "/api/users/guest/topic-permissions",
		"/api/vhosts/%2F/topic-permissions"} {
		if body := string(g.must(http.StatusOK, "GET", path, nil)); strings.TrimSpace(body) != "[]" {
			t.Fatalf("GET %s: %s", path, body)
		}
	}
	for _, path := range []string{"/api/parameters/federation-upstream/%2F/x", "/api/parameters/shovel/nosuch",
		"/api/topic-permissions/%2F/guest", "/api/vhost-limits/nosuch", "/api/global-parameters/nosuch"} {
		g.must(http.StatusNotFound, "GET", path, nil)
	}
	var globals []map[string]any
	g.getJSON("/api/global-parameters", &globals)
	if len(globals) != 2 || globals[1]["name"] != "internal_cluster_id" || globals[1]["value"] != "rabbitmq-cluster-id-raftmq" {
		t.Fatalf("global parameters %v", globals)
	}
	var one map[string]any
	g.getJSON("/api/global-parameters/cluster_name", &one)
	if one["value"] != "raftmq" {
		t.Fatalf("cluster_name %v", one)
	}

	refused := []struct{ method, path, reason string }{
		{"PUT", "/api/parameters/federation-upstream/%2F/up", "Validation failed\n\ncomponent federation-upstream not found\n"},
		{"PUT", "/api/global-parameters/foo", "raftmq does not support global parameters"},
		{"PUT", "/api/global-parameters/cluster_name", "raftmq does not support renaming the cluster"},
		{"DELETE", "/api/global-parameters/internal_cluster_id", "raftmq does not support global parameters"},
		{"PUT", "/api/topic-permissions/%2F/guest", "raftmq does not support topic permissions"},
	}
	for _, r := range refused {
		code, body, _ := g.do(r.method, r.path, map[string]any{"value": 10, "exchange": "amq.topic", "write": ".*", "read": ".*"})
		var e map[string]string
		_ = json.Unmarshal(body, &e)
		if code != http.StatusBadRequest || e["error"] != "bad_request" || !strings.HasPrefix(e["reason"], r.reason) {
			t.Fatalf("%s %s: %d %s", r.method, r.path, code, body)
		}
	}
	// As in RabbitMQ 3.10.8: clearing a vhost limit that is not set is
	// done; topic permissions that are not set, and a parameter that does
	// not exist, are not found.
	g.must(http.StatusNoContent, "DELETE", "/api/vhost-limits/%2F/max-connections", nil)
	g.must(http.StatusNotFound, "DELETE", "/api/topic-permissions/%2F/guest", nil)
	g.must(http.StatusNotFound, "DELETE", "/api/parameters/federation-upstream/%2F/up", nil)
	g.must(http.StatusNotFound, "DELETE", "/api/global-parameters/foo", nil)
	// Still nothing there.
	if body := string(g.must(http.StatusOK, "GET", "/api/topic-permissions", nil)); strings.TrimSpace(body) != "[]" {
		t.Fatalf("topic permissions after the refused write: %s", body)
	}
}
