package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/proto"
)

// resourceBox is a node's resources a test changes.
type resourceBox struct {
	mu sync.Mutex
	r  Resources
}

func (b *resourceBox) get() Resources { b.mu.Lock(); defer b.mu.Unlock(); return b.r }
func (b *resourceBox) set(r Resources) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.r = r
}

// TestManagement_Alarms: the alarm health checks fail with RabbitMQ's
// answer while the node has an alarm, and /api/nodes shows it with the
// free disk space and its limit; all clear when the alarm clears.
func TestManagement_Alarms(t *testing.T) {
	c := clustertest.New(t, 1)
	n := c.WaitForLeader(clustertest.Timeout)
	box := &resourceBox{r: Resources{DiskFree: 5 << 30, DiskFreeLimit: 1 << 30}}
	admin := NewAdminServer(Deps{Node: FromCluster(n), Resources: box.get})
	t.Cleanup(func() { _ = admin.Close() })
	srv := httptest.NewServer(NewManagement(ManagementOptions{Admin: admin}))
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

	box.set(Resources{DiskAlarm: true, MemAlarm: true, DiskFree: 1 << 20, DiskFreeLimit: 1 << 30})
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
	box.set(Resources{DiskFree: 2 << 30, DiskFreeLimit: 1 << 30})
	g.must(http.StatusOK, "GET", "/api/health/checks/alarms", nil)
}

// TestAdmin_ClusterStatusCarriesAlarms: each node reports its own alarms
// and disk space in ClusterStatus, which the management API asks every
// member for.
func TestAdmin_ClusterStatusCarriesAlarms(t *testing.T) {
	box := &resourceBox{r: Resources{DiskAlarm: true, DiskFree: 10, DiskFreeLimit: 100}}
	node := newFakeNode("n1")
	admin := NewAdminServer(Deps{Node: node, Resources: box.get})
	t.Cleanup(func() { _ = admin.Close() })
	r, err := admin.ClusterStatus(ctxT(t), &proto.ClusterStatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(r.GetAlarms(), ",") != "disk" || r.GetDiskFree() != 10 || r.GetDiskFreeLimit() != 100 {
		t.Fatalf("status %v", r)
	}
}

// TestRabbitMetrics_NodeCountersAndDisk: every node, leader or not,
// reports its own connections and channels opened and closed, confirms,
// free disk space, its limit and the alarms, under RabbitMQ's names.
func TestRabbitMetrics_NodeCountersAndDisk(t *testing.T) {
	n := newFakeNode("n2")
	n.leaderID = "n1"
	box := &resourceBox{r: Resources{DiskAlarm: true, DiskFree: 1 << 20, DiskFreeLimit: 1 << 30}}
	m := NewMetrics(MetricsOptions{Node: n, Resources: box.get,
		Counters: func() NodeCounters {
			return NodeCounters{ConnectionsOpened: 5, ConnectionsClosed: 3, ChannelsOpened: 9, ChannelsClosed: 4, Confirmed: 42,
				Returned: 6, Dropped: 7, GetEmpty: 8, QueuesDeclared: 11}
		}})
	got, types := scrapeTyped(t, NewHTTPHandler(HTTPDeps{Node: n, Metrics: m}), "/metrics")
	wantSample(t, got, "rabbitmq_connections_opened_total", 5)
	wantSample(t, got, "rabbitmq_connections_closed_total", 3)
	wantSample(t, got, "rabbitmq_channels_opened_total", 9)
	wantSample(t, got, "rabbitmq_channels_closed_total", 4)
	wantSample(t, got, `rabbitmq_global_messages_confirmed_total{protocol="amqp091"}`, 42)
	wantSample(t, got, "rabbitmq_channel_messages_confirmed_total", 42)
	wantSample(t, got, "rabbitmq_channel_messages_unroutable_returned_total", 6)
	wantSample(t, got, "rabbitmq_channel_messages_unroutable_dropped_total", 7)
	wantSample(t, got, "rabbitmq_channel_get_empty_total", 8)
	wantSample(t, got, "rabbitmq_queues_declared_total", 11)
	wantSample(t, got, "rabbitmq_disk_space_available_bytes", 1<<20)
	wantSample(t, got, "rabbitmq_disk_space_available_limit_bytes", 1<<30)
	wantSample(t, got, "rabbitmq_alarms_free_disk_space_watermark", 1)
	wantSample(t, got, "rabbitmq_alarms_memory_used_watermark", 0)
	for name, typ := range map[string]string{"rabbitmq_connections_opened_total": "counter", "rabbitmq_global_messages_confirmed_total": "counter",
		"rabbitmq_disk_space_available_bytes": "gauge", "rabbitmq_alarms_free_disk_space_watermark": "untyped"} {
		if types[name] != typ {
			t.Errorf("%s is %q, want %s", name, types[name], typ)
		}
	}
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
		admin := NewAdminServer(Deps{Node: FromCluster(nd.Node())})
		t.Cleanup(func() { _ = admin.Close() })
		srv := httptest.NewServer(NewManagement(ManagementOptions{Admin: admin}))
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
