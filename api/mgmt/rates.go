package mgmt

import (
	"context"
	"sync"
	"time"

	"github.com/raftmq/raftmq/api/ops"
	"github.com/raftmq/raftmq/fsm"
)

// rateInterval is how often message counters are sampled for the
// management API's rates: RabbitMQ's collect_statistics_interval (5 s).
const rateInterval = 5 * time.Second

// counterSample is one reading of the message counters: the cluster's
// from the replicated state (every node applies the same log, so any node
// can read them) and this node's own confirms.
type counterSample struct {
	at     time.Time
	global map[string]uint64
	queues map[[2]string]map[string]uint64 // by vhost, name
}

// rates keeps the last two samples, taken at least rateInterval apart;
// a rate is the change between them per second, as RabbitMQ's basic rates
// mode computes its *_details.rate.
type rates struct {
	mu         sync.Mutex
	now        func() time.Time
	prev, last *counterSample
}

// observe takes a sample with take when the last one is about
// rateInterval old or older (or there is none).
func (r *rates) observe(take func() *counterSample) {
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	// A tenth of slack: a ticker's sample must not be skipped for coming
	// a moment early.
	if r.last != nil && now.Sub(r.last.at) < rateInterval-rateInterval/10 {
		return
	}
	s := take()
	s.at = now
	r.prev, r.last = r.last, s
}

// rate is the change of key between the last two samples per second; 0
// with fewer than two samples, or when the counter went back (a node that
// restored a snapshot counts its queues from 0 again).
func rateOf(prev, last map[string]uint64, dt time.Duration, key string) float64 {
	if prev == nil || last == nil || dt <= 0 {
		return 0
	}
	a, b := prev[key], last[key]
	if b < a {
		return 0
	}
	return float64(b-a) / dt.Seconds()
}

// stats returns RabbitMQ's message_stats entries for keys: each count
// from now (or the last sample when now is nil) and its rate as
// key_details.
func (r *rates) stats(now map[string]uint64, pick func(*counterSample) map[string]uint64, keys ...string) map[string]any {
	r.mu.Lock()
	defer r.mu.Unlock()
	var prev, last map[string]uint64
	var dt time.Duration
	if r.last != nil {
		last = pick(r.last)
		if r.prev != nil {
			prev, dt = pick(r.prev), r.last.at.Sub(r.prev.at)
		}
	}
	if now == nil {
		now = last
	}
	out := make(map[string]any, 2*len(keys))
	for _, k := range keys {
		out[k] = now[k]
		out[k+"_details"] = map[string]float64{"rate": rateOf(prev, last, dt, k)}
	}
	return out
}

// The message_stats keys raftmq counts. The log does not split deliveries
// by ack mode or basic.get, so deliver_get stands for all four.
var (
	globalRateKeys = []string{"publish", "deliver_get", "ack", "redeliver", "confirm"}
	queueRateKeys  = []string{"publish", "deliver_get", "ack", "redeliver"}
)

// globalCounts are the overview's counters now.
func globalCounts(st fsm.Stats, own ops.NodeCounters) map[string]uint64 {
	return map[string]uint64{"publish": st.Published, "deliver_get": st.Delivered, "ack": st.Acked,
		"redeliver": st.Requeued, "confirm": own.Confirmed}
}

// sample reads the counters for rates.
func (m *Server) sample() *counterSample {
	s := &counterSample{queues: map[[2]string]map[string]uint64{}}
	var st fsm.Stats
	m.node.View(func(v ops.State) {
		st = v.Stats()
		for _, c := range v.QueueCounts() {
			s.queues[[2]string{c.Vhost, c.Name}] = map[string]uint64{"publish": c.Published, "deliver_get": c.Delivered,
				"ack": c.Acked, "redeliver": c.Redelivered}
		}
	})
	s.global = globalCounts(st, m.ops.NodeCounters())
	return s
}

// Run samples the counters every rateInterval until ctx is done, so rates
// move while nobody asks; requests also sample when the last sample is
// that old.
func (m *Server) Run(ctx context.Context) {
	t := time.NewTicker(rateInterval)
	defer t.Stop()
	for {
		m.rates.observe(m.sample)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// queueStats is a queue's message_stats from the last sample.
func (m *Server) queueStats(vhost, name string) map[string]any {
	key := [2]string{vhost, name}
	return m.rates.stats(nil, func(s *counterSample) map[string]uint64 { return s.queues[key] }, queueRateKeys...)
}
