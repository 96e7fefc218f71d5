package metrics

import (
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/raftmq/raftmq/api/ops"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/internal/procstat"
)

// rabbitCollector serves the names, label sets and types of RabbitMQ's
// rabbitmq_prometheus plugin, so dashboards and alerts written for RabbitMQ
// (Grafana's "RabbitMQ-Overview") read raftmq unchanged.
//
// raftmq's queues and counters are the replicated state, the same on every
// node, where RabbitMQ's are each node's own. Series read from that state
// are therefore reported by the leader only: a dashboard's sum() over the
// cluster's nodes then counts them once. Series about the node itself
// (identity, build, connections, channels, its raft log) come from every
// node.
type rabbitCollector struct {
	m *Metrics
	// perObject serves the per-queue series (labels vhost, queue) in place
	// of the aggregated ones, as RabbitMQ's /metrics/per-object does.
	perObject bool
}

// rabbitDescs are the rabbitmq_* descriptors, shared by both modes.
type rabbitDescs struct {
	identity, build                                         *prometheus.Desc
	connections, channels, queues, consumers                *prometheus.Desc
	qReady, qUnacked, qMessages, qReadyBytes, qConsumers    *prometheus.Desc
	qPublished                                              *prometheus.Desc
	pqReady, pqUnacked, pqMessages, pqReadyBytes, pqConsume *prometheus.Desc
	chPublished, chDeliveredAck, chAcked, chConsumers       *prometheus.Desc
	gReceived, gRouted, gDelivered, gAcked                  *prometheus.Desc
	// dead is rabbitmq_global_messages_dead_lettered_<reason>_total, in
	// fsm.DeathReasons' order.
	dead                                           []*prometheus.Desc
	raftTerm, raftCommit, raftApplied, raftWritten *prometheus.Desc
	// groups are RabbitMQ 4.2's names of the Ra metrics, one series per
	// Raft group this node is a member of.
	groups                             groupDescs
	memUsed, memLimit, openFDs, maxFDs *prometheus.Desc
	// This node's own counts and alarms (Options.Counters and
	// Resources).
	connOpened, connClosed, chOpened, chClosed, gConfirmed, chConfirmed *prometheus.Desc
	diskFree, diskLimit, diskAlarm, memAlarm                            *prometheus.Desc
	unroutableReturned, unroutableDropped, getEmpty, queuesDeclared     *prometheus.Desc
	// unsplit are RabbitMQ's other delivery counters, by ack mode and
	// basic.get; raftmq's log counts every delivery in one.
	unsplit []*prometheus.Desc
}

func newRabbitDescs() *rabbitDescs {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("rabbitmq_"+name, help, labels, nil)
	}
	q := []string{"vhost", "queue"}
	// The global counters carry RabbitMQ's protocol label: every raftmq
	// client speaks AMQP 0-9-1.
	p := "protocol"
	return &rabbitDescs{
		identity: d("identity_info", "RabbitMQ node & cluster identity info",
			"rabbitmq_node", "rabbitmq_cluster", "rabbitmq_cluster_permanent_id"),
		build: d("build_info", "RabbitMQ & Erlang/OTP version info",
			"rabbitmq_version", "prometheus_plugin_version", "prometheus_client_version", "erlang_version",
			"product_name", "product_version"),
		connections:    d("connections", "ops.Connections currently open"),
		channels:       d("channels", "Channels currently open"),
		queues:         d("queues", "Queues available"),
		consumers:      d("consumers", "Consumers currently connected"),
		qReady:         d("queue_messages_ready", "Messages ready to be delivered to consumers"),
		qUnacked:       d("queue_messages_unacked", "Messages delivered to consumers but not yet acknowledged"),
		qMessages:      d("queue_messages", "Sum of ready and unacknowledged messages - total queue depth"),
		qReadyBytes:    d("queue_messages_ready_bytes", "Size in bytes of ready messages"),
		qConsumers:     d("queue_consumers", "Consumers on a queue"),
		qPublished:     d("queue_messages_published_total", "Total number of messages published to queues"),
		pqReady:        d("queue_messages_ready", "Messages ready to be delivered to consumers", q...),
		pqUnacked:      d("queue_messages_unacked", "Messages delivered to consumers but not yet acknowledged", q...),
		pqMessages:     d("queue_messages", "Sum of ready and unacknowledged messages - total queue depth", q...),
		pqReadyBytes:   d("queue_messages_ready_bytes", "Size in bytes of ready messages", q...),
		pqConsume:      d("queue_consumers", "Consumers on a queue", q...),
		chPublished:    d("channel_messages_published_total", "Total number of messages published into an exchange on a channel"),
		chDeliveredAck: d("channel_messages_delivered_ack_total", "Total number of messages delivered to consumers in manual acknowledgement mode"),
		chAcked:        d("channel_messages_acked_total", "Total number of messages acknowledged by consumers"),
		chConsumers:    d("channel_consumers", "Consumers on channels"),
		gReceived:      d("global_messages_received_total", "Total number of messages received from publishers", p),
		gRouted:        d("global_messages_routed_total", "Total number of messages routed to queues or streams", p),
		gDelivered:     d("global_messages_delivered_total", "Total number of messages delivered to consumers", p),
		gAcked:         d("global_messages_acknowledged_total", "Total number of messages acknowledged by consumers", p),
		raftTerm:       d("raft_term_total", "Current Raft term number"),
		raftCommit:     d("raft_log_commit_index", "Raft log commit index"),
		raftApplied:    d("raft_log_last_applied_index", "Raft log last applied index"),
		raftWritten:    d("raft_log_last_written_index", "Raft log last written index"),
		groups:         newGroupDescs(d),
		unsplit: []*prometheus.Desc{
			d("channel_messages_delivered_total", "Total number of messages delivered to consumers in automatic acknowledgement mode"),
			d("channel_messages_redelivered_total", "Total number of messages redelivered to consumers"),
			d("channel_get_total", "Total number of messages fetched with basic.get in automatic acknowledgement mode"),
			d("channel_get_ack_total", "Total number of messages fetched with basic.get in manual acknowledgement mode"),
		},
		connOpened:         d("connections_opened_total", "Total number of connections opened"),
		connClosed:         d("connections_closed_total", "Total number of connections closed or terminated"),
		chOpened:           d("channels_opened_total", "Total number of channels opened"),
		chClosed:           d("channels_closed_total", "Total number of channels closed"),
		gConfirmed:         d("global_messages_confirmed_total", "Total number of messages confirmed to publishers", p),
		chConfirmed:        d("channel_messages_confirmed_total", "Total number of messages published into an exchange and confirmed on the channel"),
		unroutableReturned: d("channel_messages_unroutable_returned_total", "Total number of messages published as mandatory into an exchange and returned to the publisher as unroutable"),
		unroutableDropped:  d("channel_messages_unroutable_dropped_total", "Total number of messages published as non-mandatory into an exchange and dropped as unroutable"),
		getEmpty:           d("channel_get_empty_total", "Total number of times basic.get operations fetched no message"),
		queuesDeclared:     d("queues_declared_total", "Total number of queues declared"),
		diskFree:           d("disk_space_available_bytes", "Disk space available in bytes"),
		diskLimit:          d("disk_space_available_limit_bytes", "Free disk space low watermark in bytes"),
		diskAlarm:          d("alarms_free_disk_space_watermark", "is 1 if free disk space watermark alarm is in effect"),
		memAlarm:           d("alarms_memory_used_watermark", "is 1 if VM memory watermark alarm is in effect"),
		dead: func() []*prometheus.Desc {
			var out []*prometheus.Desc
			for _, reason := range fsm.DeathReasons {
				out = append(out, d("global_messages_dead_lettered_"+reason+"_total",
					"Total number of messages dead-lettered due to "+reason, "queue_type", "dead_letter_strategy"))
			}
			return out
		}(),
		memUsed:  d("process_resident_memory_bytes", "Memory used in bytes"),
		memLimit: d("resident_memory_limit_bytes", "Memory high watermark in bytes"),
		openFDs:  d("process_open_fds", "Open file descriptors"),
		maxFDs:   d("process_max_fds", "Open file descriptors limit"),
	}
}

// Describe implements prometheus.Collector.
func (c *rabbitCollector) Describe(ch chan<- *prometheus.Desc) {
	r := c.m.rabbit
	common := []*prometheus.Desc{r.identity, r.build, r.connections, r.channels, r.queues, r.consumers,
		r.qPublished, r.chPublished, r.chDeliveredAck, r.chAcked, r.chConsumers,
		r.gReceived, r.gRouted, r.gDelivered, r.gAcked,
		r.raftTerm, r.raftCommit, r.raftApplied, r.raftWritten,
		r.memUsed, r.memLimit, r.openFDs, r.maxFDs,
		r.connOpened, r.connClosed, r.chOpened, r.chClosed, r.gConfirmed, r.chConfirmed,
		r.diskFree, r.diskLimit, r.diskAlarm, r.memAlarm,
		r.unroutableReturned, r.unroutableDropped, r.getEmpty, r.queuesDeclared}
	common = append(common, r.unsplit...)
	common = append(common, r.dead...)
	common = append(common, r.groups.all()...)
	if c.perObject {
		common = append(common, r.pqReady, r.pqUnacked, r.pqMessages, r.pqReadyBytes, r.pqConsume)
	} else {
		common = append(common, r.qReady, r.qUnacked, r.qMessages, r.qReadyBytes, r.qConsumers)
	}
	for _, d := range common {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *rabbitCollector) Collect(ch chan<- prometheus.Metric) {
	r, n, o := c.m.rabbit, c.m.o.Node, c.m.o
	emit := func(d *prometheus.Desc, t prometheus.ValueType, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, t, v, labels...)
	}
	gauge := func(d *prometheus.Desc, v uint64, labels ...string) {
		emit(d, prometheus.GaugeValue, float64(v), labels...)
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		emit(d, prometheus.CounterValue, float64(v), labels...)
	}

	// RabbitMQ types identity_info and build_info untyped.
	emit(r.identity, prometheus.UntypedValue, 1, n.NodeID(), o.ClusterName, ops.ClusterPermanentID(o.ClusterName))
	emit(r.build, prometheus.UntypedValue, 1, ops.CompatVersion, ops.CompatVersion, clientGolangVersion(), runtime.Version(),
		"raftmq", ops.ProductVersion())

	var conns, chans uint64
	if o.Conns != nil {
		for _, cn := range o.Conns.List() {
			conns++
			chans += uint64(cn.GetChannels())
		}
	}
	gauge(r.connections, conns)
	gauge(r.channels, chans)

	// Each node has its own raft log: every node reports it.
	rs := n.RaftStats()
	counter(r.raftTerm, rs.Term)
	gauge(r.raftCommit, rs.CommitIndex)
	gauge(r.raftApplied, rs.AppliedIndex)
	gauge(r.raftWritten, rs.LastLogIndex)
	r.groups.collect(ch, n.Groups())

	// The process's resident memory, as RabbitMQ reports its own (not
	// the Go heap, a fraction of it): the figure the memory alarm
	// compares with the limit, at its last check when there is one.
	var res ops.Resources
	if o.Resources != nil {
		res = o.Resources()
	}
	gauge(r.memUsed, res.MemoryUsed())
	if o.MemoryLimit > 0 {
		gauge(r.memLimit, o.MemoryLimit)
	}
	if open, max, ok := procstat.FileDescriptors(); ok {
		gauge(r.openFDs, open)
		gauge(r.maxFDs, max)
	}
	// Connections, channels, confirms, unroutable publishes, empty gets
	// and queue declarations are each node's own (the node that served
	// the client), as in RabbitMQ: every node reports its count.
	if o.Counters != nil {
		nc := o.Counters()
		counter(r.connOpened, nc.ConnectionsOpened)
		counter(r.connClosed, nc.ConnectionsClosed)
		counter(r.chOpened, nc.ChannelsOpened)
		counter(r.chClosed, nc.ChannelsClosed)
		counter(r.gConfirmed, nc.Confirmed, "amqp091")
		counter(r.chConfirmed, nc.Confirmed)
		counter(r.unroutableReturned, nc.Returned)
		counter(r.unroutableDropped, nc.Dropped)
		counter(r.getEmpty, nc.GetEmpty)
		counter(r.queuesDeclared, nc.QueuesDeclared)
	}
	if o.Resources != nil {
		gauge(r.diskFree, res.DiskFree)
		gauge(r.diskLimit, res.DiskFreeLimit)
		emit(r.diskAlarm, prometheus.UntypedValue, boolValue(res.DiskAlarm))
		emit(r.memAlarm, prometheus.UntypedValue, boolValue(res.MemAlarm))
	}

	// Cluster-wide state from the leader only (see rabbitCollector).
	if !n.IsLeader() || o.Stats == nil {
		return
	}
	s := o.Stats()
	gauge(r.queues, s.Queues)
	gauge(r.consumers, s.Consumers)
	gauge(r.chConsumers, s.Consumers)
	counter(r.chPublished, s.Published)
	counter(r.qPublished, s.Routed)
	counter(r.chDeliveredAck, s.Delivered)
	counter(r.chAcked, s.Acked)
	// Every delivery is in delivered_ack_total; the other four are served
	// as 0 because RabbitMQ-Overview's outgoing rate adds all five, and a
	// sum with one operand missing has no value at all.
	for _, d := range r.unsplit {
		counter(d, 0)
	}
	counter(r.gReceived, s.Published, "amqp091")
	counter(r.gRouted, s.Routed, "amqp091")
	counter(r.gDelivered, s.Delivered, "amqp091")
	counter(r.gAcked, s.Acked, "amqp091")
	// Every raftmq queue is replicated through the log, as a quorum
	// queue is; a death without a dead-letter exchange is "disabled",
	// one with it "at_most_once" (no publisher confirms between queues).
	for i, d := range r.dead {
		counter(d, s.Deaths[i][0], "rabbit_quorum_queue", "disabled")
		counter(d, s.Deaths[i][1], "rabbit_quorum_queue", "at_most_once")
	}
	if !c.perObject {
		gauge(r.qReady, s.Ready)
		gauge(r.qUnacked, s.Unacked)
		gauge(r.qMessages, s.Ready+s.Unacked)
		gauge(r.qReadyBytes, s.ReadyBytes)
		gauge(r.qConsumers, s.Consumers)
		return
	}
	type row struct {
		vhost, name            string
		ready, unacked, rbytes uint64
		consumers              uint32
	}
	var rows []row
	n.View(func(st ops.State) {
		for _, q := range st.Queues("") {
			rows = append(rows, row{q.GetVhost(), q.GetName(), q.GetReady(), q.GetUnacked(), q.GetReadyBytes(), q.GetConsumers()})
		}
	})
	for _, q := range rows {
		gauge(r.pqReady, q.ready, q.vhost, q.name)
		gauge(r.pqUnacked, q.unacked, q.vhost, q.name)
		gauge(r.pqMessages, q.ready+q.unacked, q.vhost, q.name)
		gauge(r.pqReadyBytes, q.rbytes, q.vhost, q.name)
		gauge(r.pqConsume, uint64(q.consumers), q.vhost, q.name)
	}
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// clientGolangVersion is the version of the Prometheus client library in
// the build, reported where RabbitMQ reports its Erlang client's.
func clientGolangVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/prometheus/client_golang" {
				return d.Version
			}
		}
	}
	return "unknown"
}

// groupDescs are the rabbitmq_raft_* series as RabbitMQ 4.2 names them
// (Ra's counter names), which its RabbitMQ-Quorum-Queues-Raft dashboard
// reads. RabbitMQ labels them by queue, each quorum queue being a Ra
// cluster; raftmq's queues share their Raft group, so the series are per
// group (label raft_group): per queue they would repeat the group's
// figures, and the dashboard's sums over a node's series would count the
// group's entries once per queue.
type groupDescs struct {
	term, commit, applied, written, snapshot, latency, segments *prometheus.Desc
	// maxLatency and maxSegments are the aggregated endpoint's maxima over
	// the groups (label ra_system="quorum_queues", as RabbitMQ's).
	maxLatency, maxSegments *prometheus.Desc
}

func newGroupDescs(d func(name, help string, labels ...string) *prometheus.Desc) groupDescs {
	g := "raft_group"
	return groupDescs{
		term:        d("raft_term", "The current term.", g),
		commit:      d("raft_commit_index", "The current commit index.", g),
		applied:     d("raft_last_applied", "The last applied index. Can go backwards if a ra server is restarted.", g),
		written:     d("raft_last_written_index", "The last fully written and fsynced index of the log.", g),
		snapshot:    d("raft_snapshot_index", "The current snapshot index.", g),
		latency:     d("raft_commit_latency_seconds", "Approximate time taken from an entry being written to the log until it is committed.", g),
		segments:    d("raft_num_segments", "The number of non-empty segment files.", g),
		maxLatency:  d("raft_max_commit_latency_seconds", "Approximate time taken from an entry being written to the log until it is committed.", "ra_system"),
		maxSegments: d("raft_max_num_segments", "The number of non-empty segment files.", "ra_system"),
	}
}

func (g groupDescs) all() []*prometheus.Desc {
	return []*prometheus.Desc{g.term, g.commit, g.applied, g.written, g.snapshot, g.latency, g.segments, g.maxLatency, g.maxSegments}
}

// collect emits each group's series, as this node's member of it sees it
// (every node reports its own members, as RabbitMQ's do).
func (g groupDescs) collect(ch chan<- prometheus.Metric, groups []ops.GroupStatus) {
	emit := func(d *prometheus.Desc, t prometheus.ValueType, v float64, label string) {
		ch <- prometheus.MustNewConstMetric(d, t, v, label)
	}
	var maxLatency float64
	maxSegments := 0
	for _, gs := range groups {
		if gs.Far {
			// Another node's log: its members report it.
			continue
		}
		latency := gs.CommitLatency.Seconds()
		emit(g.term, prometheus.CounterValue, float64(gs.Term), gs.Name)
		emit(g.commit, prometheus.CounterValue, float64(gs.CommitIndex), gs.Name)
		emit(g.applied, prometheus.GaugeValue, float64(gs.LastApplied), gs.Name)
		emit(g.written, prometheus.CounterValue, float64(gs.LastLogIndex), gs.Name)
		emit(g.snapshot, prometheus.CounterValue, float64(gs.SnapshotIndex), gs.Name)
		emit(g.latency, prometheus.GaugeValue, latency, gs.Name)
		emit(g.segments, prometheus.GaugeValue, float64(gs.Segments), gs.Name)
		maxLatency = max(maxLatency, latency)
		maxSegments = max(maxSegments, gs.Segments)
	}
	if len(groups) > 0 {
		emit(g.maxLatency, prometheus.GaugeValue, maxLatency, "quorum_queues")
		emit(g.maxSegments, prometheus.GaugeValue, float64(maxSegments), "quorum_queues")
	}
}
