package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/raftmq/raftmq/api/ops"
	"github.com/raftmq/raftmq/fsm"
)

// raftStates are the values of the raftmq_raft_state gauge's label.
var raftStates = []string{"Follower", "Candidate", "Leader", "Shutdown"}

// Options configure New.
type Options struct {
	// Node is the local node (required).
	Node ops.Node
	// Conns is the local AMQP server; nil reports no connections.
	Conns ops.Connections
	// Stats reads the state machine's counters at scrape time; nil reports
	// none.
	Stats func() ops.StateStats
	// PerQueue adds per-queue series (labels vhost, queue).
	PerQueue bool
	// MaxQueues bounds the per-queue series to the first MaxQueues queues
	// (default 500).
	MaxQueues int
	// MemoryLimit is the memory alarm's vm_memory_high_watermark,
	// reported as rabbitmq_resident_memory_limit_bytes beside the
	// process's resident memory; 0 omits it.
	MemoryLimit uint64
	// Counters reads this node's own AMQP counters (connections and
	// channels opened and closed, confirms); nil omits their series.
	Counters func() ops.NodeCounters
	// Resources reads this node's alarms and free disk space; nil omits
	// their series.
	Resources func() ops.Resources
	// OffHeap reads the bytes of queued messages' records that this
	// process keeps outside the Go heap (queue.OffHeap): the slabs'
	// mapped address space and the record blocks in use. nil omits the
	// series.
	OffHeap func() (mapped, used int64)
	// ClusterName is the rabbitmq_cluster label of rabbitmq_identity_info
	// (default "raftmq", as the management API's cluster name).
	ClusterName string
}

// Metrics is the node's Prometheus collector. Everything but the apply
// latency is read from the node at scrape time.
type Metrics struct {
	o      Options
	reg    *prometheus.Registry
	perObj *prometheus.Registry
	apply  prometheus.Histogram
	rabbit *rabbitDescs

	raftState, term, commit, applied, lastLog, logSize, hasLeader, members *prometheus.Desc
	clock                                                                  *prometheus.Desc
	published, delivered, acked, expired, deadLettered, dropped            *prometheus.Desc
	ready, unacked, readyBytes, overdue, queues, consumers                 *prometheus.Desc
	connections, channels                                                  *prometheus.Desc
	qReady, qUnacked, qConsumers, qReadyBytes                              *prometheus.Desc
	delayed, xDelayed, released, lateness, creditRaised, creditLowered     *prometheus.Desc
	offHeap                                                                *prometheus.Desc
}

// New returns the collector of o.Node registered, with the Go and
// process collectors, in its own registry.
func New(o Options) *Metrics {
	if o.MaxQueues <= 0 {
		o.MaxQueues = 500
	}
	if o.ClusterName == "" {
		o.ClusterName = "raftmq"
	}
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("raftmq_"+name, help, labels, nil)
	}
	m := &Metrics{
		o:      o,
		reg:    prometheus.NewRegistry(),
		perObj: prometheus.NewRegistry(),
		rabbit: newRabbitDescs(),
		apply: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "raftmq_apply_duration_seconds",
			Help:    "Time from proposing a command to this node having applied it.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}),
		raftState:     d("raft_state", "1 for the raft state this node is in.", "state"),
		term:          d("raft_term", "Current raft term."),
		commit:        d("raft_commit_index", "Raft commit index."),
		applied:       d("raft_applied_index", "Raft applied index."),
		lastLog:       d("raft_last_log_index", "Index of the last raft log entry."),
		logSize:       d("raft_log_size_bytes", "Size of the raft log on disk."),
		hasLeader:     d("raft_leader_known", "1 when this node knows a leader."),
		members:       d("cluster_members", "Members of the cluster by health (suspect: the raft leader does not reach it).", "health"),
		clock:         d("log_clock_seconds", "Log time of the last applied entry (unix seconds)."),
		published:     d("messages_published_total", "Messages published."),
		delivered:     d("messages_delivered_total", "Messages delivered to consumers or basic.get."),
		acked:         d("messages_acked_total", "Messages acknowledged."),
		expired:       d("messages_expired_total", "Messages whose TTL ran out."),
		deadLettered:  d("messages_dead_lettered_total", "Messages dead-lettered."),
		dropped:       d("messages_dropped_total", "Messages dropped by max-length overflow, refused by reject-publish queues, or rejected by clients without requeue."),
		ready:         d("messages_ready", "Messages ready for delivery, all queues."),
		unacked:       d("messages_unacked", "Messages delivered and not yet acknowledged, all queues."),
		readyBytes:    d("messages_ready_bytes", "Body bytes of ready messages, all queues."),
		overdue:       d("messages_overdue", "Messages past their deadline not yet expired by the log."),
		queues:        d("queues", "Queues."),
		consumers:     d("consumers", "Consumers."),
		connections:   d("connections", "AMQP connections to this node."),
		channels:      d("channels", "AMQP channels on this node."),
		qReady:        d("queue_messages_ready", "Messages ready in a queue.", "vhost", "queue"),
		qUnacked:      d("queue_messages_unacked", "Messages unacknowledged in a queue.", "vhost", "queue"),
		qConsumers:    d("queue_consumers", "Consumers of a queue.", "vhost", "queue"),
		qReadyBytes:   d("queue_messages_ready_bytes", "Body bytes of ready messages in a queue.", "vhost", "queue"),
		delayed:       d("messages_delayed", "Messages waiting in x-delayed-message exchanges, all exchanges."),
		xDelayed:      d("exchange_messages_delayed", "Messages waiting in an x-delayed-message exchange.", "vhost", "exchange"),
		creditRaised:  d("consumer_credit_raised_total", "Times this node raised a consumer's credit through the log (its look-ahead grew to cover its acks' round trip)."),
		creditLowered: d("consumer_credit_lowered_total", "Times this node lowered a consumer's credit through the log (it held more than it used)."),
		offHeap: d("message_records_offheap_bytes", "Bytes of queued messages' records kept outside the Go heap, in slabs the collector does not scan: "+
			"mapped, the slabs' address space; used, the record blocks in use.", "kind"),
		released: d("delayed_messages_released_total", "Delayed messages released (routed at their due time), as this node applied them since it started."),
		lateness: d("delayed_release_lateness_seconds", "How late delayed messages were released: the release entry's log time minus their due time, "+
			"as this node applied them since it started."),
	}
	// /metrics/per-object is /metrics with RabbitMQ's queue series per
	// queue rather than summed, as RabbitMQ serves the two.
	for _, r := range []struct {
		reg       *prometheus.Registry
		perObject bool
	}{{m.reg, false}, {m.perObj, true}} {
		r.reg.MustRegister(m, m.apply, &rabbitCollector{m: m, perObject: r.perObject},
			collectors.NewGoCollector(),
			collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	return m
}

// Registry is the registry the collector lives in; /metrics serves it.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// PerObjectRegistry is /metrics/per-object's registry: Registry's
// collectors with RabbitMQ's per-queue series in place of its totals.
func (m *Metrics) PerObjectRegistry() *prometheus.Registry { return m.perObj }

// ObserveApply records how long one command took from proposal to apply.
func (m *Metrics) ObserveApply(d time.Duration) { m.apply.Observe(d.Seconds()) }

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		m.raftState, m.term, m.commit, m.applied, m.lastLog, m.logSize, m.hasLeader, m.members, m.clock,
		m.published, m.delivered, m.acked, m.expired, m.deadLettered, m.dropped,
		m.ready, m.unacked, m.readyBytes, m.overdue, m.queues, m.consumers,
		m.connections, m.channels, m.qReady, m.qUnacked, m.qConsumers, m.qReadyBytes,
		m.delayed, m.xDelayed, m.released, m.lateness, m.creditRaised, m.creditLowered,
	} {
		ch <- d
	}
}

// Collect implements prometheus.Collector: it reads the node at scrape time.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v uint64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
	b := func(v bool) float64 {
		if v {
			return 1
		}
		return 0
	}
	n := m.o.Node

	rs := n.RaftStats()
	for _, s := range raftStates {
		gauge(m.raftState, b(rs.State == s), s)
	}
	gauge(m.term, float64(rs.Term))
	gauge(m.commit, float64(rs.CommitIndex))
	gauge(m.applied, float64(rs.AppliedIndex))
	gauge(m.lastLog, float64(rs.LastLogIndex))
	if rs.LogSizeBytes > 0 {
		gauge(m.logSize, float64(rs.LogSizeBytes))
	}
	id, _ := n.Leader()
	gauge(m.hasLeader, b(id != ""))
	health := map[string]int{}
	for _, mem := range n.Members() {
		h := mem.GetHealth()
		if h == "" {
			h = "unknown"
		}
		health[h]++
	}
	for _, h := range []string{"alive", "suspect", "dead", "left", "unknown"} {
		if c, ok := health[h]; ok || h == "alive" {
			gauge(m.members, float64(c), h)
		}
	}

	if m.o.Stats != nil {
		s := m.o.Stats()
		counter(m.published, s.Published)
		counter(m.delivered, s.Delivered)
		counter(m.acked, s.Acked)
		counter(m.expired, s.Expired)
		counter(m.deadLettered, s.DeadLettered)
		counter(m.dropped, s.Dropped)
		gauge(m.ready, float64(s.Ready))
		gauge(m.unacked, float64(s.Unacked))
		gauge(m.readyBytes, float64(s.ReadyBytes))
		gauge(m.overdue, float64(s.Overdue))
		gauge(m.queues, float64(s.Queues))
		gauge(m.consumers, float64(s.Consumers))
		gauge(m.delayed, float64(s.Delayed))
		counter(m.released, s.Releases.Released)
		ch <- latenessHistogram(m.lateness, s.Releases)
	}
	if m.o.OffHeap != nil {
		mapped, used := m.o.OffHeap()
		gauge(m.offHeap, float64(mapped), "mapped")
		gauge(m.offHeap, float64(used), "used")
	}

	var conns, chans int
	if m.o.Conns != nil {
		for _, c := range m.o.Conns.List() {
			conns++
			chans += int(c.GetChannels())
		}
	}
	gauge(m.connections, float64(conns))
	gauge(m.channels, float64(chans))
	if m.o.Counters != nil {
		nc := m.o.Counters()
		counter(m.creditRaised, nc.CreditRaised)
		counter(m.creditLowered, nc.CreditLowered)
	}

	var clock int64
	type qrow struct {
		vhost, name            string
		ready, unacked, rbytes uint64
		consumers              uint32
	}
	var rows []qrow
	type xrow struct {
		vhost, name string
		delayed     uint64
	}
	var xrows []xrow
	n.View(func(st ops.State) {
		clock = st.Clock()
		for _, x := range st.Exchanges("") {
			if x.GetType() == fsm.DelayedExchangeType {
				xrows = append(xrows, xrow{x.GetVhost(), x.GetName(), x.GetMessagesDelayed()})
			}
		}
		if !m.o.PerQueue {
			return
		}
		for i, q := range st.Queues("") {
			if i >= m.o.MaxQueues {
				break
			}
			rows = append(rows, qrow{q.GetVhost(), q.GetName(), q.GetReady(), q.GetUnacked(), q.GetReadyBytes(), q.GetConsumers()})
		}
	})
	gauge(m.clock, float64(clock)/1000)
	for _, r := range rows {
		gauge(m.qReady, float64(r.ready), r.vhost, r.name)
		gauge(m.qUnacked, float64(r.unacked), r.vhost, r.name)
		gauge(m.qConsumers, float64(r.consumers), r.vhost, r.name)
		gauge(m.qReadyBytes, float64(r.rbytes), r.vhost, r.name)
	}
	for _, x := range xrows {
		gauge(m.xDelayed, float64(x.delayed), x.vhost, x.name)
	}
}

// latenessHistogram is the release lateness counts as a histogram in
// seconds: the state machine counts them per bucket, Prometheus wants
// each bucket's count to include the buckets below.
func latenessHistogram(d *prometheus.Desc, r fsm.ReleaseStats) prometheus.Metric {
	buckets := make(map[float64]uint64, len(fsm.ReleaseLatenessBucketsMs))
	var cum uint64
	for i, le := range fsm.ReleaseLatenessBucketsMs {
		cum += r.Late[i]
		buckets[float64(le)/1000] = cum
	}
	return prometheus.MustNewConstHistogram(d, r.Released, float64(r.LateSumMs)/1000, buckets)
}
