package mgmt

import (
	"context"
	"maps"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/raftmq/raftmq/api/ops"
	"github.com/raftmq/raftmq/fsm"
)

const (
	// rateInterval is how often message counters are sampled for the
	// management API's rates: RabbitMQ's collect_statistics_interval (5 s).
	rateInterval = 5 * time.Second
	// rateHistory is how far back each node keeps its samples, for the
	// *_details samples the console charts (docs/operations.md, limits).
	rateHistory = 10 * time.Minute
	// historyLen is the samples that span rateHistory.
	historyLen = int(rateHistory/rateInterval) + 1
	// maxQueueHistory bounds the per-queue values kept across the history
	// (docs/operations.md, limits): only the queues whose counts moved
	// since the sample before are kept, but many busy queues could still
	// hold much memory. Past it, per-queue history starts later; the
	// overall history keeps its ten minutes.
	maxQueueHistory = 200_000
	// maxRangeSamples is the most samples one *_details may ask for
	// (age / incr), RabbitMQ's limit.
	maxRangeSamples = 500
)

// The message_stats keys raftmq counts. The log does not split deliveries
// by ack mode or basic.get, so deliver_get stands for all four.
// dead_lettered is raftmq's own: messages that died (TTL, max-length,
// rejection, delivery limit) in queues with a dead-letter exchange.
var (
	globalRateKeys = []string{"publish", "deliver_get", "ack", "redeliver", "confirm", "dead_lettered"}
	queueRateKeys  = []string{"publish", "deliver_get", "ack", "redeliver", "dead_lettered"}
	// lengthKeys are the queue depths sampled with the counters (the
	// overview's queue_totals, a queue's own).
	lengthKeys = []string{"messages", "messages_ready", "messages_unacknowledged"}
)

// counterSample is one reading of the counters and queue depths: the
// cluster's from the replicated state (every node applies the same log, so
// any node can read them) and this node's own confirms.
type counterSample struct {
	at     time.Time
	global map[string]uint64
	queues map[[2]string]map[string]uint64 // by vhost, name
}

// histSample is a sample in the history: the global values, and of the
// queues only those whose values changed since the sample before it.
type histSample struct {
	at      time.Time
	global  map[string]uint64
	changed map[[2]string]map[string]uint64
}

// rates keeps the samples of the last rateHistory, taken at least
// rateInterval apart. A rate is the change between the last two per
// second, as RabbitMQ's basic rates mode computes its *_details.rate;
// with a range (msg_rates_age and _incr, lengths_age and _incr) the
// *_details also carry the samples, as RabbitMQ's detailed mode does.
type rates struct {
	mu  sync.Mutex
	now func() time.Time
	// hist is oldest first; last is the newest full sample (every
	// queue's values).
	hist []histSample
	last *counterSample
	// base is every queue's values as of hist[qstart]: per-queue values
	// are known from that sample on.
	base   map[[2]string]map[string]uint64
	qstart int
	// entries counts the queue values in hist[qstart+1:].changed.
	entries int
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
	h := histSample{at: now, global: s.global}
	if r.last == nil {
		// A copy: base changes as samples fold into it.
		r.base = maps.Clone(s.queues)
	} else {
		h.changed = map[[2]string]map[string]uint64{}
		for k, v := range s.queues {
			if !maps.Equal(r.last.queues[k], v) {
				h.changed[k] = v
			}
		}
		r.entries += len(h.changed)
	}
	r.hist = append(r.hist, h)
	r.last = s
	for len(r.hist) > historyLen {
		if r.qstart == 0 {
			r.foldQueues()
		}
		r.hist[0] = histSample{}
		r.hist = r.hist[1:]
		r.qstart--
	}
	for r.entries > maxQueueHistory && r.qstart < len(r.hist)-1 {
		r.foldQueues()
	}
}

// foldQueues moves the per-queue start one sample later: the next
// sample's changes go into base. Queues gone since are dropped from it.
func (r *rates) foldQueues() {
	next := &r.hist[r.qstart+1]
	for k, v := range next.changed {
		r.base[k] = v
	}
	r.entries -= len(next.changed)
	next.changed = nil
	for k := range r.base {
		if _, ok := r.last.queues[k]; !ok {
			delete(r.base, k)
		}
	}
	r.qstart++
}

// rng is a range of samples asked for: the last age, one every incr,
// RabbitMQ's *_age and *_incr query parameters.
type rng struct {
	age, incr time.Duration
}

// parseRange reads prefix_age and prefix_incr (seconds) from query: nil
// when either is absent or not a number, as RabbitMQ ignores them then; an
// error when they ask for no samples or too many.
func parseRange(query url.Values, prefix string) (*rng, error) {
	age, err1 := strconv.Atoi(query.Get(prefix + "_age"))
	incr, err2 := strconv.Atoi(query.Get(prefix + "_incr"))
	if err1 != nil || err2 != nil {
		return nil, nil
	}
	if age <= 0 || incr <= 0 || age/incr > maxRangeSamples {
		return nil, badRequest("Invalid range parameters: age %d, incr %d", age, incr)
	}
	return &rng{age: time.Duration(age) * time.Second, incr: time.Duration(incr) * time.Second}, nil
}

// rateOf is the change of key between two samples per second; 0 without
// both, or when the counter went back (a node that restored a snapshot
// counts its queues from 0 again).
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

// depthRate is rateOf for a value that may go down, a queue depth.
func depthRate(prev, last map[string]uint64, dt time.Duration, key string) float64 {
	if prev == nil || last == nil || dt <= 0 {
		return 0
	}
	return (float64(last[key]) - float64(prev[key])) / dt.Seconds()
}

// series returns the values of the history samples, oldest first, by
// pick (nil where the sample has none); of a queue (key non-nil) only
// from the sample per-queue values are known from.
func (r *rates) series(queue *[2]string) ([]time.Time, []map[string]uint64) {
	var at []time.Time
	var vals []map[string]uint64
	if queue == nil {
		for _, h := range r.hist {
			at = append(at, h.at)
			vals = append(vals, h.global)
		}
		return at, vals
	}
	if len(r.hist) == 0 {
		return nil, nil
	}
	cur := r.base[*queue]
	for i := r.qstart; i < len(r.hist); i++ {
		if i > r.qstart {
			if v, ok := r.hist[i].changed[*queue]; ok {
				cur = v
			}
		}
		at = append(at, r.hist[i].at)
		vals = append(vals, cur)
	}
	return at, vals
}

// details returns RabbitMQ's entries for keys: each value from now (or
// the last sample when now is nil) and its key_details, the rate between
// the last two samples; with rg, also the samples of the range (newest
// first, at multiples of incr, each the value of the last sample taken by
// then; none before the history begins), avg_rate across them and avg.
// depth says the values are depths, whose rate may be negative.
func (r *rates) details(now map[string]uint64, queue *[2]string, rg *rng, depth bool, keys ...string) map[string]any {
	r.mu.Lock()
	at, vals := r.series(queue)
	r.mu.Unlock()
	var prev, last map[string]uint64
	var dt time.Duration
	if n := len(vals); n > 0 {
		last = vals[n-1]
		if n > 1 {
			prev, dt = vals[n-2], at[n-1].Sub(at[n-2])
		}
	}
	if now == nil {
		now = last
	}
	// The range's timestamps, newest first, and the sample each reads.
	type point struct {
		ts  int64
		idx int
	}
	var points []point
	if rg != nil && len(at) > 0 {
		end := r.now().Truncate(rg.incr)
		i := len(at) - 1
		for t := end; !t.Before(end.Add(-rg.age)); t = t.Add(-rg.incr) {
			for i >= 0 && at[i].After(t) {
				i--
			}
			if i < 0 {
				break
			}
			points = append(points, point{t.UnixMilli(), i})
		}
	}
	out := make(map[string]any, 2*len(keys))
	for _, k := range keys {
		out[k] = now[k]
		d := map[string]any{}
		if depth {
			d["rate"] = depthRate(prev, last, dt, k)
		} else {
			d["rate"] = rateOf(prev, last, dt, k)
		}
		if rg != nil {
			samples := make([]map[string]any, 0, len(points))
			var sum float64
			for _, p := range points {
				v := vals[p.idx][k]
				sum += float64(v)
				samples = append(samples, map[string]any{"sample": v, "timestamp": p.ts})
			}
			d["samples"] = samples
			d["avg_rate"], d["avg"] = 0.0, 0.0
			if n := len(points); n > 0 {
				d["avg"] = sum / float64(n)
			}
			if n := len(points); n > 1 {
				newest, oldest := float64(vals[points[0].idx][k]), float64(vals[points[n-1].idx][k])
				span := time.Duration(points[0].ts-points[n-1].ts) * time.Millisecond
				if depth || newest >= oldest {
					d["avg_rate"] = (newest - oldest) / span.Seconds()
				}
			}
		}
		out[k+"_details"] = d
	}
	return out
}

// globalCounts are the overview's counters and depths now.
func globalCounts(st fsm.Stats, own ops.NodeCounters) map[string]uint64 {
	var dead uint64
	for _, d := range st.Deaths {
		dead += d[1]
	}
	return map[string]uint64{"publish": st.Published, "deliver_get": st.Delivered, "ack": st.Acked,
		"redeliver": st.Requeued, "confirm": own.Confirmed, "dead_lettered": dead,
		"messages": st.Ready + st.Unacked, "messages_ready": st.Ready, "messages_unacknowledged": st.Unacked}
}

// sample reads the counters for rates.
func (m *Server) sample() *counterSample {
	s := &counterSample{queues: map[[2]string]map[string]uint64{}}
	var st fsm.Stats
	m.node.View(func(v ops.State) {
		st = v.Stats()
		for _, c := range v.QueueCounts() {
			s.queues[[2]string{c.Vhost, c.Name}] = map[string]uint64{"publish": c.Published, "deliver_get": c.Delivered,
				"ack": c.Acked, "redeliver": c.Redelivered, "dead_lettered": c.DeadLettered}
		}
		for _, q := range v.Queues("") {
			if c, ok := s.queues[[2]string{q.GetVhost(), q.GetName()}]; ok {
				c["messages"], c["messages_ready"], c["messages_unacknowledged"] = q.GetReady()+q.GetUnacked(), q.GetReady(), q.GetUnacked()
			}
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

// queueStats is a queue's message_stats from the last sample, with the
// samples of rg when asked for.
func (m *Server) queueStats(vhost, name string, rg *rng) map[string]any {
	key := [2]string{vhost, name}
	return m.rates.details(nil, &key, rg, false, queueRateKeys...)
}

// parseRanges reads the request's range parameters.
func (q *req) parseRanges() error {
	query := q.r.URL.Query()
	var err error
	if q.msgRange, err = parseRange(query, "msg_rates"); err != nil {
		return err
	}
	q.lenRange, err = parseRange(query, "lengths")
	return err
}
