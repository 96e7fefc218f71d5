package fsm

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/raftmq/raftmq/internal/replycode"
	"github.com/raftmq/raftmq/proto"
)

// Queue groups, as the metadata log records them: which Raft groups
// other than the metadata group a cluster runs, and their members. The
// log only names them; each member node opens and runs its group
// (cluster/group). A group once in the log keeps its id: QueueGroups
// only adds, so every replica and every later restart sees the same
// groups, and a member bootstraps its group with the configuration
// every other member uses. GroupMembers (level 16) sets a group's
// members afterwards; the group's leader changes its raft configuration
// to match, and the members a group was created with are the only ones
// that bootstrap it (its epoch is 0 until GroupMembers first applies).
const (
	// MaxQueueGroups is the most queue groups a log holds.
	MaxQueueGroups = 64
	// MaxGroupMembers is the most members a queue group has.
	MaxGroupMembers = 7
	// MaxGroupIDLen is the longest group id, in bytes.
	MaxGroupIDLen = 64
)

// GroupsLevel is the protocol level of GroupInit, Enqueue, HandOff and
// HandOffDone, for the node.
const GroupsLevel = levelGroups

// QueueGroupLevel is the protocol level of QueueGroups, for the node,
// which proposes it only once the log is at that level.
const QueueGroupLevel = levelQueueGroups

// GroupMembersLevel is the protocol level of GroupMembers, for the node,
// which proposes it only once the log is at that level.
const GroupMembersLevel = levelGroupMembers

// QueueGroup is a queue group of the log: its id and its members, the
// first the one meant to lead it.
type QueueGroup struct {
	ID      string
	Members []GroupMember
	// Epoch is how many times GroupMembers set the members: 0 while
	// they are those the group was created with, which its members
	// bootstrap; a member named later waits for the group's leader to
	// add it.
	Epoch uint64
}

// HasMember reports whether the node id is one of g's members.
func (g QueueGroup) HasMember(id string) bool {
	for _, m := range g.Members {
		if m.ID == id {
			return true
		}
	}
	return false
}

// GroupMember is a member of a queue group: a node id and its raft
// address.
type GroupMember struct {
	ID, Addr string
}

// ValidGroupID says whether id may name a queue group: 1 to
// MaxGroupIDLen bytes of a-z, 0-9, '-' and '_'. An id is a directory
// name and travels in a raft connection's header, so it holds nothing a
// file system could read as a path or fold into another id (no '.',
// '/', capitals).
func ValidGroupID(id string) error {
	if len(id) == 0 || len(id) > MaxGroupIDLen {
		return fmt.Errorf("group: id of %d bytes (1 to %d)", len(id), MaxGroupIDLen)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return fmt.Errorf("group: id %q: byte %q is not one of a-z, 0-9, '-', '_'", id, c)
		}
	}
	return nil
}

func (s *state) applyQueueGroups(c *proto.QueueGroups) *proto.Result {
	var add []QueueGroup
	for _, g := range c.GetGroups() {
		if s.queueGroup(g.GetId()) != nil || containsGroup(add, g.GetId()) {
			continue
		}
		qg := QueueGroup{ID: g.GetId()}
		for _, m := range g.GetMembers() {
			qg.Members = append(qg.Members, GroupMember{ID: m.GetId(), Addr: m.GetAddr()})
		}
		add = append(add, qg)
	}
	if len(s.queueGroups)+len(add) > MaxQueueGroups {
		return refused(replycode.PreconditionFailed, "PRECONDITION_FAILED - "+strconv.Itoa(len(s.queueGroups)+len(add))+" queue groups, more than "+strconv.Itoa(MaxQueueGroups))
	}
	// A new slice: a snapshot taken before may still read the old one.
	s.queueGroups = append(s.queueGroups[:len(s.queueGroups):len(s.queueGroups)], add...)
	return &proto.Result{}
}

// applyGroupMembers sets a group's members. The members are the node's
// to check against the voters (where the command enters: it is
// proposed by the metadata leader alone); the log checks what it can
// know: the group is one of its own, and its epoch is the one the
// members were worked out from.
func (s *state) applyGroupMembers(c *proto.GroupMembers) *proto.Result {
	i := slices.IndexFunc(s.queueGroups, func(g QueueGroup) bool { return g.ID == c.GetGroup() })
	if i < 0 {
		return refused(replycode.NotFound, "NOT_FOUND - no queue group '"+c.GetGroup()+"'")
	}
	if e := s.queueGroups[i].Epoch; e != c.GetEpoch() {
		return refused(replycode.PreconditionFailed, "PRECONDITION_FAILED - queue group '"+c.GetGroup()+"' is at epoch "+
			strconv.FormatUint(e, 10)+", not "+strconv.FormatUint(c.GetEpoch(), 10))
	}
	g := QueueGroup{ID: c.GetGroup(), Epoch: s.queueGroups[i].Epoch + 1}
	for _, m := range c.GetMembers() {
		g.Members = append(g.Members, GroupMember{ID: m.GetId(), Addr: m.GetAddr()})
	}
	// A new slice: a snapshot taken before, or a caller of QueueGroups,
	// may still read the old one.
	gs := slices.Clone(s.queueGroups)
	gs[i] = g
	s.queueGroups = gs
	return &proto.Result{}
}

func containsGroup(gs []QueueGroup, id string) bool {
	for _, g := range gs {
		if g.ID == id {
			return true
		}
	}
	return false
}

func (s *state) queueGroup(id string) *QueueGroup {
	for i := range s.queueGroups {
		if s.queueGroups[i].ID == id {
			return &s.queueGroups[i]
		}
	}
	return nil
}

func (v *validator) queueGroups(c *proto.QueueGroups) {
	if len(c.GetGroups()) == 0 {
		v.fail(replycode.InternalError, "no queue group")
	}
	if len(c.GetGroups()) > MaxQueueGroups {
		v.fail(replycode.PreconditionFailed, "%d queue groups, more than %d", len(c.GetGroups()), MaxQueueGroups)
	}
	for _, g := range c.GetGroups() {
		if err := ValidGroupID(g.GetId()); err != nil {
			v.fail(replycode.PreconditionFailed, "%s", truncate(err.Error()))
		}
		v.groupMemberList(g.GetId(), g.GetMembers())
	}
}

func (v *validator) groupMembers(c *proto.GroupMembers) {
	if c.GetGroup() == "" {
		v.fail(replycode.InternalError, "no queue group")
	}
	if err := ValidGroupID(c.GetGroup()); err != nil {
		v.fail(replycode.PreconditionFailed, "%s", truncate(err.Error()))
	}
	v.groupMemberList(c.GetGroup(), c.GetMembers())
}

// groupMemberList checks a queue group's members: 1 to MaxGroupMembers,
// each named with its address, none twice.
func (v *validator) groupMemberList(id string, ms []*proto.QueueGroupMember) {
	if n := len(ms); n == 0 || n > MaxGroupMembers {
		v.fail(replycode.PreconditionFailed, "queue group %s has %d members (1 to %d)", id, n, MaxGroupMembers)
	}
	for i, m := range ms {
		v.name("queue group member", m.GetId(), true)
		v.name("queue group member address", m.GetAddr(), true)
		for _, o := range ms[:i] {
			if o.GetId() == m.GetId() {
				v.fail(replycode.PreconditionFailed, "queue group %s names member %s twice", id, truncate(m.GetId()))
			}
		}
	}
}

// encQueueGroups writes the queue groups in log order; decQueueGroups reads them
// back.
func encQueueGroups(e *enc, s *state) {
	e.u(uint64(len(s.queueGroups)))
	for _, g := range s.queueGroups {
		e.s(g.ID)
		e.u(uint64(len(g.Members)))
		for _, m := range g.Members {
			e.s(m.ID)
			e.s(m.Addr)
		}
		if e.has(formatGroupMembers) {
			e.u(g.Epoch)
		}
	}
}

func decQueueGroups(d *dec, s *state) bool {
	for n := d.n(); n > 0 && d.err == nil; n-- {
		g := QueueGroup{ID: d.s()}
		for k := d.n(); k > 0 && d.err == nil; k-- {
			g.Members = append(g.Members, GroupMember{ID: d.s(), Addr: d.s()})
		}
		if d.has(formatGroupMembers) {
			g.Epoch = d.u()
		}
		s.queueGroups = append(s.queueGroups, g)
	}
	return d.err == nil && len(s.queueGroups) <= MaxQueueGroups
}

// QueueGroups lists the log's queue groups in the order they were
// created. Later commands never change what it returns (they change a
// copy), so it may be kept; the caller must not change it.
func (m *Machine) QueueGroups() []QueueGroup {
	return m.queueGroups
}
