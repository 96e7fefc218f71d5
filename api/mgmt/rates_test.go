package mgmt

import (
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/raftmq/raftmq/api/ops"
	"github.com/raftmq/raftmq/api/ops/opstest"
	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/proto"
)

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func TestRates_LastTwoSamples(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1000, 0)}
	r := &rates{now: clock.now}
	v := uint64(0)
	take := func() *counterSample { return &counterSample{global: map[string]uint64{"publish": v}} }
	rateNow := func() float64 {
		return r.details(nil, nil, nil, false, "publish")["publish_details"].(map[string]any)["rate"].(float64)
	}

	r.observe(take)
	if got := rateNow(); got != 0 {
		t.Fatalf("one sample: rate %v", got)
	}
	v = 50
	clock.add(2 * time.Second)
	r.observe(take) // too early: no new sample
	if got := r.details(nil, nil, nil, false, "publish")["publish"]; got != uint64(0) {
		t.Fatalf("count from a sample taken too early: %v", got)
	}
	clock.add(3 * time.Second)
	r.observe(take)
	if got := rateNow(); got != 10 {
		t.Fatalf("50 in 5 s: rate %v", got)
	}
	// A counter that goes back (a restored snapshot) is no negative rate.
	v = 5
	clock.add(5 * time.Second)
	r.observe(take)
	if got := rateNow(); got != 0 {
		t.Fatalf("counter reset: rate %v", got)
	}
	// Counts given as of now win over the last sample's.
	if got := r.details(map[string]uint64{"publish": 7}, nil, nil, false, "publish")["publish"]; got != uint64(7) {
		t.Fatalf("count now %v", got)
	}
}

// TestManagement_MessageRates: /api/overview and a queue show the counts
// and the per-second rates of publishes, deliveries and acks between the
// last two samples, and the node's confirms.
func TestManagement_MessageRates(t *testing.T) {
	c := clustertest.New(t, 1)
	n := c.WaitForLeader(clustertest.Timeout)
	admin := ops.New(ops.Deps{Node: ops.FromCluster(n), Counters: func() ops.NodeCounters { return ops.NodeCounters{Confirmed: 12} }})
	t.Cleanup(func() { _ = admin.Close() })
	m := New(Options{Ops: admin})
	clock := &fakeClock{t: time.Unix(1000, 0)}
	m.rates.now = clock.now
	g := serveGuest(t, m)
	g.must(http.StatusCreated, "PUT", "/api/queues/%2F/work", nil)
	clock.add(rateInterval) // the first sample saw no publish
	g.must(http.StatusOK, "GET", "/api/whoami", nil)
	for range 10 {
		if _, err := admin.Publish(opstest.Context(t), &proto.Publish{RoutingKey: "work", Body: []byte("abc")}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := admin.GetMessages(opstest.Context(t), "/", "work", 4, false); err != nil {
		t.Fatal(err)
	}
	clock.add(rateInterval)
	var ov struct {
		MessageStats map[string]any `json:"message_stats"`
	}
	g.getJSON("/api/overview", &ov)
	rateOf := func(ms map[string]any, k string) any { d, _ := ms[k+"_details"].(map[string]any); return d["rate"] }
	ms := ov.MessageStats
	if ms["publish"] != float64(10) || rateOf(ms, "publish") != float64(2) || ms["deliver_get"] != float64(4) ||
		rateOf(ms, "deliver_get") != 0.8 || ms["confirm"] != float64(12) || ms["disk_reads"] != float64(0) {
		t.Fatalf("overview message_stats %v", ms)
	}
	var q map[string]any
	g.getJSON("/api/queues/%2F/work", &q)
	qs, _ := q["message_stats"].(map[string]any)
	if qs["publish"] != float64(10) || rateOf(qs, "publish") != float64(2) || qs["ack"] != float64(4) || rateOf(qs, "ack") != 0.8 {
		t.Fatalf("queue message_stats %v", qs)
	}
	if q["message_bytes"] != float64(18) || q["messages_persistent"] != float64(0) || q["head_message_timestamp"] != nil {
		t.Fatalf("queue bytes %v", q)
	}
}
