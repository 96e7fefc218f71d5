package metrics

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftmq/raftmq/api/ops"
	"github.com/raftmq/raftmq/api/ops/opstest"
	"github.com/raftmq/raftmq/proto"
)

// scrape fetches /metrics and returns each sample by its series text
// (name{labels}).
func scrape(t *testing.T, h http.Handler) map[string]float64 {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("/metrics: %d %s", rec.Code, rec.Body)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(rec.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("bad sample %q", line)
		}
		out[line[:i]] = v
	}
	return out
}

func wantSample(t *testing.T, got map[string]float64, series string, v float64) {
	t.Helper()
	g, ok := got[series]
	if !ok {
		t.Fatalf("series %s missing", series)
	}
	if g != v {
		t.Fatalf("%s = %v, want %v", series, g, v)
	}
}

type statsBox struct {
	mu sync.Mutex
	s  ops.StateStats
}

func (b *statsBox) get() ops.StateStats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.s
}

func TestMetrics_SeriesMove(t *testing.T) {
	n := opstest.NewNode("n1")
	n.Raft = ops.RaftStats{State: "Follower", Term: 2, CommitIndex: 10, AppliedIndex: 9, LastLogIndex: 11, LogSizeBytes: 4096}
	n.MemberList = []*proto.NodeStatus{{Id: "n1", Health: "alive", Suffrage: "voter"}, {Id: "n2", Health: "suspect"}}
	n.State.QueueList = []*proto.QueueInfo{{Vhost: "/", Name: "a", Ready: 5, Unacked: 1, Consumers: 2}, {Vhost: "/", Name: "b"}, {Vhost: "/", Name: "c"}}
	n.State.ClockMs = 5000
	conns := &opstest.Conns{Open: []*proto.ConnectionInfo{{Id: "c1", Channels: 3}}}
	box := &statsBox{s: ops.StateStats{Published: 10, Delivered: 4, Acked: 3, Expired: 2, DeadLettered: 1, Dropped: 1, Ready: 5, Unacked: 1, Overdue: 0, Consumers: 2, Queues: 3}}
	m := New(Options{Node: n, Conns: conns, Stats: box.get, PerQueue: true, MaxQueues: 2})
	h := NewHandler(HandlerOptions{Node: n, Metrics: m})

	got := scrape(t, h)
	wantSample(t, got, `raftmq_raft_state{state="Follower"}`, 1)
	wantSample(t, got, `raftmq_raft_state{state="Leader"}`, 0)
	wantSample(t, got, "raftmq_raft_term", 2)
	wantSample(t, got, "raftmq_raft_commit_index", 10)
	wantSample(t, got, "raftmq_raft_applied_index", 9)
	wantSample(t, got, "raftmq_raft_last_log_index", 11)
	wantSample(t, got, "raftmq_raft_log_size_bytes", 4096)
	wantSample(t, got, `raftmq_cluster_members{health="alive"}`, 1)
	wantSample(t, got, `raftmq_cluster_members{health="suspect"}`, 1)
	wantSample(t, got, "raftmq_log_clock_seconds", 5)
	wantSample(t, got, "raftmq_messages_published_total", 10)
	wantSample(t, got, "raftmq_messages_expired_total", 2)
	wantSample(t, got, "raftmq_messages_dead_lettered_total", 1)
	wantSample(t, got, "raftmq_messages_ready", 5)
	wantSample(t, got, "raftmq_messages_overdue", 0)
	wantSample(t, got, "raftmq_consumers", 2)
	wantSample(t, got, "raftmq_connections", 1)
	wantSample(t, got, "raftmq_channels", 3)
	wantSample(t, got, `raftmq_queue_messages_ready{queue="a",vhost="/"}`, 5)
	wantSample(t, got, `raftmq_queue_consumers{queue="a",vhost="/"}`, 2)
	if _, ok := got[`raftmq_queue_messages_ready{queue="c",vhost="/"}`]; ok {
		t.Fatal("per-queue series exceed MaxQueues")
	}
	wantSample(t, got, "raftmq_apply_duration_seconds_count", 0)

	// Everything moves with the node.
	box.mu.Lock()
	box.s.Published, box.s.Expired, box.s.Overdue = 25, 7, 3
	box.mu.Unlock()
	n.Mu.Lock()
	n.Raft.State, n.Raft.Term, n.Raft.CommitIndex = "Leader", 3, 20
	n.Mu.Unlock()
	n.Update(func(s *opstest.State) { s.QueueList[0].Ready = 9 })
	conns.Mu.Lock()
	conns.Open = append(conns.Open, &proto.ConnectionInfo{Id: "c2", Channels: 1})
	conns.Mu.Unlock()
	m.ObserveApply(3 * time.Millisecond)
	m.ObserveApply(5 * time.Millisecond)

	got = scrape(t, h)
	wantSample(t, got, `raftmq_raft_state{state="Leader"}`, 1)
	wantSample(t, got, `raftmq_raft_state{state="Follower"}`, 0)
	wantSample(t, got, "raftmq_raft_term", 3)
	wantSample(t, got, "raftmq_raft_commit_index", 20)
	wantSample(t, got, "raftmq_messages_published_total", 25)
	wantSample(t, got, "raftmq_messages_expired_total", 7)
	wantSample(t, got, "raftmq_messages_overdue", 3)
	wantSample(t, got, "raftmq_connections", 2)
	wantSample(t, got, "raftmq_channels", 4)
	wantSample(t, got, `raftmq_queue_messages_ready{queue="a",vhost="/"}`, 9)
	wantSample(t, got, "raftmq_apply_duration_seconds_count", 2)
}

func TestMetrics_NoPerQueueByDefault(t *testing.T) {
	n := opstest.NewNode("n1")
	n.State.QueueList = []*proto.QueueInfo{{Vhost: "/", Name: "a", Ready: 5}}
	got := scrape(t, NewHandler(HandlerOptions{Node: n, Metrics: New(Options{Node: n})}))
	for k := range got {
		if strings.HasPrefix(k, "raftmq_queue_") {
			t.Fatalf("per-queue series %s without the option", k)
		}
	}
	wantSample(t, got, "raftmq_connections", 0)
}

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	b, _ := io.ReadAll(rec.Body)
	return rec.Code, string(b)
}

func TestHTTP_ReadyzFlips(t *testing.T) {
	n := opstest.NewNode("n1")
	n.LeaderID = ""
	n.State.Ready = false
	h := NewHandler(HandlerOptions{Node: n})

	if code, _ := get(t, h, "/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz %d", code)
	}
	step := func(want int, reason string) {
		t.Helper()
		code, body := get(t, h, "/readyz")
		if code != want || !strings.Contains(body, reason) {
			t.Fatalf("/readyz = %d %q, want %d %q", code, body, want, reason)
		}
	}
	step(http.StatusServiceUnavailable, "not a member")
	n.Mu.Lock()
	n.MemberList = []*proto.NodeStatus{{Id: "n1", Suffrage: "voter", Health: "alive"}}
	n.Mu.Unlock()
	step(http.StatusServiceUnavailable, "no leader")
	n.SetLeader("n2")
	step(http.StatusServiceUnavailable, "defaults")
	n.Update(func(s *opstest.State) { s.Ready = true })
	step(http.StatusOK, "ready")
	// A node cut off from the majority closes its clients' connections:
	// no probe may send it more.
	n.Mu.Lock()
	n.Refused = "no contact with a majority"
	n.Mu.Unlock()
	step(http.StatusServiceUnavailable, "no contact with a majority")
	n.Mu.Lock()
	n.Refused = ""
	n.Mu.Unlock()
	step(http.StatusOK, "ready")
	n.SetLeader("")
	step(http.StatusServiceUnavailable, "no leader")

	// With a Serving report, ready waits for the AMQP listeners as well.
	var open atomic.Bool
	h = NewHandler(HandlerOptions{Node: n, Serving: open.Load})
	n.SetLeader("n2")
	step(http.StatusServiceUnavailable, "AMQP listener")
	open.Store(true)
	step(http.StatusOK, "ready")

	if code, _ := get(t, h, "/debug/pprof/"); code != http.StatusNotFound {
		t.Fatalf("pprof served without the option: %d", code)
	}
	hp := NewHandler(HandlerOptions{Node: n, Pprof: true})
	if code, body := get(t, hp, "/debug/pprof/"); code != http.StatusOK || !strings.Contains(body, "goroutine") {
		t.Fatalf("pprof: %d", code)
	}
}

// The records of queued messages that live outside the Go heap (queue
// slabs) are two series, what the slabs map and what is in use; a node
// that reads none has neither.
func TestMetrics_OffHeapRecords(t *testing.T) {
	n := opstest.NewNode("n1")
	var mapped, used atomic.Int64
	mapped.Store(5 << 20)
	used.Store(40960)
	h := NewHandler(HandlerOptions{Node: n, Metrics: New(Options{Node: n, OffHeap: func() (int64, int64) { return mapped.Load(), used.Load() }})})
	got := scrape(t, h)
	wantSample(t, got, `raftmq_message_records_offheap_bytes{kind="mapped"}`, 5<<20)
	wantSample(t, got, `raftmq_message_records_offheap_bytes{kind="used"}`, 40960)
	used.Store(0)
	wantSample(t, scrape(t, h), `raftmq_message_records_offheap_bytes{kind="used"}`, 0)

	for k := range scrape(t, NewHandler(HandlerOptions{Node: n, Metrics: New(Options{Node: n})})) {
		if strings.HasPrefix(k, "raftmq_message_records_offheap_bytes") {
			t.Fatalf("%s without a reader", k)
		}
	}
}
