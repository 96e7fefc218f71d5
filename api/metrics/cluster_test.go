package metrics

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/raftmq/raftmq/api/ops"
	"github.com/raftmq/raftmq/api/ops/opstest"
	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// Readiness and the node's series follow a running single-node cluster.
func TestHandler_SingleNode(t *testing.T) {
	c := clustertest.New(t, 1)
	cn := c.WaitForLeader(clustertest.Timeout)
	node := ops.FromCluster(cn)
	// Readiness follows the node: the leader's defaults get applied.
	h := NewHandler(HandlerOptions{Node: node, Stats: ops.ClusterStats(cn)})
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		if code, body := get(t, h, "/readyz"); code != http.StatusOK {
			return fmt.Errorf("/readyz %d %s", code, body)
		}
		return nil
	})
	got := scrape(t, h)
	wantSample(t, got, `raftmq_raft_state{state="Leader"}`, 1)
	if _, ok := got["raftmq_messages_published_total"]; !ok {
		t.Fatal("no message counters")
	}
	if got["raftmq_raft_applied_index"] < 1 {
		t.Fatalf("applied index %v", got["raftmq_raft_applied_index"])
	}

}

// On a real three-node cluster, RabbitMQ's names follow what is published,
// and only the leader reports the replicated state, so a sum over the nodes
// is the cluster's number.
func TestRabbitMetrics_ThreeNodes(t *testing.T) {
	c := clustertest.New(t, 3)
	leader := c.WaitForLeader(clustertest.Timeout)
	handler := func(cn *cluster.Node) http.Handler {
		return NewHandler(HandlerOptions{Metrics: New(Options{Node: ops.FromCluster(cn), Stats: ops.ClusterStats(cn)}), Node: ops.FromCluster(cn)})
	}
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		ok := false
		leader.View(func(m *fsm.Machine) { ok = m.Initialized() })
		if !ok {
			return fmt.Errorf("defaults not applied")
		}
		return nil
	})
	cmds := []*proto.Command{
		{Cmd: &proto.Command_QueueDeclare{QueueDeclare: &proto.QueueDeclare{Vhost: "/", Name: "orders", Durable: true}}},
	}
	for i := 0; i < 3; i++ {
		cmds = append(cmds, &proto.Command{Cmd: &proto.Command_Publish{Publish: &proto.Publish{
			Vhost: "/", RoutingKey: "orders", Body: []byte("hello"), Properties: &proto.Properties{}}}})
	}
	res, err := leader.SubmitBatch(opstest.Context(t), cmds)
	if err != nil {
		t.Fatal(err)
	}
	c.WaitApplied(res[0].GetIndex())

	sum := map[string]float64{}
	for _, cn := range c.Live() {
		got, _ := scrapeTyped(t, handler(cn), "/metrics")
		per, _ := scrapeTyped(t, handler(cn), "/metrics/per-object")
		wantSample(t, got, `rabbitmq_identity_info{rabbitmq_cluster="raftmq",rabbitmq_cluster_permanent_id="rabbitmq-cluster-id-raftmq",rabbitmq_node="`+cn.NodeID()+`"}`, 1)
		if got["rabbitmq_raft_log_last_applied_index"] < float64(res[0].GetIndex()) {
			t.Fatalf("%s applied %v", cn.NodeID(), got["rabbitmq_raft_log_last_applied_index"])
		}
		// RabbitMQ 4.2's names of the Ra metrics, per Raft group: every
		// node reports its member of the one group.
		for _, name := range []string{"rabbitmq_raft_commit_index", "rabbitmq_raft_last_applied", "rabbitmq_raft_last_written_index"} {
			if v := got[name+`{raft_group="metadata"}`]; v < float64(res[0].GetIndex()) {
				t.Fatalf("%s %s %v", cn.NodeID(), name, v)
			}
		}
		if got[`rabbitmq_raft_term{raft_group="metadata"}`] < 1 || got[`rabbitmq_raft_num_segments{raft_group="metadata"}`] < 1 ||
			got[`rabbitmq_raft_max_num_segments{ra_system="quorum_queues"}`] < 1 {
			t.Fatalf("%s term or segments: %v", cn.NodeID(), got)
		}
		if _, ok := got[`rabbitmq_raft_snapshot_index{raft_group="metadata"}`]; !ok {
			t.Fatalf("%s: no snapshot index", cn.NodeID())
		}
		// The leader proposed the batch: it measured its commit.
		if cn == leader && (got[`rabbitmq_raft_commit_latency_seconds{raft_group="metadata"}`] <= 0 ||
			got[`rabbitmq_raft_max_commit_latency_seconds{ra_system="quorum_queues"}`] <= 0) {
			t.Fatalf("leader's commit latency: %v", got)
		}
		if cn != leader {
			if _, ok := per[`rabbitmq_queue_messages_ready{queue="orders",vhost="/"}`]; ok {
				t.Fatalf("follower %s serves per-queue series", cn.NodeID())
			}
		} else {
			wantSample(t, per, `rabbitmq_queue_messages_ready{queue="orders",vhost="/"}`, 3)
			wantSample(t, per, `rabbitmq_queue_messages{queue="orders",vhost="/"}`, 3)
		}
		for k, v := range got {
			if strings.HasPrefix(k, "rabbitmq_") {
				sum[k] += v
			}
		}
	}
	wantSample(t, sum, "rabbitmq_queue_messages_ready", 3)
	wantSample(t, sum, "rabbitmq_queues", 1)
	wantSample(t, sum, `rabbitmq_global_messages_received_total{protocol="amqp091"}`, 3)
	wantSample(t, sum, `rabbitmq_global_messages_routed_total{protocol="amqp091"}`, 3)
}
