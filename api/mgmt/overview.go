package mgmt

import (
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"github.com/raftmq/raftmq/api/ops"
	"github.com/raftmq/raftmq/fsm"
)

var exchangeTypes = []map[string]any{
	{"name": "direct", "description": "AMQP direct exchange, as per the AMQP specification", "enabled": true},
	{"name": "fanout", "description": "AMQP fanout exchange, as per the AMQP specification", "enabled": true},
	{"name": "headers", "description": "AMQP headers exchange, as per the AMQP specification", "enabled": true},
	{"name": "topic", "description": "AMQP topic exchange, as per the AMQP specification", "enabled": true},
	{"name": fsm.ConsistentHashType, "description": "Consistent hashing exchange: one bound destination per message, by weight", "enabled": true},
	{"name": fsm.ModulusHashType, "description": "Modulus hashing exchange: one binding per message, by the hash of its routing keys", "enabled": true},
	{"name": fsm.LocalRandomType, "description": "Routes each message to one bound queue, chosen at random", "enabled": true},
}

func rate() map[string]float64 { return map[string]float64{"rate": 0.0} }

func (q *req) overview() error {
	var (
		queues, exchanges, consumers int
		ready, unacked               uint64
		stats                        fsm.Stats
	)
	q.view(func(s ops.State) {
		for _, x := range s.Queues("") {
			if q.user.seesVhost(x.GetVhost()) {
				queues++
				ready += x.GetReady()
				unacked += x.GetUnacked()
				consumers += int(x.GetConsumers())
			}
		}
		for _, x := range s.Exchanges("") {
			if q.user.seesVhost(x.GetVhost()) {
				exchanges++
			}
		}
		stats = s.Stats()
	})
	conns := q.connectionList()
	channels := 0
	for _, c := range conns {
		channels += int(c.GetChannels())
	}
	self := q.m.node.NodeID()
	var listeners []map[string]any
	for _, mb := range q.m.node.Members() {
		if host, port, ok := splitHostPort(mb.GetAmqpAddr()); ok {
			listeners = append(listeners, map[string]any{"node": mb.GetId(), "protocol": "amqp", "ip_address": host, "port": port, "socket_opts": map[string]any{}})
		}
	}
	if host, port, ok := splitHostPort(q.m.addr); ok {
		listeners = append(listeners, map[string]any{"node": self, "protocol": "http", "ip_address": host, "port": port, "socket_opts": map[string]any{}})
	}
	out := map[string]any{
		"management_version":  ops.CompatVersion,
		"rabbitmq_version":    ops.CompatVersion,
		"product_name":        "raftmq",
		"product_version":     ops.ProductVersion(),
		"rates_mode":          "none",
		"cluster_name":        q.m.cluster,
		"node":                self,
		"erlang_version":      runtime.Version(),
		"erlang_full_version": runtime.Version(),
		"disable_stats":       false,
		"enable_queue_totals": true,
		"exchange_types":      exchangeTypes,
		"listeners":           nonNil(listeners),
		"contexts": []any{map[string]any{"node": self, "description": "RabbitMQ Management", "path": "/", "port": portOf(q.m.addr),
			"ssl_opts": []any{}, "cowboy_opts": ""}},
		"statistics_db_event_queue": 0,
		"object_totals": map[string]int{
			"queues": queues, "exchanges": exchanges, "consumers": consumers, "connections": len(conns), "channels": channels,
		},
		"queue_totals": q.m.rates.details(map[string]uint64{"messages": ready + unacked, "messages_ready": ready,
			"messages_unacknowledged": unacked}, nil, q.lenRange, true, lengthKeys...),
	}
	// Counts as they are now, rates from the last two samples; confirm is
	// this node's publishers' alone (the log does not see confirms).
	now := globalCounts(stats, q.m.ops.NodeCounters())
	ms := q.m.rates.details(now, nil, q.msgRange, false, globalRateKeys...)
	// raftmq reads no message from disk outside its log: disk_reads and
	// disk_writes stay 0.
	ms["disk_reads"], ms["disk_reads_details"], ms["disk_writes"], ms["disk_writes_details"] = 0, rate(), 0, rate()
	out["message_stats"] = ms
	q.ok(out)
	return nil
}

func splitHostPort(addr string) (string, int, bool) {
	i := strings.LastIndex(addr, ":")
	if i < 0 {
		return "", 0, false
	}
	p, err := strconv.Atoi(addr[i+1:])
	if err != nil {
		return "", 0, false
	}
	host := strings.Trim(addr[:i], "[]")
	if host == "" {
		host = "::"
	}
	return host, p, true
}

func portOf(addr string) string {
	_, p, ok := splitHostPort(addr)
	if !ok {
		return ""
	}
	return strconv.Itoa(p)
}

func (q *req) nodes() error {
	if q.r.Method != http.MethodGet {
		return methodNotAllowed()
	}
	if !q.user.monitor() {
		return notAuthorised("Not monitor user")
	}
	statuses := q.m.ops.NodeStatuses(q.ctx)
	var out []map[string]any
	for _, mb := range q.m.node.Members() {
		n := map[string]any{
			"name": mb.GetId(), "type": "disc", "running": mb.GetHealth() == "" || mb.GetHealth() == "alive",
			"partitions": []any{}, "exchange_types": exchangeTypes, "rates_mode": "none",
			"mem_alarm": false, "disk_free_alarm": false, "being_drained": false,
			// raftmq's own: the node's place in the raft cluster.
			"raft_suffrage": mb.GetSuffrage(), "raft_leader": mb.GetLeader(), "health": mb.GetHealth(),
			"amqp_addr": mb.GetAmqpAddr(), "grpc_addr": mb.GetGrpcAddr(), "raft_addr": mb.GetRaftAddr(),
		}
		if st, ok := statuses[mb.GetId()]; ok {
			// The node's own answer (asked over gRPC for the others); a
			// node that did not answer keeps the defaults above and has
			// no figures.
			n["mem_alarm"] = slices.Contains(st.GetAlarms(), "memory")
			n["disk_free_alarm"] = slices.Contains(st.GetAlarms(), "disk")
			n["disk_free"], n["disk_free_limit"] = st.GetDiskFree(), st.GetDiskFreeLimit()
			n["mem_used"], n["mem_limit"] = st.GetMemUsed(), st.GetMemLimit()
			if st.GetFdTotal() > 0 {
				n["fd_used"], n["fd_total"] = st.GetFdUsed(), st.GetFdTotal()
			}
			n["uptime"] = st.GetUptimeMs()
			n["os_pid"] = strconv.FormatInt(st.GetOsPid(), 10)
			n["processors"] = st.GetProcessors()
			n["proc_used"] = st.GetGoroutines()
			n["raft_state"] = st.GetRaftState()
			n["raft_term"] = st.GetTerm()
			n["raft_commit_index"] = st.GetCommitIndex()
			n["raft_applied_index"] = st.GetAppliedIndex()
		}
		out = append(out, n)
	}
	slices.SortFunc(out, func(a, b map[string]any) int { return strings.Compare(a["name"].(string), b["name"].(string)) })
	if name := q.arg("node"); name != "" {
		for _, n := range out {
			if n["name"] == name {
				q.ok(n)
				return nil
			}
		}
		return notFound()
	}
	q.list(out)
	return nil
}
