package fsm

import (
	"sort"
	"strconv"

	"github.com/raftmq/raftmq/internal/replycode"
	"github.com/raftmq/raftmq/proto"
)

// Virtual host limits, as RabbitMQ's vhost-limits: max-queues is enforced
// here, at queue.declare; max-connections by each node at connection.open
// (it is not state the log sees). A negative value is no limit, 0 refuses
// every new queue or connection. A vhost without limits (every vhost of a
// log below levelVhostLimits) declares as before.
const (
	// LimitMaxConnections and LimitMaxQueues are the limits' names.
	LimitMaxConnections = "max-connections"
	LimitMaxQueues      = "max-queues"
)

// LimitNames are the vhost limits raftmq knows, in RabbitMQ's order.
var LimitNames = []string{LimitMaxConnections, LimitMaxQueues}

// KnownLimit reports whether name is a vhost limit raftmq knows.
func KnownLimit(name string) bool {
	return name == LimitMaxConnections || name == LimitMaxQueues
}

func (s *state) applyVhostLimits(c *proto.VhostLimits) *proto.Result {
	v, ok := s.vhosts[c.GetVhost()]
	if !ok {
		return refused(replycode.NotFound, "NOT_FOUND - no vhost '"+c.GetVhost()+"'")
	}
	if c.GetReplace() {
		v.limits = nil
	}
	for _, l := range c.GetSet() {
		if v.limits == nil {
			v.limits = map[string]int64{}
		}
		v.limits[l.GetName()] = l.GetValue()
	}
	for _, n := range c.GetClear() {
		delete(v.limits, n)
	}
	if len(v.limits) == 0 {
		v.limits = nil
	}
	return &proto.Result{}
}

// limit is the vhost's limit name and whether it limits (set, not
// negative).
func (v *vhost) limit(name string) (int64, bool) {
	n, ok := v.limits[name]
	return n, ok && n >= 0
}

// checkQueueLimit refuses a new queue in a vhost holding max-queues, with
// RabbitMQ's text.
func checkQueueLimit(v *vhost, name string) *proto.Result {
	max, ok := v.limit(LimitMaxQueues)
	if !ok || int64(len(v.queues)) < max {
		return nil
	}
	return refused(replycode.PreconditionFailed, "PRECONDITION_FAILED - cannot declare queue '"+name+"': queue limit in vhost '"+v.name+"' ("+strconv.FormatInt(max, 10)+") is reached")
}

func (v *validator) vhostLimits(c *proto.VhostLimits) {
	v.name("vhost name", c.GetVhost(), true)
	v.list("vhost limits", len(c.GetSet()))
	v.list("vhost limits cleared", len(c.GetClear()))
	for _, l := range c.GetSet() {
		if !KnownLimit(l.GetName()) {
			v.fail(replycode.PreconditionFailed, "unknown vhost limit '%s'", truncate(l.GetName()))
		}
	}
	for _, n := range c.GetClear() {
		v.name("vhost limit name", n, true)
	}
}

// encLimits writes the limits of every vhost that has some, in vhost
// order, each in name order; decLimits reads them back onto the vhosts.
func encLimits(e *enc, s *state) {
	var names []string
	for n, v := range s.vhosts {
		if len(v.limits) > 0 {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	e.u(uint64(len(names)))
	for _, n := range names {
		v := s.vhosts[n]
		e.s(n)
		e.u(uint64(len(v.limits)))
		for _, k := range sortedKeys(v.limits) {
			e.s(k)
			e.i(v.limits[k])
		}
	}
}

func decLimits(d *dec, s *state) bool {
	for n := d.n(); n > 0 && d.err == nil; n-- {
		v, ok := s.vhosts[d.s()]
		if !ok || v.limits != nil {
			return false
		}
		v.limits = map[string]int64{}
		for k := d.n(); k > 0 && d.err == nil; k-- {
			v.limits[d.s()] = d.i()
		}
	}
	return d.err == nil
}

// VhostLimits lists the limits of vhost ("" every vhost), in vhost
// order, for the vhosts that have some.
func (m *Machine) VhostLimits(vhost string) []*proto.VhostLimitsInfo {
	var out []*proto.VhostLimitsInfo
	for _, v := range m.vhostsOf(vhost) {
		if len(v.limits) == 0 {
			continue
		}
		info := &proto.VhostLimitsInfo{Vhost: v.name}
		for _, k := range sortedKeys(v.limits) {
			info.Limits = append(info.Limits, &proto.VhostLimit{Name: k, Value: v.limits[k]})
		}
		out = append(out, info)
	}
	return out
}

// VhostLimit is a vhost's limit and whether it limits (set and not
// negative).
func (m *Machine) VhostLimit(vhost, name string) (int64, bool) {
	v, ok := m.vhosts[vhost]
	if !ok {
		return 0, false
	}
	return v.limit(name)
}
