package mgmt

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/raftmq/raftmq/api/ops"
	"github.com/raftmq/raftmq/api/ops/opstest"
	"github.com/raftmq/raftmq/cluster/clustertest"
)

// TestManagement_Alarms: the alarm health checks fail with RabbitMQ's
// answer while the node has an alarm, and /api/nodes shows it with the
// free disk space and its limit; all clear when the alarm clears.
func TestManagement_Alarms(t *testing.T) {
	c := clustertest.New(t, 1)
	n := c.WaitForLeader(clustertest.Timeout)
	box := &opstest.ResourceBox{R: ops.Resources{DiskFree: 5 << 30, DiskFreeLimit: 1 << 30}}
	admin := ops.New(ops.Deps{Node: ops.FromCluster(n), Resources: box.Get})
	t.Cleanup(func() { _ = admin.Close() })
	srv := httptest.NewServer(New(Options{Ops: admin}))
	t.Cleanup(srv.Close)
	g := mgmtClient{t: t, base: srv.URL, user: "guest", pass: "guest"}
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		if code, _, _ := g.do("GET", "/api/whoami", nil); code != http.StatusOK {
			return fmt.Errorf("whoami %d", code)
		}
		return nil
	})
	nodeFields := func() map[string]any {
		var nodes []map[string]any
		g.getJSON("/api/nodes", &nodes)
		if len(nodes) != 1 {
			t.Fatalf("nodes %v", nodes)
		}
		return nodes[0]
	}
	for _, check := range []string{"alarms", "local-alarms"} {
		if body := g.must(http.StatusOK, "GET", "/api/health/checks/"+check, nil); !strings.Contains(string(body), `"ok"`) {
			t.Fatalf("%s: %s", check, body)
		}
	}
	if nf := nodeFields(); nf["disk_free_alarm"] != false || nf["mem_alarm"] != false || nf["disk_free"] != float64(5<<30) || nf["disk_free_limit"] != float64(1<<30) {
		t.Fatalf("node %v", nf)
	}

	box.Set(ops.Resources{DiskAlarm: true, MemAlarm: true, DiskFree: 1 << 20, DiskFreeLimit: 1 << 30})
	for check, where := range map[string]string{"alarms": "in the cluster", "local-alarms": "on the node"} {
		body := g.must(http.StatusServiceUnavailable, "GET", "/api/health/checks/"+check, nil)
		var got struct {
			Status, Reason string
			Alarms         []map[string]string
		}
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatal(err)
		}
		id := n.NodeID()
		if got.Status != "failed" || got.Reason != "There are alarms in effect "+where || len(got.Alarms) != 2 ||
			got.Alarms[0]["node"] != id || got.Alarms[0]["resource"] != "disk space" || got.Alarms[1]["resource"] != "memory" {
			t.Fatalf("%s: %s", check, body)
		}
	}
	if nf := nodeFields(); nf["disk_free_alarm"] != true || nf["mem_alarm"] != true || nf["disk_free"] != float64(1<<20) {
		t.Fatalf("node with alarms %v", nf)
	}
	box.Set(ops.Resources{DiskFree: 2 << 30, DiskFreeLimit: 1 << 30})
	g.must(http.StatusOK, "GET", "/api/health/checks/alarms", nil)
}
