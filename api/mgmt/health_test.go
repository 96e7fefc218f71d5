package mgmt

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

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

// TestManagement_ClockCheck: a node whose wall clock is an hour ahead of
// the other voters' fails the clock checks and says why; the others pass.
func TestManagement_ClockCheck(t *testing.T) {
	start := time.UnixMilli(1_800_000_000_000)
	c := clustertest.New(t, 3, clustertest.WithFakeClock(start))
	c.WaitForLeader(clustertest.Timeout)
	bad, good := c.Nodes[0], c.Nodes[1]
	bad.Clock.Step(time.Hour)
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		if p := bad.Node().ClockProblem(); !strings.Contains(p, "1h0m0s ahead") {
			return fmt.Errorf("clock problem %q", p)
		}
		return nil
	})
	serve := func(nd *clustertest.Node) mgmtClient {
		admin := ops.New(ops.Deps{Node: ops.FromCluster(nd.Node())})
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
		return g
	}
	gb, gg := serve(bad), serve(good)
	if body := gg.must(http.StatusOK, "GET", "/api/health/checks/local-clock", nil); !strings.Contains(string(body), `"ok"`) {
		t.Fatalf("good node: %s", body)
	}
	for _, check := range []string{"local-clock", "clocks"} {
		body := gb.must(http.StatusServiceUnavailable, "GET", "/api/health/checks/"+check, nil)
		var got struct {
			Status, Reason string
			Clocks         []map[string]string
		}
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatal(err)
		}
		if got.Status != "failed" || !strings.HasPrefix(got.Reason, bad.ID+": wall clock 1h0m0s ahead") ||
			len(got.Clocks) != 1 || got.Clocks[0]["node"] != bad.ID {
			t.Fatalf("%s: %s", check, body)
		}
	}
}
