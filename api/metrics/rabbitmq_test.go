package metrics

import (
	"bufio"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/procfs"

	"github.com/raftmq/raftmq/api/ops"
	"github.com/raftmq/raftmq/api/ops/opstest"
	"github.com/raftmq/raftmq/internal/procstat"
	"github.com/raftmq/raftmq/proto"
)

// scrapeTyped fetches path and returns each sample by its series text and
// each family's type.
func scrapeTyped(t *testing.T, h http.Handler, path string) (map[string]float64, map[string]string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("%s: %d %s", path, rec.Code, rec.Body)
	}
	samples, types := map[string]float64{}, map[string]string{}
	sc := bufio.NewScanner(rec.Body)
	for sc.Scan() {
		line := sc.Text()
		if f := strings.Fields(line); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			types[f[2]] = f[3]
			continue
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("bad sample %q", line)
		}
		samples[line[:i]] = v
	}
	return samples, types
}

func rabbitNode(id, leader string, box *statsBox) (*opstest.Node, http.Handler) {
	n := opstest.NewNode(id)
	n.LeaderID = leader
	n.Raft = ops.RaftStats{State: "Follower", Term: 4, CommitIndex: 30, AppliedIndex: 29, LastLogIndex: 31}
	n.State.QueueList = []*proto.QueueInfo{
		{Vhost: "/", Name: "orders", Ready: 5, Unacked: 2, ReadyBytes: 50, Consumers: 1},
		{Vhost: "v2", Name: "audit", Ready: 1},
	}
	conns := &opstest.Conns{Open: []*proto.ConnectionInfo{{Id: "c1", Channels: 2}, {Id: "c2", Channels: 1}}}
	m := New(Options{Node: n, Conns: conns, Stats: box.get, ClusterName: "prod"})
	return n, NewHandler(HandlerOptions{Node: n, Metrics: m})
}

func TestRabbitMetrics_LeaderReportsRabbitMQNames(t *testing.T) {
	box := &statsBox{s: ops.StateStats{Published: 10, Routed: 12, Delivered: 7, Acked: 6, Ready: 6, Unacked: 2, ReadyBytes: 60, Queues: 2, Consumers: 1,
		Deaths: [4][2]uint64{{3, 4}, {0, 5}, {1, 0}, {0, 2}}}}
	_, h := rabbitNode("n1", "n1", box)
	got, types := scrapeTyped(t, h, "/metrics")

	wantSample(t, got, `rabbitmq_identity_info{rabbitmq_cluster="prod",rabbitmq_cluster_permanent_id="rabbitmq-cluster-id-prod",rabbitmq_node="n1"}`, 1)
	found := false
	for k, v := range got {
		if strings.HasPrefix(k, "rabbitmq_build_info{") && strings.Contains(k, `rabbitmq_version="3.10.8"`) && strings.Contains(k, `product_name="raftmq"`) && v == 1 {
			found = true
		}
	}
	if !found {
		t.Fatal("rabbitmq_build_info missing")
	}
	wantSample(t, got, "rabbitmq_connections", 2)
	wantSample(t, got, "rabbitmq_channels", 3)
	wantSample(t, got, "rabbitmq_queues", 2)
	wantSample(t, got, "rabbitmq_consumers", 1)
	wantSample(t, got, "rabbitmq_queue_messages_ready", 6)
	wantSample(t, got, "rabbitmq_queue_messages_unacked", 2)
	wantSample(t, got, "rabbitmq_queue_messages", 8)
	wantSample(t, got, "rabbitmq_queue_messages_ready_bytes", 60)
	wantSample(t, got, "rabbitmq_channel_messages_published_total", 10)
	wantSample(t, got, "rabbitmq_queue_messages_published_total", 12)
	wantSample(t, got, "rabbitmq_channel_messages_delivered_ack_total", 7)
	// RabbitMQ-Overview's outgoing rate adds these to delivered_ack_total.
	for _, name := range []string{"rabbitmq_channel_messages_delivered_total", "rabbitmq_channel_messages_redelivered_total",
		"rabbitmq_channel_get_total", "rabbitmq_channel_get_ack_total"} {
		wantSample(t, got, name, 0)
	}
	wantSample(t, got, `rabbitmq_global_messages_received_total{protocol="amqp091"}`, 10)
	wantSample(t, got, `rabbitmq_global_messages_routed_total{protocol="amqp091"}`, 12)
	wantSample(t, got, `rabbitmq_global_messages_delivered_total{protocol="amqp091"}`, 7)
	wantSample(t, got, `rabbitmq_global_messages_acknowledged_total{protocol="amqp091"}`, 6)
	wantSample(t, got, `rabbitmq_global_messages_dead_lettered_expired_total{dead_letter_strategy="disabled",queue_type="rabbit_quorum_queue"}`, 3)
	wantSample(t, got, `rabbitmq_global_messages_dead_lettered_expired_total{dead_letter_strategy="at_most_once",queue_type="rabbit_quorum_queue"}`, 4)
	wantSample(t, got, `rabbitmq_global_messages_dead_lettered_maxlen_total{dead_letter_strategy="at_most_once",queue_type="rabbit_quorum_queue"}`, 5)
	wantSample(t, got, `rabbitmq_global_messages_dead_lettered_rejected_total{dead_letter_strategy="disabled",queue_type="rabbit_quorum_queue"}`, 1)
	wantSample(t, got, `rabbitmq_global_messages_dead_lettered_delivery_limit_total{dead_letter_strategy="at_most_once",queue_type="rabbit_quorum_queue"}`, 2)
	wantSample(t, got, "rabbitmq_raft_term_total", 4)
	wantSample(t, got, "rabbitmq_raft_log_commit_index", 30)
	wantSample(t, got, "rabbitmq_raft_log_last_applied_index", 29)
	wantSample(t, got, "rabbitmq_raft_log_last_written_index", 31)
	// raftmq's own names stay.
	wantSample(t, got, "raftmq_messages_published_total", 10)

	for name, typ := range map[string]string{
		"rabbitmq_identity_info": "untyped", "rabbitmq_build_info": "untyped",
		"rabbitmq_queue_messages_ready": "gauge", "rabbitmq_connections": "gauge",
		"rabbitmq_global_messages_received_total": "counter", "rabbitmq_raft_term_total": "counter",
		"rabbitmq_raft_log_commit_index": "gauge",
	} {
		if types[name] != typ {
			t.Errorf("%s is %q, want %q", name, types[name], typ)
		}
	}
	// /metrics sums queues: no per-queue labels there.
	for k := range got {
		if strings.HasPrefix(k, "rabbitmq_queue_") && strings.Contains(k, "queue=") {
			t.Fatalf("per-queue series %s on /metrics", k)
		}
	}

	// Values move with the state after publishing.
	box.mu.Lock()
	box.s.Published, box.s.Routed, box.s.Ready = 11, 13, 7
	box.mu.Unlock()
	got, _ = scrapeTyped(t, h, "/metrics")
	wantSample(t, got, `rabbitmq_global_messages_received_total{protocol="amqp091"}`, 11)
	wantSample(t, got, `rabbitmq_global_messages_routed_total{protocol="amqp091"}`, 13)
	wantSample(t, got, "rabbitmq_queue_messages_ready", 7)
}

func TestRabbitMetrics_PerObject(t *testing.T) {
	box := &statsBox{s: ops.StateStats{Ready: 6, Unacked: 2, Queues: 2}}
	_, h := rabbitNode("n1", "n1", box)
	got, types := scrapeTyped(t, h, "/metrics/per-object")
	wantSample(t, got, `rabbitmq_queue_messages_ready{queue="orders",vhost="/"}`, 5)
	wantSample(t, got, `rabbitmq_queue_messages_unacked{queue="orders",vhost="/"}`, 2)
	wantSample(t, got, `rabbitmq_queue_messages{queue="orders",vhost="/"}`, 7)
	wantSample(t, got, `rabbitmq_queue_consumers{queue="orders",vhost="/"}`, 1)
	wantSample(t, got, `rabbitmq_queue_messages_ready{queue="audit",vhost="v2"}`, 1)
	if _, ok := got["rabbitmq_queue_messages_ready"]; ok {
		t.Fatal("per-object serves the unlabelled total too")
	}
	if types["rabbitmq_queue_messages_ready"] != "gauge" {
		t.Fatalf("type %q", types["rabbitmq_queue_messages_ready"])
	}
	wantSample(t, got, `rabbitmq_identity_info{rabbitmq_cluster="prod",rabbitmq_cluster_permanent_id="rabbitmq-cluster-id-prod",rabbitmq_node="n1"}`, 1)
	wantSample(t, got, "rabbitmq_connections", 2)
}

// A follower reports only what is its own, so sum() over the cluster counts
// the replicated state once.
func TestRabbitMetrics_FollowerOmitsClusterState(t *testing.T) {
	box := &statsBox{s: ops.StateStats{Published: 10, Ready: 6, Queues: 2, Consumers: 1}}
	n, h := rabbitNode("n2", "n1", box)
	for _, path := range []string{"/metrics", "/metrics/per-object"} {
		got, _ := scrapeTyped(t, h, path)
		for k := range got {
			for _, p := range []string{"rabbitmq_queue", "rabbitmq_global_", "rabbitmq_consumers", "rabbitmq_channel_"} {
				if strings.HasPrefix(k, p) {
					t.Fatalf("follower %s serves %s", path, k)
				}
			}
		}
		wantSample(t, got, `rabbitmq_identity_info{rabbitmq_cluster="prod",rabbitmq_cluster_permanent_id="rabbitmq-cluster-id-prod",rabbitmq_node="n2"}`, 1)
		wantSample(t, got, "rabbitmq_connections", 2)
		wantSample(t, got, "rabbitmq_channels", 3)
		wantSample(t, got, "rabbitmq_raft_log_commit_index", 30)
	}
	// Once it leads, it reports them.
	n.SetLeader("n2")
	got, _ := scrapeTyped(t, h, "/metrics")
	wantSample(t, got, "rabbitmq_queue_messages_ready", 6)
	wantSample(t, got, "rabbitmq_queues", 2)
}

// The memory series are the process's resident memory and the alarm's
// limit, on every node. The resident memory is the process's (within 25%
// of /proc's VmRSS read just after, as it moves between the readings),
// not the Go heap, a fraction of it.
func TestRabbitMetrics_MemoryAndFDs(t *testing.T) {
	n := opstest.NewNode("n2")
	n.LeaderID = "n1"
	m := New(Options{Node: n, MemoryLimit: 1000})
	got, types := scrapeTyped(t, NewHandler(HandlerOptions{Node: n, Metrics: m}), "/metrics")
	wantSample(t, got, "rabbitmq_resident_memory_limit_bytes", 1000)
	if st, err := procfs.NewDefaultFS(); err == nil {
		p, err := st.Self()
		if err != nil {
			t.Fatal(err)
		}
		status, err := p.NewStatus()
		if err != nil {
			t.Fatal(err)
		}
		rss := float64(status.VmRSS)
		if v := got["rabbitmq_process_resident_memory_bytes"]; v < rss*3/4 || v > rss*5/4 {
			t.Fatalf("rabbitmq_process_resident_memory_bytes %v, VmRSS %v", v, rss)
		}
	}
	if types["rabbitmq_resident_memory_limit_bytes"] != "gauge" {
		t.Fatalf("type %q", types["rabbitmq_resident_memory_limit_bytes"])
	}
	if _, _, ok := procstat.FileDescriptors(); ok {
		if got["rabbitmq_process_open_fds"] < 1 || got["rabbitmq_process_max_fds"] < got["rabbitmq_process_open_fds"] {
			t.Fatalf("fds %v of %v", got["rabbitmq_process_open_fds"], got["rabbitmq_process_max_fds"])
		}
	}

	got, _ = scrapeTyped(t, NewHandler(HandlerOptions{Node: n}), "/metrics")
	if _, ok := got["rabbitmq_resident_memory_limit_bytes"]; ok {
		t.Fatal("a memory limit without the option")
	}
}

// overviewNames are the metric names the panel expressions of Grafana's
// "RabbitMQ-Overview" dashboard (rabbitmq-server's
// deps/rabbitmq_prometheus/docker/grafana/dashboards) use, written out by
// hand. Each expression joins its series to rabbitmq_identity_info on
// instance, taking rabbitmq_cluster and rabbitmq_node from it. Not served,
// so their panels stay empty: rabbitmq_channel_messages_unconfirmed (no
// node keeps a count of its unconfirmed publishes),
// rabbitmq_queues_created_total and rabbitmq_queues_deleted_total (the
// log does not tell a declare that created from one that found, and
// queues are deleted by the state machine too: auto-delete, exclusive
// owners, expiry), rabbitmq_process_{max,open}_tcp_sockets (the Erlang
// VM's socket limit, which a Go process does not have).
var overviewNames = []string{
	"rabbitmq_identity_info",
	"rabbitmq_build_info",
	"rabbitmq_queue_messages_ready",
	"rabbitmq_queue_messages_unacked",
	"rabbitmq_queues",
	"rabbitmq_connections",
	"rabbitmq_channels",
	"rabbitmq_channel_consumers",
	"rabbitmq_channel_messages_published_total",
	"rabbitmq_channel_messages_confirmed_total",
	"rabbitmq_queue_messages_published_total",
	"rabbitmq_channel_messages_unroutable_dropped_total",
	"rabbitmq_channel_messages_unroutable_returned_total",
	"rabbitmq_channel_messages_delivered_total",
	"rabbitmq_channel_messages_delivered_ack_total",
	"rabbitmq_channel_messages_redelivered_total",
	"rabbitmq_channel_messages_acked_total",
	"rabbitmq_channel_get_total",
	"rabbitmq_channel_get_ack_total",
	"rabbitmq_channel_get_empty_total",
	"rabbitmq_queues_declared_total",
	"rabbitmq_channels_opened_total",
	"rabbitmq_channels_closed_total",
	"rabbitmq_connections_opened_total",
	"rabbitmq_connections_closed_total",
	"rabbitmq_resident_memory_limit_bytes",
	"rabbitmq_process_resident_memory_bytes",
	"rabbitmq_disk_space_available_bytes",
	"rabbitmq_process_max_fds",
	"rabbitmq_process_open_fds",
}

// TestRabbitMetrics_OverviewDashboardNames: a leader configured as
// cmd/raftmq configures it serves every name RabbitMQ-Overview reads, and
// rabbitmq_identity_info carries the two labels its joins take.
func TestRabbitMetrics_OverviewDashboardNames(t *testing.T) {
	if _, _, ok := procstat.FileDescriptors(); !ok {
		t.Skip("no /proc: rabbitmq_process_{open,max}_fds are not served here")
	}
	n := opstest.NewNode("n1")
	n.LeaderID = "n1"
	// /metrics/per-object has queue series only for queues that exist.
	n.State.QueueList = []*proto.QueueInfo{{Vhost: "/", Name: "orders", Ready: 1}}
	box := &statsBox{s: ops.StateStats{Published: 3, Ready: 1, Queues: 1}}
	m := New(Options{Node: n, Conns: &opstest.Conns{}, Stats: box.get, ClusterName: "prod",
		MemoryLimit: 2,
		Counters:    func() ops.NodeCounters { return ops.NodeCounters{} },
		Resources:   (&opstest.ResourceBox{R: ops.Resources{DiskFree: 1}}).Get})
	h := NewHandler(HandlerOptions{Node: n, Metrics: m})
	for _, path := range []string{"/metrics", "/metrics/per-object"} {
		got, _ := scrapeTyped(t, h, path)
		names := map[string]bool{}
		for k := range got {
			name, labels, _ := strings.Cut(k, "{")
			names[name] = true
			if name == "rabbitmq_identity_info" && (!strings.Contains(labels, `rabbitmq_cluster="prod"`) || !strings.Contains(labels, `rabbitmq_node="n1"`)) {
				t.Errorf("%s: identity without the join's labels: %s", path, k)
			}
		}
		for _, name := range overviewNames {
			if !names[name] {
				t.Errorf("%s: %s missing", path, name)
			}
		}
	}
}

// TestRabbitMetrics_NodeCountersAndDisk: every node, leader or not,
// reports its own connections and channels opened and closed, confirms,
// free disk space, its limit and the alarms, under RabbitMQ's names.
func TestRabbitMetrics_NodeCountersAndDisk(t *testing.T) {
	n := opstest.NewNode("n2")
	n.LeaderID = "n1"
	box := &opstest.ResourceBox{R: ops.Resources{DiskAlarm: true, DiskFree: 1 << 20, DiskFreeLimit: 1 << 30}}
	m := New(Options{Node: n, Resources: box.Get,
		Counters: func() ops.NodeCounters {
			return ops.NodeCounters{ConnectionsOpened: 5, ConnectionsClosed: 3, ChannelsOpened: 9, ChannelsClosed: 4, Confirmed: 42,
				Returned: 6, Dropped: 7, GetEmpty: 8, QueuesDeclared: 11}
		}})
	got, types := scrapeTyped(t, NewHandler(HandlerOptions{Node: n, Metrics: m}), "/metrics")
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
