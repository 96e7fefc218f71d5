package api

import (
	"encoding/base64"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/raftmq/raftmq/api/ops"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// route dispatches on the first path segment.
func (q *req) route() error {
	switch q.seg(0) {
	case "overview":
		return q.get(q.overview)
	case "cluster-name":
		return q.get(func() error { q.ok(map[string]string{"name": q.m.cluster}); return nil })
	case "whoami":
		return q.get(func() error { q.ok(map[string]any{"name": q.user.name, "tags": nonNil(q.user.tags)}); return nil })
	case "extensions":
		return q.get(func() error { q.ok([]any{}); return nil })
	case "nodes":
		return q.nodes()
	case "vhosts":
		return q.vhosts()
	case "users":
		return q.users()
	case "permissions":
		return q.permissions()
	case "queues":
		return q.queues()
	case "exchanges":
		return q.exchanges()
	case "bindings":
		return q.bindings()
	case "connections":
		return q.connections()
	case "channels":
		return q.get(q.channels)
	case "consumers":
		return q.get(q.consumers)
	case "parameters":
		return q.parameters()
	case "global-parameters":
		return q.globalParameters()
	case "vhost-limits":
		return q.vhostLimits()
	case "topic-permissions":
		return q.topicPermissions()
	case "policies":
		return q.policies(false)
	case "operator-policies":
		return q.policies(true)
	case "health":
		return q.health()
	case "aliveness-test":
		return q.aliveness()
	case "definitions":
		return q.definitions()
	}
	return notFound()
}

func (q *req) get(fn func() error) error {
	if q.r.Method != http.MethodGet && q.r.Method != http.MethodHead {
		return methodNotAllowed()
	}
	return fn()
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// view runs fn on the applied state.
func (q *req) view(fn func(ops.State)) { q.m.node.View(fn) }

// vhostScope is the vhost a listing is limited to: segment 1 when the path
// has one (checked as vhostArg does), "" for every vhost the user sees.
func (q *req) vhostScope() (string, error) {
	if len(q.segs) < 2 {
		return "", nil
	}
	return q.vhostArg(1)
}

// vhostArg returns the vhost of segment i, checking that it exists and that
// the user sees it: 404 otherwise, as RabbitMQ answers for both.
func (q *req) vhostArg(i int) (string, error) {
	v := q.seg(i)
	exists := false
	q.view(func(s ops.State) {
		for _, x := range s.Vhosts() {
			if x.GetName() == v {
				exists = true
			}
		}
	})
	if !exists {
		return "", notFound()
	}
	if !q.user.seesVhost(v) {
		return "", notAuthorised("Not authorised to access virtual host")
	}
	return v, nil
}

// ---- overview and nodes ----

var exchangeTypes = []map[string]any{
	{"name": "direct", "description": "AMQP direct exchange, as per the AMQP specification", "enabled": true},
	{"name": "fanout", "description": "AMQP fanout exchange, as per the AMQP specification", "enabled": true},
	{"name": "headers", "description": "AMQP headers exchange, as per the AMQP specification", "enabled": true},
	{"name": "topic", "description": "AMQP topic exchange, as per the AMQP specification", "enabled": true},
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
		"queue_totals": map[string]any{
			"messages": ready + unacked, "messages_details": rate(),
			"messages_ready": ready, "messages_ready_details": rate(),
			"messages_unacknowledged": unacked, "messages_unacknowledged_details": rate(),
		},
	}
	// Counts as they are now, rates from the last two samples; confirm is
	// this node's publishers' alone (the log does not see confirms).
	now := globalCounts(stats, q.m.ops.NodeCounters())
	ms := q.m.rates.stats(now, func(s *counterSample) map[string]uint64 { return s.global }, globalRateKeys...)
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
	self := q.m.node.NodeID()
	rs := q.m.node.RaftStats()
	var mem runtime.MemStats
	runtime.ReadMemStats(&mem)
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
			// The node's own answer; a node that did not answer keeps the
			// defaults above.
			n["mem_alarm"] = slices.Contains(st.GetAlarms(), "memory")
			n["disk_free_alarm"] = slices.Contains(st.GetAlarms(), "disk")
			n["disk_free"], n["disk_free_limit"] = st.GetDiskFree(), st.GetDiskFreeLimit()
		}
		if mb.GetId() == self {
			n["os_pid"] = strconv.Itoa(os.Getpid())
			n["uptime"] = time.Since(q.m.started).Milliseconds()
			n["mem_used"] = mem.Sys
			n["processors"] = runtime.NumCPU()
			n["proc_used"] = runtime.NumGoroutine()
			n["raft_state"] = rs.State
			n["raft_term"] = rs.Term
			n["raft_commit_index"] = rs.CommitIndex
			n["raft_applied_index"] = rs.AppliedIndex
		}
		out = append(out, n)
	}
	slices.SortFunc(out, func(a, b map[string]any) int { return strings.Compare(a["name"].(string), b["name"].(string)) })
	if name := q.seg(1); name != "" {
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

// ---- vhosts ----

func (q *req) vhostJSON(s ops.State, v *proto.VhostInfo) map[string]any {
	var ready, unacked uint64
	for _, x := range s.Queues(v.GetName()) {
		ready += x.GetReady()
		unacked += x.GetUnacked()
	}
	cs := map[string]string{}
	for _, mb := range q.m.node.Members() {
		st := "running"
		if h := mb.GetHealth(); h != "" && h != "alive" {
			st = "stopped"
		}
		cs[mb.GetId()] = st
	}
	return map[string]any{
		"name": v.GetName(), "description": v.GetDescription(), "tags": []string{}, "tracing": false,
		"default_queue_type": "undefined", "cluster_state": cs,
		"metadata": map[string]any{"description": v.GetDescription(), "tags": []string{}},
		"messages": ready + unacked, "messages_details": rate(),
		"messages_ready": ready, "messages_ready_details": rate(),
		"messages_unacknowledged": unacked, "messages_unacknowledged_details": rate(),
	}
}

func (q *req) vhosts() error {
	name := q.seg(1)
	if len(q.segs) == 3 && q.seg(2) == "topic-permissions" {
		if !q.user.admin() {
			return notAuthorised("Not administrator user")
		}
		return q.get(func() error { q.list(nil); return nil })
	}
	if len(q.segs) == 3 && q.seg(2) == "permissions" {
		if !q.user.admin() {
			return notAuthorised("Not administrator user")
		}
		return q.get(func() error {
			return q.listPermissions(func(p *proto.PermissionInfo) bool { return p.GetVhost() == name })
		})
	}
	switch q.r.Method {
	case http.MethodGet:
		var out []map[string]any
		q.view(func(s ops.State) {
			for _, v := range s.Vhosts() {
				if q.user.seesVhost(v.GetName()) && (name == "" || v.GetName() == name) {
					out = append(out, q.vhostJSON(s, v))
				}
			}
		})
		if name != "" {
			if len(out) == 0 {
				return notFound()
			}
			q.ok(out[0])
			return nil
		}
		q.list(out)
		return nil
	case http.MethodPut:
		if !q.user.admin() {
			return notAuthorised("Not administrator user")
		}
		b, err := q.body()
		if err != nil {
			return err
		}
		desc, err := fieldString(b, "description", "")
		if err != nil {
			return err
		}
		existed := false
		q.view(func(s ops.State) {
			for _, v := range s.Vhosts() {
				existed = existed || v.GetName() == name
			}
		})
		if _, err := q.m.ops.AddVhost(q.ctx, &proto.AddVhostRequest{Name: name, Description: desc}); err != nil {
			return err
		}
		q.created(existed)
		return nil
	case http.MethodDelete:
		if !q.user.admin() {
			return notAuthorised("Not administrator user")
		}
		if _, err := q.m.ops.DeleteVhost(q.ctx, &proto.DeleteVhostRequest{Name: name}); err != nil {
			return err
		}
		q.noContent()
		return nil
	}
	return methodNotAllowed()
}

// ---- users and permissions ----

func userJSON(s ops.State, u *proto.UserInfo) map[string]any {
	hash, alg, _ := s.UserPasswordHash(u.GetName())
	if alg == "" {
		alg = fsm.PasswordHashAlgorithm
	}
	return map[string]any{
		"name": u.GetName(), "tags": nonNil(slices.Clone(u.GetTags())), "limits": map[string]any{},
		"password_hash": base64.StdEncoding.EncodeToString(hash), "hashing_algorithm": alg,
	}
}

// tagsOf reads tags as RabbitMQ takes them: a comma-separated string or a
// list.
func tagsOf(v any) []string {
	var out []string
	switch x := v.(type) {
	case string:
		for _, t := range strings.Split(x, ",") {
			if t = strings.TrimSpace(t); t != "" {
				out = append(out, t)
			}
		}
	case []any:
		for _, e := range x {
			if s, ok := e.(string); ok && s != "" {
				out = append(out, s)
			}
		}
	}
	return out
}

func (q *req) users() error {
	if !q.user.admin() {
		return notAuthorised("Not administrator user")
	}
	name := q.seg(1)
	if len(q.segs) == 3 && q.seg(2) == "topic-permissions" {
		return q.get(func() error { q.list(nil); return nil })
	}
	if len(q.segs) == 3 && q.seg(2) == "permissions" {
		return q.get(func() error {
			return q.listPermissions(func(p *proto.PermissionInfo) bool { return p.GetUser() == name })
		})
	}
	switch q.r.Method {
	case http.MethodGet:
		var out []map[string]any
		q.view(func(s ops.State) {
			for _, u := range s.Users() {
				if name == "" || u.GetName() == name {
					out = append(out, userJSON(s, u))
				}
			}
		})
		if name != "" {
			if len(out) == 0 {
				return notFound()
			}
			q.ok(out[0])
			return nil
		}
		q.list(out)
		return nil
	case http.MethodPut:
		if name == "" {
			return methodNotAllowed()
		}
		b, err := q.body()
		if err != nil {
			return err
		}
		existed, err := q.m.putUser(q.ctx, name, b)
		if err != nil {
			return err
		}
		q.created(existed)
		return nil
	case http.MethodDelete:
		if _, err := q.m.ops.DeleteUser(q.ctx, &proto.DeleteUserRequest{Name: name}); err != nil {
			return err
		}
		q.noContent()
		return nil
	}
	return methodNotAllowed()
}

func (q *req) listPermissions(keep func(*proto.PermissionInfo) bool) error {
	var out []map[string]any
	q.view(func(s ops.State) {
		for _, p := range s.Permissions() {
			if keep(p) {
				out = append(out, permissionJSON(p))
			}
		}
	})
	q.list(out)
	return nil
}

func permissionJSON(p *proto.PermissionInfo) map[string]any {
	return map[string]any{"user": p.GetUser(), "vhost": p.GetVhost(), "configure": p.GetConfigure(), "write": p.GetWrite(), "read": p.GetRead()}
}

func (q *req) permissions() error {
	if !q.user.admin() {
		return notAuthorised("Not administrator user")
	}
	vhost, user := q.seg(1), q.seg(2)
	if vhost == "" {
		return q.get(func() error { return q.listPermissions(func(*proto.PermissionInfo) bool { return true }) })
	}
	switch q.r.Method {
	case http.MethodGet:
		var out map[string]any
		q.view(func(s ops.State) {
			for _, p := range s.Permissions() {
				if p.GetVhost() == vhost && p.GetUser() == user {
					out = permissionJSON(p)
				}
			}
		})
		if out == nil {
			return notFound()
		}
		q.ok(out)
		return nil
	case http.MethodPut:
		b, err := q.body()
		if err != nil {
			return err
		}
		existed, err := q.m.putPermission(q.ctx, vhost, user, b)
		if err != nil {
			return err
		}
		q.created(existed)
		return nil
	case http.MethodDelete:
		if _, err := q.m.ops.ClearPermissions(q.ctx, &proto.ClearPermissionsRequest{User: user, Vhost: vhost}); err != nil {
			return err
		}
		q.noContent()
		return nil
	}
	return methodNotAllowed()
}
