package mgmt

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
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
	g := serveOps(t, admin)
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
	gb, gg := serveNode(t, bad), serveNode(t, good)
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

// serveNode is the management API of a node of an in-process cluster.
func serveNode(t *testing.T, nd *clustertest.Node) mgmtClient {
	t.Helper()
	return serveOps(t, ops.New(ops.Deps{Node: ops.FromCluster(nd.Node())}))
}

// serveOps is the management API over admin, closed at the test's end.
func serveOps(t *testing.T, admin *ops.Service) mgmtClient {
	t.Helper()
	t.Cleanup(func() { _ = admin.Close() })
	return serveGuest(t, New(Options{Ops: admin}))
}

// serveGuest serves h and is its client as guest, once it answers.
func serveGuest(t *testing.T, h http.Handler) mgmtClient {
	t.Helper()
	srv := httptest.NewServer(h)
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

// TestManagement_QueueGroupAndLeaders: a queue shows its Raft group's
// leader, voters and online voters; RabbitMQ 4.1's
// quorum-queues-without-elected-leaders check passes while the group has
// a leader and, once the other two nodes are killed, fails on the last
// one with the queue, which is then no longer online on them.
func TestManagement_QueueGroupAndLeaders(t *testing.T) {
	c := clustertest.New(t, 3)
	leader := c.WaitForLeader(clustertest.Timeout)
	last := c.Nodes[0]
	if last.Node() == leader {
		last = c.Nodes[1]
	}
	g := serveNode(t, last)
	g.must(http.StatusCreated, "PUT", "/api/queues/%2F/orders", map[string]any{"durable": true})
	ids := []string{c.Nodes[0].ID, c.Nodes[1].ID, c.Nodes[2].ID}
	slices.Sort(ids)
	checks := []string{"all-vhosts", "vhost/%2F", "all-vhosts/pattern/^ord", "vhost/%2F/pattern/ord.*"}
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		var q map[string]any
		g.getJSON("/api/queues/%2F/orders", &q)
		if q["leader"] != leader.NodeID() || q["node"] != leader.NodeID() || q["raft_group"] != "metadata" ||
			fmt.Sprint(q["members"]) != fmt.Sprint(ids) || fmt.Sprint(q["online"]) != fmt.Sprint(ids) {
			return fmt.Errorf("queue %v", q)
		}
		return nil
	})
	for _, check := range checks {
		if body := g.must(http.StatusOK, "GET", "/api/health/checks/quorum-queues-without-elected-leaders/"+check, nil); strings.TrimSpace(string(body)) != `{"status":"ok"}` {
			t.Fatalf("%s: %s", check, body)
		}
	}
	// A pattern no queue matches passes whatever the groups.
	g.must(http.StatusOK, "GET", "/api/health/checks/quorum-queues-without-elected-leaders/all-vhosts/pattern/^nosuch$", nil)

	for i, nd := range c.Nodes {
		if nd != last {
			c.Kill(i)
		}
	}
	want := `{"queues":[{"name":"orders","readable_name":"queue 'orders' in vhost '/'","type":"rabbit_quorum_queue","virtual_host":"/"}],` +
		`"reason":"Detected quorum queues without an elected leader","status":"failed"}`
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		code, body, _ := g.do("GET", "/api/health/checks/quorum-queues-without-elected-leaders/all-vhosts", nil)
		if code != http.StatusServiceUnavailable || strings.TrimSpace(string(body)) != want {
			return fmt.Errorf("%d %s", code, body)
		}
		return nil
	})
	for _, check := range checks[1:] {
		g.must(http.StatusServiceUnavailable, "GET", "/api/health/checks/quorum-queues-without-elected-leaders/"+check, nil)
	}
	g.must(http.StatusOK, "GET", "/api/health/checks/quorum-queues-without-elected-leaders/all-vhosts/pattern/^nosuch$", nil)
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		var q map[string]any
		g.getJSON("/api/queues/%2F/orders", &q)
		if q["leader"] != "" || fmt.Sprint(q["members"]) != fmt.Sprint(ids) || fmt.Sprint(q["online"]) != fmt.Sprint([]string{last.ID}) {
			return fmt.Errorf("queue %v", q)
		}
		return nil
	})
}
