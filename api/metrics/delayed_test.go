package metrics

import (
	"fmt"
	"testing"

	"github.com/raftmq/raftmq/api/ops"
	"github.com/raftmq/raftmq/api/ops/opstest"
	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// A delayed exchange's waiting messages are a gauge per exchange; a release
// counts once, with its lateness in log time in the histogram.
func TestMetrics_DelayedMessages(t *testing.T) {
	c := clustertest.New(t, 1)
	cn := c.WaitForLeader(clustertest.Timeout)
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		ok := false
		cn.View(func(m *fsm.Machine) { ok = m.Initialized() })
		if !ok {
			return fmt.Errorf("defaults not applied")
		}
		return nil
	})
	h := NewHandler(HandlerOptions{Metrics: New(Options{Node: ops.FromCluster(cn), Stats: ops.ClusterStats(cn)}), Node: ops.FromCluster(cn)})
	str := func(s string) *proto.Value { return &proto.Value{Kind: &proto.Value_LongString{LongString: []byte(s)}} }
	delayed := func(ms int64) *proto.Command {
		return &proto.Command{Cmd: &proto.Command_Publish{Publish: &proto.Publish{Vhost: "/", Exchange: "dx", RoutingKey: "k", Body: []byte("b"),
			Properties: &proto.Properties{Headers: &proto.Table{Fields: []*proto.Field{{Key: "x-delay", Value: &proto.Value{Kind: &proto.Value_Int64{Int64: ms}}}}}}}}}
	}
	cmds := []*proto.Command{
		{Cmd: &proto.Command_ExchangeDeclare{ExchangeDeclare: &proto.ExchangeDeclare{Vhost: "/", Name: "dx", Type: fsm.DelayedExchangeType, Durable: true,
			Arguments: &proto.Table{Fields: []*proto.Field{{Key: "x-delayed-type", Value: str("direct")}}}}}},
		{Cmd: &proto.Command_QueueDeclare{QueueDeclare: &proto.QueueDeclare{Vhost: "/", Name: "q", Durable: true}}},
		{Cmd: &proto.Command_Bind{Bind: &proto.Bind{Vhost: "/", Source: "dx", Destination: "q", RoutingKey: "k"}}},
		delayed(3_600_000), delayed(3_600_000), delayed(1),
	}
	for _, cmd := range cmds {
		if r, err := cn.Submit(opstest.Context(t), cmd); err != nil || r.GetCode() != 0 {
			t.Fatalf("%v: %v %v", cmd, r, err)
		}
	}
	// The message delayed 1 ms is released by the leader's next proposal.
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		if got := scrape(t, h)["raftmq_delayed_messages_released_total"]; got != 1 {
			return fmt.Errorf("released %v", got)
		}
		return nil
	})
	got, types := scrapeTyped(t, h, "/metrics")
	wantSample(t, got, `raftmq_exchange_messages_delayed{exchange="dx",vhost="/"}`, 2)
	wantSample(t, got, "raftmq_messages_delayed", 2)
	wantSample(t, got, "raftmq_delayed_release_lateness_seconds_count", 1)
	wantSample(t, got, `raftmq_delayed_release_lateness_seconds_bucket{le="+Inf"}`, 1)
	if types["raftmq_delayed_release_lateness_seconds"] != "histogram" || types["raftmq_delayed_messages_released_total"] != "counter" {
		t.Fatalf("types %v", types)
	}
	var rel fsm.ReleaseStats
	cn.View(func(m *fsm.Machine) { rel = m.Releases() })
	wantSample(t, got, "raftmq_delayed_release_lateness_seconds_sum", float64(rel.LateSumMs)/1000)
	// Each bucket counts the releases at most its bound late.
	for i, le := range fsm.ReleaseLatenessBucketsMs {
		var want uint64
		for _, n := range rel.Late[:i+1] {
			want += n
		}
		wantSample(t, got, fmt.Sprintf(`raftmq_delayed_release_lateness_seconds_bucket{le="%v"}`, float64(le)/1000), float64(want))
	}
	if _, ok := got[`raftmq_exchange_messages_delayed{exchange="amq.direct",vhost="/"}`]; ok {
		t.Fatal("a direct exchange has a delayed series")
	}
}
