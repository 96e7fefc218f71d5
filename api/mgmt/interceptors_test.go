package mgmt

import (
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/raftmq/raftmq/amqp"
	"github.com/raftmq/raftmq/api/ops"
	"github.com/raftmq/raftmq/cluster/broker"
	"github.com/raftmq/raftmq/cluster/clustertest"
)

// A message published through the management API gets what the node's
// incoming interceptors give an AMQP publish, as RabbitMQ's does (it
// publishes through a channel): here the time it arrived, overwriting
// the publisher's, and the node's name unless the publisher set one.
func TestManagementPublishIsIntercepted(t *testing.T) {
	c := clustertest.New(t, 1)
	n := c.WaitForLeader(clustertest.Timeout)
	srv := amqp.NewServer(amqp.Config{HeaderTimestamp: amqp.StampOverwrite, HeaderRoutingNode: amqp.StampKeep})
	srv.SetBroker(broker.New(n, nil))
	admin := ops.New(ops.Deps{Node: ops.FromCluster(n), Intercept: srv.Intercept})
	mc := serveOps(t, admin)

	mc.must(http.StatusCreated, "PUT", "/api/queues/%2F/q", map[string]any{"durable": true})
	before := time.Now().UnixMilli()
	for _, props := range []map[string]any{
		{},
		{"timestamp": 1000, "headers": map[string]any{"timestamp_in_ms": 7, "x-routed-by": "elsewhere", "n": 3}},
	} {
		var routed map[string]bool
		if err := json.Unmarshal(mc.must(http.StatusOK, "POST", "/api/exchanges/%2F/amq.default/publish",
			map[string]any{"routing_key": "q", "payload": "m", "properties": props}), &routed); err != nil || !routed["routed"] {
			t.Fatalf("publish: %v %v", routed, err)
		}
	}
	after := time.Now().UnixMilli()

	var got []struct {
		Properties struct {
			Timestamp int64          `json:"timestamp"`
			Headers   map[string]any `json:"headers"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(mc.must(http.StatusOK, "POST", "/api/queues/%2F/q/get",
		map[string]any{"count": 2, "ackmode": "ack_requeue_false", "encoding": "auto"}), &got); err != nil || len(got) != 2 {
		t.Fatalf("get: %v %v", got, err)
	}
	for i, m := range got {
		h := m.Properties.Headers
		ms, err := strconv.ParseInt(jsonNumber(h["timestamp_in_ms"]), 10, 64)
		if err != nil || ms < before || ms > after {
			t.Fatalf("message %d: timestamp_in_ms %v, want the time it was published, %d to %d", i, h["timestamp_in_ms"], before, after)
		}
		if m.Properties.Timestamp != ms/1000 {
			t.Fatalf("message %d: timestamp %d s, timestamp_in_ms %d", i, m.Properties.Timestamp, ms)
		}
		want := n.NodeID()
		if i == 1 {
			want = "elsewhere"
			if jsonNumber(h["n"]) != "3" {
				t.Fatalf("message %d: the publisher's header n became %v", i, h["n"])
			}
		}
		if h["x-routed-by"] != want {
			t.Fatalf("message %d: x-routed-by %v, want %q", i, h["x-routed-by"], want)
		}
	}
}

// jsonNumber is a number decoded from JSON as its decimal text.
func jsonNumber(v any) string {
	if f, ok := v.(float64); ok {
		return strconv.FormatFloat(f, 'f', -1, 64)
	}
	return ""
}
