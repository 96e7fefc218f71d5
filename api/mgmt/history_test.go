package mgmt

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/raftmq/raftmq/api/ops"
	"github.com/raftmq/raftmq/api/ops/opstest"
	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/proto"
)

// samplesOf returns a *_details' samples as (value, timestamp) pairs.
func samplesOf(t *testing.T, d map[string]any) [][2]uint64 {
	t.Helper()
	raw, ok := d["samples"].([]map[string]any)
	if !ok {
		t.Fatalf("no samples in %v", d)
	}
	var out [][2]uint64
	for _, s := range raw {
		out = append(out, [2]uint64{s["sample"].(uint64), uint64(s["timestamp"].(int64))})
	}
	return out
}

// TestRates_HistoryIsBounded: the history keeps rateHistory of samples,
// no more; a range reads the value each sample had at multiples of incr,
// newest first, and none from before the history.
func TestRates_HistoryIsBounded(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1000, 0)}
	r := &rates{now: clock.now}
	v := uint64(0)
	take := func() *counterSample {
		return &counterSample{global: map[string]uint64{"publish": v}, queues: map[[2]string]map[string]uint64{}}
	}
	// 364 samples end at 2820 s, a multiple of the range's incr.
	for range 3*historyLen + 1 {
		clock.add(rateInterval)
		r.observe(take)
		v += 10
	}
	if len(r.hist) != historyLen {
		t.Fatalf("%d samples kept, want %d", len(r.hist), historyLen)
	}
	// The last sample, taken now, counted 10 per 5 s.
	d := r.details(nil, nil, &rng{age: 60 * time.Second, incr: 10 * time.Second}, false, "publish")["publish_details"].(map[string]any)
	got := samplesOf(t, d)
	if len(got) != 7 {
		t.Fatalf("%d samples over 60 s every 10 s, want 7: %v", len(got), got)
	}
	last := v - 10
	for i, s := range got {
		if want := last - uint64(20*i); s[0] != want || s[1] != uint64(clock.now().UnixMilli())-uint64(10000*i) {
			t.Fatalf("sample %d: %v, want %d at %d", i, s, want, clock.now().UnixMilli()-int64(10000*i))
		}
	}
	if d["rate"] != 2.0 || d["avg_rate"] != 2.0 {
		t.Fatalf("rate %v avg_rate %v", d["rate"], d["avg_rate"])
	}
	// An age beyond the history gives what the history has.
	d = r.details(nil, nil, &rng{age: time.Hour, incr: rateInterval}, false, "publish")["publish_details"].(map[string]any)
	if got := samplesOf(t, d); len(got) != historyLen {
		t.Fatalf("%d samples over an hour, want the %d kept", len(got), historyLen)
	}
}

// TestRates_QueueHistory: a queue's history keeps only the samples where
// its values changed, and reads its value at each sample; past
// maxQueueHistory values the queue history starts later while the
// overall one keeps its length.
func TestRates_QueueHistory(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1000, 0)}
	r := &rates{now: clock.now}
	busy, idle := [2]string{"/", "busy"}, [2]string{"/", "idle"}
	n := uint64(0)
	take := func() *counterSample {
		return &counterSample{global: map[string]uint64{"publish": n}, queues: map[[2]string]map[string]uint64{
			busy: {"publish": n, "messages": n % 3},
			idle: {"publish": 5},
		}}
	}
	for range 20 {
		clock.add(rateInterval)
		r.observe(take)
		n++
	}
	if r.entries != 19 {
		t.Fatalf("%d queue values kept, want 19 (the busy queue's changes)", r.entries)
	}
	rg := &rng{age: 30 * time.Second, incr: 5 * time.Second}
	d := r.details(nil, &busy, rg, false, "publish")["publish_details"].(map[string]any)
	got := samplesOf(t, d)
	if len(got) != 7 || got[0][0] != 19 || got[6][0] != 13 {
		t.Fatalf("busy queue's samples %v", got)
	}
	depth := r.details(nil, &busy, rg, true, "messages")["messages_details"].(map[string]any)
	if got := samplesOf(t, depth); got[0][0] != 19%3 || got[1][0] != 18%3 {
		t.Fatalf("busy queue's depths %v", got)
	}
	// 19 % 3 = 1, 18 % 3 = 0: the depth rose by 1 in 5 s.
	if depth["rate"] != 0.2 {
		t.Fatalf("depth rate %v", depth["rate"])
	}
	if got := samplesOf(t, r.details(nil, &idle, rg, false, "publish")["publish_details"].(map[string]any)); len(got) != 7 || got[0][0] != 5 || got[6][0] != 5 {
		t.Fatalf("idle queue's samples %v", got)
	}

	// Many queues changing every sample: the bound holds.
	many := func() *counterSample {
		s := &counterSample{global: map[string]uint64{"publish": n}, queues: map[[2]string]map[string]uint64{}}
		for i := range maxQueueHistory / 10 {
			s.queues[[2]string{"/", fmt.Sprint(i)}] = map[string]uint64{"publish": n}
		}
		return s
	}
	for range 30 {
		clock.add(rateInterval)
		r.observe(many)
		n++
	}
	if r.entries > maxQueueHistory {
		t.Fatalf("%d queue values kept, above %d", r.entries, maxQueueHistory)
	}
	if len(r.hist) != 50 || r.qstart == 0 {
		t.Fatalf("%d samples, queue history from %d", len(r.hist), r.qstart)
	}
	q0 := [2]string{"/", "0"}
	got = samplesOf(t, r.details(nil, &q0, &rng{age: 10 * time.Minute, incr: 5 * time.Second}, false, "publish")["publish_details"].(map[string]any))
	if len(got) != len(r.hist)-r.qstart || got[0][0] != n-1 {
		t.Fatalf("%d samples of a queue from %d of %d, newest %v", len(got), r.qstart, len(r.hist), got[0])
	}
	if _, ok := r.base[busy]; ok {
		t.Fatal("a queue gone from the samples is still in the base")
	}
}

// TestManagement_RateHistory: msg_rates_age/_incr and lengths_age/_incr
// add the samples to /api/overview's and a queue's *_details, in
// RabbitMQ's shape; a range of no samples or too many is refused with
// RabbitMQ's message.
func TestManagement_RateHistory(t *testing.T) {
	c := clustertest.New(t, 1)
	n := c.WaitForLeader(clustertest.Timeout)
	admin := ops.New(ops.Deps{Node: ops.FromCluster(n)})
	t.Cleanup(func() { _ = admin.Close() })
	m := New(Options{Ops: admin})
	clock := &fakeClock{t: time.Unix(1000, 0)}
	m.rates.now = clock.now
	g := serveGuest(t, m)
	g.must(http.StatusCreated, "PUT", "/api/queues/%2F/work", nil)
	for range 3 {
		clock.add(rateInterval)
		for range 5 {
			if _, err := admin.Publish(opstest.Context(t), &proto.Publish{RoutingKey: "work", Body: []byte("abc")}); err != nil {
				t.Fatal(err)
			}
		}
		g.must(http.StatusOK, "GET", "/api/whoami", nil) // samples
	}
	type details struct {
		Rate    float64 `json:"rate"`
		AvgRate float64 `json:"avg_rate"`
		Samples []struct {
			Sample    float64 `json:"sample"`
			Timestamp int64   `json:"timestamp"`
		} `json:"samples"`
	}
	var ov struct {
		MessageStats struct {
			Publish details `json:"publish_details"`
		} `json:"message_stats"`
		QueueTotals struct {
			Ready details `json:"messages_ready_details"`
		} `json:"queue_totals"`
	}
	g.getJSON("/api/overview?msg_rates_age=10&msg_rates_incr=5&lengths_age=10&lengths_incr=5", &ov)
	pub := ov.MessageStats.Publish
	if len(pub.Samples) != 3 || pub.Samples[0].Sample != 15 || pub.Samples[1].Sample != 10 || pub.Samples[2].Sample != 5 ||
		pub.Samples[0].Timestamp != clock.now().UnixMilli() || pub.Rate != 1 || pub.AvgRate != 1 {
		t.Fatalf("overview publish_details %+v", pub)
	}
	if r := ov.QueueTotals.Ready; len(r.Samples) != 3 || r.Samples[0].Sample != 15 || r.Rate != 1 {
		t.Fatalf("overview messages_ready_details %+v", r)
	}
	var q struct {
		Messages     details `json:"messages_details"`
		MessageStats struct {
			Publish details `json:"publish_details"`
		} `json:"message_stats"`
	}
	g.getJSON("/api/queues/%2F/work?msg_rates_age=5&msg_rates_incr=5&lengths_age=5&lengths_incr=5", &q)
	if p := q.MessageStats.Publish; len(p.Samples) != 2 || p.Samples[0].Sample != 15 || p.Samples[1].Sample != 10 {
		t.Fatalf("queue publish_details %+v", p)
	}
	if d := q.Messages; len(d.Samples) != 2 || d.Samples[0].Sample != 15 || d.Rate != 1 {
		t.Fatalf("queue messages_details %+v", d)
	}
	// Without a range, no samples.
	var plain map[string]any
	g.getJSON("/api/overview", &plain)
	if _, ok := plain["message_stats"].(map[string]any)["publish_details"].(map[string]any)["samples"]; ok {
		t.Fatal("samples without a range")
	}
	for _, qs := range []string{"msg_rates_age=60&msg_rates_incr=0", "lengths_age=0&lengths_incr=5", "msg_rates_age=600&msg_rates_incr=1"} {
		code, body, _ := g.do("GET", "/api/overview?"+qs, nil)
		if code != http.StatusBadRequest || !strings.Contains(string(body), "Invalid range parameters") {
			t.Fatalf("%s: %d %s", qs, code, body)
		}
	}
}
