package fsm

import (
	"cmp"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/raftmq/raftmq/internal/replycode"
	"github.com/raftmq/raftmq/proto"
	"github.com/raftmq/raftmq/queue"
	"github.com/raftmq/raftmq/ttl"
)

// Placement (level 17, fsm/DESIGN.md "Queue groups"): the metadata log
// decides which queue group holds a new queue. The queue's record stays
// in the metadata machine (name, arguments, bindings: what routing
// needs) with the group it was placed in; its messages, consumers and
// deliveries are its group's. A copy the metadata log routes to a placed
// queue therefore leaves through the metadata machine's outbox, pre-routed
// (outEntry.queues), and a command on a placed queue's messages is
// refused here: the node sends it to the queue's group.

// applyPlaceQueues switches placement on, for good: queues placed stay
// where they are, so there is no switching it off.
func (s *state) applyPlaceQueues() *proto.Result {
	if !s.atLeast(levelPlacement) {
		// The state below the level is written in a format without
		// placement (formatFor): it must hold none.
		return refused(replycode.NotImplemented, fmt.Sprintf("NOT_IMPLEMENTED - queue placement needs protocol level %d; the log is at %d", levelPlacement, s.level))
	}
	if s.groups.id != 0 {
		return refused(replycode.PreconditionFailed, fmt.Sprintf("PRECONDITION_FAILED - queues are placed by the metadata log; this log is group %d's", s.groups.id))
	}
	s.placing = true
	return &proto.Result{}
}

// placeable reports whether a new queue declared by c may live in a
// queue group. An exclusive or auto-delete queue lives and dies with its
// connection or consumers, which the metadata group decides, so it stays
// there. A queue with its own x-expires stays too below levelPlaceExpires:
// until queue groups ran leases and the metadata deleted what a group
// ended (levelLeases), its lease had to run where its record is. From
// that level it is placed like any other, and its group runs the lease
// (lease.go).
func (s *state) placeable(c *proto.QueueDeclare) bool {
	if c.GetExclusive() || c.GetAutoDelete() {
		return false
	}
	if s.atLeast(levelPlaceExpires) {
		return true
	}
	_, expires := tableGet(c.GetArguments(), ttl.ArgExpires)
	return !expires
}

// placeFor is the group a new queue declared by c is placed in, "" for
// the metadata group: with placement on, the queue group with the fewest
// queues placed in it, the earliest of the log's groups on a tie, among
// those with at least the members its x-quorum-initial-group-size asks
// for (from level 18; none has: the metadata group, on every voter); with
// x-queue-leader-locator client-local (from level 20), or a policy pol
// whose queue-leader-locator says so (from level 21), the declaring
// node's groups first (leader_locator.go). It reads the state and the
// command only, so every replica places alike.
func (s *state) placeFor(c *proto.QueueDeclare, pol *policy) string {
	if !s.placing || s.groups.id != 0 || len(s.queueGroups) == 0 || !s.placeable(c) {
		return ""
	}
	size := 0
	if s.atLeast(levelGroupSize) {
		size = groupSize(c.GetArguments())
	}
	node := ""
	if s.atLeast(levelLeaderLocator) && s.locateLocal(c.GetArguments(), pol) {
		node = c.GetConnection().GetNode()
	}
	best, bestTier, fewest := "", 0, 0
	for _, g := range s.queueGroups {
		if size > len(g.Members) {
			continue
		}
		tier := 0
		if node != "" {
			tier = localTier(g, node)
		}
		if n := s.placed[g.ID]; best == "" || tier < bestTier || tier == bestTier && n < fewest {
			best, bestTier, fewest = g.ID, tier, n
		}
	}
	return best
}

// place records q as placed in group (a declare, a restore).
func (s *state) place(q *queueState, group string) {
	q.group = group
	if group == "" {
		return
	}
	if s.placed == nil {
		s.placed = map[string]int{}
	}
	s.placed[group]++
}

// unplace forgets q's placement as q is deleted.
func (s *state) unplace(q *queueState) {
	if q.group != "" {
		s.placed[q.group]--
	}
}

// elsewhere refuses a command on the messages of q when q is placed in a
// queue group, naming the group: the node sends such commands there, and
// one this log refuses was routed on a view of the metadata older than
// this entry (cluster/broker, submitTo).
func elsewhere(q *queueState) *proto.Result {
	if q.group == "" {
		return nil
	}
	r := refused(replycode.PreconditionFailed, "PRECONDITION_FAILED - "+rs("queue", q.name, q.vhost)+" lives in group "+q.group)
	r.PlacedIn = q.group
	return r
}

// splitPlaced separates the targets this machine holds from the names of
// those placed in queue groups, in the order of targets. Without placed
// targets it returns targets as they are.
func splitPlaced(targets []*queueState) (held []*queueState, placed []string) {
	i := slices.IndexFunc(targets, func(q *queueState) bool { return q.group != "" })
	if i < 0 {
		return targets, nil
	}
	held = slices.Clone(targets[:i])
	for _, q := range targets[i:] {
		if q.group != "" {
			placed = append(placed, q.name)
		} else {
			held = append(held, q)
		}
	}
	return held, placed
}

// toOutboxRouted keeps one copy of m for the queues placed in queue
// groups that a routing in this log reached: pre-routed, the node hands
// it to each queue's group without routing it again. m's body is named
// in this log, as the outbox's entries are, so the snapshot's Bodies
// keep it until HandOffDone forgets the entry.
func (s *state) toOutboxRouted(vhost string, queues []string, m *queue.Message, deadLettered bool) {
	s.groups.out.seq++
	s.groups.out.entries = append(s.groups.out.entries, &outEntry{key: s.groups.out.seq, index: s.index,
		vhost: vhost, exchange: m.Exchange, keys: []string{m.RoutingKey}, m: m, deadLettered: deadLettered, queues: queues})
}

// QueuePlacement is the queue group a queue is placed in: "" for a queue
// the metadata group holds, ok false for no such queue.
func (m *Machine) QueuePlacement(vhost, name string) (group string, ok bool) {
	v, ok := m.vhosts[vhost]
	if !ok {
		return "", false
	}
	q, ok := v.queues[name]
	if !ok {
		return "", false
	}
	return q.group, true
}

// PlacedMissing is what a mirror round declares in group's log: the
// declares of the queues placed in group that has does not report (the
// group's log lacks them), sorted by vhost and name, and the vhosts that
// hold any queue placed in group, sorted. It builds nothing for a queue
// the group holds, so a round over many queues costs a lookup each.
func (m *Machine) PlacedMissing(group string, has func(vhost, name string) bool) (missing []*proto.QueueDeclare, vhosts []string) {
	if group == "" {
		return nil, nil
	}
	for _, v := range m.vhosts {
		placedHere := false
		for _, q := range v.queues {
			if q.group != group {
				continue
			}
			placedHere = true
			if !has(q.vhost, q.name) {
				missing = append(missing, groupDeclare(q))
			}
		}
		if placedHere {
			vhosts = append(vhosts, v.name)
		}
	}
	slices.SortFunc(missing, func(a, b *proto.QueueDeclare) int {
		return cmp.Or(cmp.Compare(a.GetVhost(), b.GetVhost()), cmp.Compare(a.GetName(), b.GetName()))
	})
	slices.Sort(vhosts)
	return missing, vhosts
}

// PlacedDeclare is the declare that creates queue name of vhost in the
// queue group group's log, ok false unless the queue is placed there.
func (m *Machine) PlacedDeclare(group, vhost, name string) (d *proto.QueueDeclare, ok bool) {
	v, found := m.vhosts[vhost]
	if !found || group == "" {
		return nil, false
	}
	q, found := v.queues[name]
	if !found || q.group != group {
		return nil, false
	}
	return groupDeclare(q), true
}

// groupDeclare is the declare that creates placed queue q in its
// group's log.
func groupDeclare(q *queueState) *proto.QueueDeclare {
	return &proto.QueueDeclare{Vhost: q.vhost, Name: q.name, Durable: q.durable, Arguments: cloneTable(q.args), PlacedAt: q.placedAt}
}

// HasQueue reports whether the state holds queue name in vhost.
func (m *Machine) HasQueue(vhost, name string) bool {
	v, ok := m.vhosts[vhost]
	if !ok {
		return false
	}
	_, ok = v.queues[name]
	return ok
}

// QueueNames lists the names of vhost's queues, in no order.
func (m *Machine) QueueNames(vhost string) []string {
	v, ok := m.vhosts[vhost]
	if !ok {
		return nil
	}
	out := make([]string, 0, len(v.queues))
	for name := range v.queues {
		out = append(out, name)
	}
	return out
}

// Placing reports whether PlaceQueues switched placement on.
func (m *Machine) Placing() bool { return m.placing }

// PublishRoute is where a publish would go if the metadata log applied
// it now, by group: the queues it reaches in each (group "" for the
// metadata group's own), for a routing node that enqueues it in each
// group's log itself (Enqueue) instead of passing it through the
// metadata log. ok is false where only the log can decide: a vhost or
// exchange it does not hold, an internal exchange, an expiration it
// would refuse, a delayed exchange on the way that would hold it, or no
// queue at all (mandatory's return and the drop are the log's).
func (m *Machine) PublishRoute(p *proto.Publish) (byGroup map[string][]string, ok bool) {
	v, found := m.vhosts[p.GetVhost()]
	if !found {
		return nil, false
	}
	x, found := v.exchanges[p.GetExchange()]
	if !found || x.intern {
		return nil, false
	}
	props := p.GetProperties()
	if props != nil && props.Expiration != nil {
		if _, err := ttl.ParseExpiration(props.GetExpiration()); err != nil {
			return nil, false
		}
	}
	keys := append([]string{p.GetRoutingKey()}, headerKeys(props.GetHeaders(), "CC")...)
	keys = append(keys, headerKeys(props.GetHeaders(), "BCC")...)
	rt := m.route(v, x, keys, withoutHeader(props, "BCC"))
	if len(rt.held) > 0 || len(rt.queues) == 0 {
		return nil, false
	}
	byGroup = map[string][]string{}
	for _, q := range rt.queues {
		byGroup[q.group] = append(byGroup[q.group], q.name)
	}
	return byGroup, true
}

// settingsGens numbers the changes SettingsGen reports, across machines:
// a machine restored from a snapshot, or a new one in its place, never
// shows a number it showed before.
var settingsGens atomic.Uint64

// SettingsGen is a number that changes whenever what a queue group's
// mirror reads of this machine, other than which queues it holds, may
// have changed: its vhosts, policies, the queues' placement (a command
// that may touch them, a restore). Queues declared and deleted are
// QueueChanges. A mirror that saw the same numbers in the metadata and
// the group's machine, and no queue changes since, has nothing new to
// do. Not state: replicas differ in it.
func (m *Machine) SettingsGen() uint64 { return m.settingsGen }

// mirrored reports whether applying c may change what a group's mirror
// reads other than which queues a machine holds (queue declares and
// deletes are logged as QueueChanges, wherever they come from). Only the
// commands of the message flow, which a busy log applies by the
// thousand, and the queue declares and deletes are known not to; any
// other kind counts, a kind added later included.
func mirrored(c *proto.Command) bool {
	switch c.GetCmd().(type) {
	case *proto.Command_Publish, *proto.Command_Enqueue, *proto.Command_Get, *proto.Command_Consume,
		*proto.Command_Credit, *proto.Command_Settle, *proto.Command_Requeue, *proto.Command_Discard,
		*proto.Command_Expire, *proto.Command_Tick, *proto.Command_ReleaseDelayed, *proto.Command_HandOff,
		*proto.Command_HandOffDone, *proto.Command_QueuePurge, *proto.Command_Bind, *proto.Command_Unbind,
		*proto.Command_QueueDeclare, *proto.Command_QueueDelete:
		return false
	}
	return true
}
