package cluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	pb "google.golang.org/protobuf/proto"

	"github.com/raftmq/raftmq/cluster/group"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// Placement (DESIGN.md, "Groups"): the metadata log places each new
// queue into a queue group as its declare applies (fsm, PlaceQueues) and
// keeps its record, bindings included; the queue itself, its messages,
// consumers and deliveries, lives in the group's log. What the group's
// machine needs to hold a queue as the metadata declared it (its vhost,
// the vhost's policies, the queue's declare) is mirrored into the group's
// log by its leader (mirrorLoop), and by the node that declared the
// queue, so that declare-ok comes once the queue is there. The metadata
// log is the truth: a queue it no longer places in the group is deleted
// from the group, a vhost it no longer has goes with its queues.

// mirrorCommands are the commands that bring the group machine grp in line
// with what the metadata machine meta places in group id: vhosts of its
// queues first, then their policies, then the queues. Nil when they
// agree, and before the metadata places queues: until then a queue
// group's log is no copy of anything.
func mirrorCommands(meta, grp *fsm.Machine, id string) []*proto.Command {
	if !meta.Placing() {
		return nil
	}
	missing, vhosts := meta.PlacedMissing(id, func(vhost, name string) bool { return groupHolds(meta, grp, vhost, name) })
	var cmds []*proto.Command
	// Vhosts the group holds that the metadata no longer has, and queues
	// it no longer places here, go first: a queue deleted and declared
	// again under its name is a new queue.
	have := map[string]bool{}
	for _, v := range grp.Vhosts() {
		have[v.GetName()] = true
		if !meta.VhostExists(v.GetName()) {
			cmds = append(cmds, &proto.Command{Cmd: &proto.Command_VhostDelete{VhostDelete: &proto.VhostDelete{Name: v.GetName()}}})
			continue
		}
		var gone []string
		for _, q := range append(grp.QueueNames(v.GetName()), grp.EndedNames(v.GetName())...) {
			if g, ok := meta.QueuePlacement(v.GetName(), q); !ok || g != id {
				gone = append(gone, q)
			}
		}
		slices.Sort(gone)
		for _, q := range gone {
			cmds = append(cmds, &proto.Command{Cmd: &proto.Command_QueueDelete{QueueDelete: &proto.QueueDelete{Vhost: v.GetName(), Name: q}}})
		}
	}
	for _, vh := range vhosts {
		if !have[vh] {
			cmds = append(cmds, &proto.Command{Cmd: &proto.Command_VhostPut{VhostPut: &proto.VhostPut{Name: vh}}})
		}
		for _, operator := range []bool{false, true} {
			cmds = append(cmds, mirrorPolicies(meta.Policies(vh, operator), grp.Policies(vh, operator), vh)...)
		}
		for _, d := range missing {
			if d.GetVhost() == vh {
				cmds = append(cmds, &proto.Command{Cmd: &proto.Command_QueueDeclare{QueueDeclare: d}})
			}
		}
	}
	return cmds
}

// mirrorPolicies sets in a group the policies of vhost that differ from
// the metadata's, and clears those the metadata no longer has.
func mirrorPolicies(want, have []*proto.PolicyInfo, vhost string) []*proto.Command {
	var cmds []*proto.Command
	held := map[string]*proto.PolicyInfo{}
	for _, p := range have {
		held[p.GetName()] = p
	}
	for _, p := range want {
		if h, ok := held[p.GetName()]; ok && pb.Equal(h, p) {
			delete(held, p.GetName())
			continue
		}
		delete(held, p.GetName())
		cmds = append(cmds, &proto.Command{Cmd: &proto.Command_PolicySet{PolicySet: &proto.PolicySet{
			Vhost: vhost, Name: p.GetName(), Pattern: p.GetPattern(), ApplyTo: p.GetApplyTo(),
			Priority: p.GetPriority(), Definition: p.GetDefinition(), Operator: p.GetOperator()}}})
	}
	for _, p := range have {
		if _, gone := held[p.GetName()]; gone {
			cmds = append(cmds, &proto.Command{Cmd: &proto.Command_PolicyClear{PolicyClear: &proto.PolicyClear{
				Vhost: vhost, Name: p.GetName(), Operator: p.GetOperator()}}})
		}
	}
	return cmds
}

// mirrorMark is where a mirror read the metadata and a group's machine:
// their settings numbers (fsm SettingsGen) and the heads of their logs of
// queue changes (fsm QueueChanges), metadata first.
type mirrorMark struct {
	settings, queues [2]uint64
}

// markOf reads where meta and grp are.
func markOf(meta, grp *fsm.Machine) mirrorMark {
	return mirrorMark{settings: [2]uint64{meta.SettingsGen(), grp.SettingsGen()},
		queues: [2]uint64{meta.QueueChangeHead(), grp.QueueChangeHead()}}
}

// mirrorRead returns the commands that bring the group machine grp in line
// with meta, and where it read them. A mirror that brought the two in line
// as they were at seen, with the same settings since, need only look at
// the queues declared or deleted in either since (mirrorNamed), which a
// burst of declares keeps to a few a round; else, or with all set, it
// compares everything (mirrorCommands).
//
// With hold, a queue the group lacks that was first found lacking less
// than the hold's grace ago is left out (mirrorHold), in either kind of
// round, and the queues held are looked at again whatever changed.
func mirrorRead(meta, grp *fsm.Machine, id string, seen mirrorMark, all bool, hold *mirrorHold) ([]*proto.Command, mirrorMark) {
	now := markOf(meta, grp)
	hold.begin()
	if !all && now.settings == seen.settings {
		inMeta, okMeta := meta.QueueChanges(seen.queues[0])
		inGroup, okGroup := grp.QueueChanges(seen.queues[1])
		if okMeta && okGroup {
			return mirrorNamed(meta, grp, id, append(append(inMeta, inGroup...), hold.pending()...), hold), now
		}
	}
	cmds := mirrorCommands(meta, grp, id)
	if hold != nil {
		cmds = slices.DeleteFunc(cmds, func(c *proto.Command) bool {
			if d := c.GetQueueDelete(); d != nil {
				return hold.keepDelete(fsm.QueueKey{Vhost: d.GetVhost(), Name: d.GetName()})
			}
			d := c.GetQueueDeclare()
			return d != nil && hold.keep(fsm.QueueKey{Vhost: d.GetVhost(), Name: d.GetName()})
		})
	}
	return cmds, now
}

// A group leader's mirror leaves a queue it finds missing from the group
// to the node that declared it for Config.PlaceGrace, where every node is
// a member of the group: that node places the queue itself right after
// its metadata commit (PlaceQueue), and a mirror that declared it too
// would write the declare to the group's log twice (a third of the
// declares in a burst from every node were). The mirror declares it once
// the grace is over, should the declaring node have died in between or
// its client gone away; a node outside the group waits for the mirror,
// so where one exists nothing is held.

// A queue the metadata no longer places in the group is left the same
// way to the node that deleted it, whether a member or not: that node
// deletes it from the group right after its metadata commit and answers
// its client's delete-ok with the group's count of the queue's messages.
// A mirror that deleted it first (on the leader of both logs it sees the
// metadata's delete at once) left that node no queue to count, and the
// client read 0 for a queue that held messages.

// mirrorHold is what a group leader's mirror leaves to the declaring
// members (where every node is one: declares) and to the deleting node
// for grace: each queue it found missing or unplaced, since when, and
// those it held back in the current round. A nil one holds nothing.
type mirrorHold struct {
	grace    time.Duration
	now      time.Time // the round's
	declares bool      // declares are held too
	since    map[fsm.QueueKey]time.Time
	held     map[fsm.QueueKey]bool
}

func newMirrorHold(grace time.Duration) *mirrorHold {
	return &mirrorHold{grace: grace, since: map[fsm.QueueKey]time.Time{}, held: map[fsm.QueueKey]bool{}}
}

// begin starts a read: a round reads twice when it deletes (mirrorRound),
// and the second read's holds are the round's.
func (h *mirrorHold) begin() {
	if h != nil {
		clear(h.held)
	}
}

// pending are the queues held back before, looked at again in every round
// until the group holds them, the metadata no longer places them there,
// or their grace is over.
func (h *mirrorHold) pending() []fsm.QueueKey {
	if h == nil {
		return nil
	}
	return slices.Collect(maps.Keys(h.since))
}

// keep reports whether the declare of k, missing from the group, waits:
// it does until the grace after k was first found missing, where every
// node is a member.
func (h *mirrorHold) keep(k fsm.QueueKey) bool {
	if h == nil || !h.declares {
		return false
	}
	return h.keepDelete(k)
}

// keepDelete reports whether the delete of k, which the metadata no
// longer places in the group, waits: it does until the grace after k was
// first found so.
func (h *mirrorHold) keepDelete(k fsm.QueueKey) bool {
	if h == nil {
		return false
	}
	first, ok := h.since[k]
	if !ok {
		first = h.now
		h.since[k] = first
	}
	if h.now.Sub(first) >= h.grace {
		return false
	}
	h.held[k] = true
	return true
}

// settle forgets the queues not held back by the last read (placed,
// unplaced, or declared now) and returns when the first of those held
// is due (zero: none is).
func (h *mirrorHold) settle() time.Time {
	if h == nil {
		return time.Time{}
	}
	var due time.Time
	for k, first := range h.since {
		if !h.held[k] {
			delete(h.since, k)
			continue
		}
		if at := first.Add(h.grace); due.IsZero() || at.Before(due) {
			due = at
		}
	}
	return due
}

// mirrorNamed is what mirrorCommands gives for the queues named in keys,
// assuming every other queue is in line: the deletes first, then each
// vhost's put where the group lacks it, its policies and its declares.
// A queue whose vhost the metadata no longer has is left to the vhost's
// delete, which a full round proposes (a vhost deleted moves the
// settings).
func mirrorNamed(meta, grp *fsm.Machine, id string, keys []fsm.QueueKey, hold *mirrorHold) []*proto.Command {
	if !meta.Placing() || grp.Group() == 0 || len(keys) == 0 {
		return nil
	}
	slices.SortFunc(keys, func(a, b fsm.QueueKey) int { return cmp.Or(cmp.Compare(a.Vhost, b.Vhost), cmp.Compare(a.Name, b.Name)) })
	keys = slices.Compact(keys)
	var cmds, declares []*proto.Command
	for _, k := range keys {
		g, placed := meta.QueuePlacement(k.Vhost, k.Name)
		here, has := placed && g == id, groupHolds(meta, grp, k.Vhost, k.Name)
		switch {
		case here && !has:
			if hold.keep(k) {
				continue
			}
			if d, ok := meta.PlacedDeclare(id, k.Vhost, k.Name); ok {
				declares = append(declares, &proto.Command{Cmd: &proto.Command_QueueDeclare{QueueDeclare: d}})
			}
		case !here && (has || grp.Ended(k.Vhost, k.Name)) && meta.VhostExists(k.Vhost):
			if hold.keepDelete(k) {
				continue
			}
			cmds = append(cmds, &proto.Command{Cmd: &proto.Command_QueueDelete{QueueDelete: &proto.QueueDelete{Vhost: k.Vhost, Name: k.Name}}})
		}
	}
	for i, d := range declares {
		vh := d.GetQueueDeclare().GetVhost()
		if i > 0 && declares[i-1].GetQueueDeclare().GetVhost() == vh {
			cmds = append(cmds, d)
			continue
		}
		if !grp.VhostExists(vh) {
			cmds = append(cmds, &proto.Command{Cmd: &proto.Command_VhostPut{VhostPut: &proto.VhostPut{Name: vh}}})
		}
		for _, operator := range []bool{false, true} {
			cmds = append(cmds, mirrorPolicies(meta.Policies(vh, operator), grp.Policies(vh, operator), vh)...)
		}
		cmds = append(cmds, d)
	}
	return cmds
}

// mirrorRound proposes into queue group g's log what brings it in line
// with the metadata this node applied (mirrorRead from seen), and returns
// the commands, the group's results and where it read. A queue the group
// holds and the metadata does not place there may be one declared a
// moment ago that this node's metadata has not applied yet (the declaring
// node proposes it into the group right after its metadata commit):
// before deleting anything, the node passes a Tick through the metadata
// log, whose result comes once this node applied everything committed
// before it, and reads again. The mark is the first read's: what came
// after it is read again next round. Then it has the metadata log
// delete the queues whose lease ended in the group (endLeases).
func (n *Node) mirrorRound(ctx context.Context, g *group.Group, id string, seen mirrorMark, all bool, hold *mirrorHold) ([]*proto.Command, []*proto.Result, mirrorMark, error) {
	cmds, mark := n.mirrorCommands(g, id, seen, all, hold)
	if slices.ContainsFunc(cmds, deletes) {
		before := cmds
		if err := n.CatchUp(ctx); err != nil {
			return cmds, nil, mark, err
		}
		after, _ := n.mirrorCommands(g, id, seen, all, hold)
		cmds = keepEarlierDeletes(before, after)
	}
	if len(cmds) == 0 {
		return nil, nil, mark, n.endLeases(ctx, g, id)
	}
	res, err := g.Submitter().SubmitBatch(ctx, cmds)
	if err != nil {
		return cmds, nil, mark, err
	}
	for i, r := range res {
		if r.GetCode() != 0 {
			// A refusal is the metadata having moved on under the
			// mirror (a vhost deleted meanwhile): the next round reads
			// both again.
			n.log.Debug("a mirrored command was refused", "group", id, "cmd", fmt.Sprintf("%T", cmds[i].GetCmd()), "code", r.GetCode(), "text", r.GetText())
		}
	}
	return cmds, res, mark, n.endLeases(ctx, g, id)
}

// endLeases has the metadata log delete the queues whose lease ended in
// queue group g (leaseEnds), after a mirror round: the next one finds
// them unplaced and has the group forget them.
func (n *Node) endLeases(ctx context.Context, g *group.Group, id string) error {
	var cmds []*proto.Command
	n.View(func(meta *fsm.Machine) {
		g.State().View(func(grp *fsm.Machine) { cmds = leaseEnds(meta, grp, id) })
	})
	if len(cmds) == 0 {
		return nil
	}
	res, err := n.SubmitBatch(ctx, cmds)
	if err != nil {
		return fmt.Errorf("deleting the queues whose lease ended: %w", err)
	}
	for i, r := range res {
		e := cmds[i].GetQueueLeaseEnded()
		if r.GetCode() != 0 {
			return fmt.Errorf("deleting queue %q of vhost %q, whose lease ended: %w", e.GetName(), e.GetVhost(), &refusedError{r})
		}
		if r.GetQueue() != "" {
			n.log.Info("queue deleted: its lease ran out in its queue group", "vhost", e.GetVhost(), "queue", e.GetName(), "group", id)
		}
	}
	return nil
}

// mirrorCommands reads the metadata and group g's machine as this node
// applied them and returns what brings g in line (mirrorRead).
func (n *Node) mirrorCommands(g *group.Group, id string, seen mirrorMark, all bool, hold *mirrorHold) (cmds []*proto.Command, mark mirrorMark) {
	n.View(func(meta *fsm.Machine) {
		g.State().View(func(grp *fsm.Machine) {
			if grp.Group() == 0 {
				// Not a queue group's log yet: its GroupInit moves its
				// settings, and the round after compares everything.
				mark = markOf(meta, grp)
				return
			}
			cmds, mark = mirrorRead(meta, grp, id, seen, all, hold)
		})
	})
	return cmds, mark
}

// placeCommands is the part of a mirror round that one queue placed in
// group id needs (mirrorCommands): its vhost, the vhost's policies and
// its declare, where the group's machine grp lacks them. It reads the
// queue and its vhost only, so a declare costs the same with any number
// of queues; deletes are the group leader's rounds'.
func placeCommands(meta, grp *fsm.Machine, id, vhost, name string) []*proto.Command {
	if !meta.Placing() || grp.Group() == 0 {
		return nil
	}
	d, ok := meta.PlacedDeclare(id, vhost, name)
	if !ok {
		return nil
	}
	var cmds []*proto.Command
	if !grp.VhostExists(vhost) {
		cmds = append(cmds, &proto.Command{Cmd: &proto.Command_VhostPut{VhostPut: &proto.VhostPut{Name: vhost}}})
	}
	for _, operator := range []bool{false, true} {
		cmds = append(cmds, mirrorPolicies(meta.Policies(vhost, operator), grp.Policies(vhost, operator), vhost)...)
	}
	if !groupHolds(meta, grp, vhost, name) {
		cmds = append(cmds, &proto.Command{Cmd: &proto.Command_QueueDeclare{QueueDeclare: d}})
	}
	return cmds
}

// groupHolds reports whether the group machine grp holds queue name of
// vhost as the metadata meta places it: the queue itself, or its name
// ended there under the metadata's record (fsm lease.go), which the
// mirror must not declare again. The record is read only where the group
// lacks the queue.
func groupHolds(meta, grp *fsm.Machine, vhost, name string) bool {
	if grp.HasQueue(vhost, name) {
		return true
	}
	_, at, _ := meta.PlacedAt(vhost, name)
	return grp.EndedUnder(vhost, name, at)
}

// leaseEnds are the metadata commands that delete the queues whose lease
// ended in group id's machine grp and that meta still places there under
// the record they ended (QueueLeaseEnded): the group's leader proposes
// them with its mirror's rounds, and the metadata log applies each once,
// a repeat finding the record gone. The mirror then deletes the name
// from the group, which forgets it.
func leaseEnds(meta, grp *fsm.Machine, id string) []*proto.Command {
	var cmds []*proto.Command
	for _, e := range grp.EndedQueues() {
		g, at, ok := meta.PlacedAt(e.Vhost, e.Name)
		if ok && g == id && (e.PlacedAt == 0 || e.PlacedAt == at) {
			cmds = append(cmds, &proto.Command{Cmd: &proto.Command_QueueLeaseEnded{QueueLeaseEnded: &proto.QueueLeaseEnded{
				Vhost: e.Vhost, Name: e.Name, Group: id, PlacedAt: e.PlacedAt}}})
		}
	}
	return cmds
}

// keepEarlierDeletes is after without the deletes that before did not
// hold. The catch-up between the two reads covers only what the group
// held at the first: every queue in it was placed by a metadata entry
// committed before the catch-up's Tick, so the metadata read after it
// knows whether the queue is still placed here. A queue the group took
// since (another node's declare, placed by a metadata entry after the
// Tick, which this node may not have applied) looks unplaced, and
// deleting it would answer that node's declare with 404.
func keepEarlierDeletes(before, after []*proto.Command) []*proto.Command {
	return slices.DeleteFunc(after, func(c *proto.Command) bool {
		return deletes(c) && !slices.ContainsFunc(before, func(b *proto.Command) bool { return pb.Equal(b, c) })
	})
}

// deletes reports whether a mirrored command deletes a queue or vhost.
func deletes(c *proto.Command) bool {
	switch c.GetCmd().(type) {
	case *proto.Command_QueueDelete, *proto.Command_VhostDelete:
		return true
	}
	return false
}

// mirrorLoop keeps queue group qg's log in line with the metadata, on
// the group's leader, until ctx ends: a round whenever either log
// applied more.
func (n *Node) mirrorLoop(ctx context.Context, qg *queueGroup) {
	backoff := time.Duration(0)
	// Where the last round that went through read both machines: a round
	// with both where they were has nothing to do, and most applies (the
	// message flow) move neither. all has the next round compare
	// everything: the first, and the one after a failure or a refusal.
	var seen mirrorMark
	all := true
	var last time.Time // the start of the last round
	hold := newMirrorHold(n.cfg.PlaceGrace)
	var holdDue time.Time // when the first queue held back is due (zero: none is)
	holdTimer := time.NewTimer(time.Hour)
	holdTimer.Stop()
	defer holdTimer.Stop()
	for {
		_, metaApplied := n.group.Applied().Load()
		_, groupApplied := qg.g.Applied().Load()
		var now mirrorMark
		n.View(func(meta *fsm.Machine) {
			qg.g.State().View(func(grp *fsm.Machine) { now = markOf(meta, grp) })
		})
		var err error
		if now != seen || !holdDue.IsZero() && !time.Now().Before(holdDue) {
			// In a burst of declares, one round takes many (a declaring
			// member brings its own queue itself, PlaceQueue), at the
			// cost of up to mirrorSpacing for a queue declared on a node
			// outside the group.
			if wait := time.Until(last.Add(mirrorSpacing)); wait > 0 {
				t := time.NewTimer(wait)
				select {
				case <-t.C:
				case <-ctx.Done():
					t.Stop()
					return
				}
				continue
			}
			last = time.Now()
			hold.now, hold.declares = last, n.allInGroup(qg.id)
			var res []*proto.Result
			var mark mirrorMark
			_, res, mark, err = n.mirrorRound(ctx, qg.g, qg.id, seen, all, hold)
			if err == nil {
				seen = mark
				all = slices.ContainsFunc(res, func(r *proto.Result) bool { return r.GetCode() != 0 })
			}
			holdDue = hold.settle()
		}
		if ctx.Err() != nil {
			return
		}
		var retry <-chan time.Time
		if err != nil {
			var wait time.Duration
			wait, backoff = retryAfter(err, time.Since(last), backoff)
			n.log.Warn("mirroring the metadata into a queue group failed", "group", qg.id, "err", err, "retry", wait)
			retry = time.After(wait)
			metaApplied, groupApplied = nil, nil
			all = true
		} else {
			backoff = 0
		}
		var held <-chan time.Time
		if !holdDue.IsZero() {
			holdTimer.Reset(max(time.Until(holdDue), 0))
			held = holdTimer.C
		}
		select {
		case <-metaApplied:
		case <-groupApplied:
		case <-retry:
		case <-held:
		case <-ctx.Done():
			return
		}
		holdTimer.Stop()
	}
}

// allInGroup reports whether every node of the cluster (the metadata
// group's voters, and the members gossip knows that have not left) is a
// member of queue group id as the metadata names them: then whoever
// declares a queue placed there places it in the group itself.
func (n *Node) allInGroup(id string) bool {
	in := map[string]bool{}
	n.View(func(m *fsm.Machine) {
		for _, g := range m.QueueGroups() {
			if g.ID == id {
				for _, mem := range g.Members {
					in[mem.ID] = true
				}
			}
		}
	})
	if len(in) == 0 {
		return false
	}
	for _, v := range n.metadataVoters() {
		if !in[v.ID] {
			return false
		}
	}
	for node, m := range n.members.All() {
		if m.Health != HealthLeft && !in[node] {
			return false
		}
	}
	return true
}

// mirrorSpacing is the least time between the starts of two rounds of
// a group leader's mirror.
const mirrorSpacing = 10 * time.Millisecond

// PlaceQueue makes sure the queue the metadata placed in group id exists
// in the group's log, proposing what the group lacks itself rather than
// waiting for the group's leader to (a declare answers once its queue is
// there). A node that does not run the group cannot read its log: the
// group's leader mirrors the queue into it (mirrorLoop), and the caller
// waits for it there (a passive declare through SubmitGroup).
//
// declared is the group's answer to the queue's declare when this call
// proposed it: the queue is new to the group, and the answer is what a
// passive declare would give. It is nil when the group held the queue
// already (its leader's mirror was first) or this node does not run the
// group. ran reports whether this node ran the group: the group's answer
// to a passive declare after is final then, where a node that did not
// has to ask again until the mirror brought the queue. The caller takes
// it from here rather than asking RunsGroup after, as a group may start
// on this node in between, its log not yet holding what the mirror
// brings.
func (n *Node) PlaceQueue(ctx context.Context, id, vhost, name string) (declared *proto.Result, ran bool, err error) {
	qg := n.queueGroup(id)
	if qg == nil {
		if slices.Contains(n.NamedQueueGroups(), id) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("%w: %q", ErrNoSuchGroup, id)
	}
	// The group's log takes queues once its leader made it a queue
	// group's (GroupInit), which this node may not have applied yet.
	for {
		_, applied := qg.g.Applied().Load()
		var k uint32
		qg.g.State().View(func(m *fsm.Machine) { k = m.Group() })
		if k != 0 {
			break
		}
		select {
		case <-applied:
		case <-qg.closing:
			// The node left the group or closes: the caller asks the
			// group's leader, as a node that never ran it does.
			if slices.Contains(n.NamedQueueGroups(), id) {
				return nil, false, nil
			}
			return nil, false, fmt.Errorf("%w: %q", ErrNoSuchGroup, id)
		case <-ctx.Done():
			return nil, true, fmt.Errorf("queue group %q is not ready for queues yet: %w", id, ctx.Err())
		}
	}
	var cmds []*proto.Command
	n.View(func(meta *fsm.Machine) {
		qg.g.State().View(func(grp *fsm.Machine) { cmds = placeCommands(meta, grp, id, vhost, name) })
	})
	if len(cmds) == 0 {
		return nil, true, nil
	}
	res, err := qg.g.Submitter().SubmitBatch(ctx, cmds)
	if err != nil {
		select {
		case <-qg.closing:
			// The node left the group (a grown cluster spread its
			// members) or is closing: what it proposed may have
			// committed, and the caller asks the group's leader, as a
			// node that does not run the group does.
			if errors.Is(err, group.ErrClosed) {
				return nil, false, nil
			}
		default:
		}
		return nil, true, err
	}
	for i, c := range cmds {
		if d := c.GetQueueDeclare(); d != nil && d.GetVhost() == vhost && d.GetName() == name && res[i].GetCode() == 0 {
			return res[i], true, nil
		}
	}
	return nil, true, nil
}

// QueueGroup is the id of the group that holds the queue: a queue group
// for a queue the metadata placed in one, else the metadata group.
func (n *Node) QueueGroup(vhost, name string) string {
	g, _ := n.QueuePlacement(vhost, name)
	return g
}

// QueuePlacement is QueueGroup, and whether the metadata this node
// applied holds the queue at all.
func (n *Node) QueuePlacement(vhost, name string) (id string, ok bool) {
	n.View(func(m *fsm.Machine) { id, ok = m.QueuePlacement(vhost, name) })
	if id == "" {
		id = group.DefaultID
	}
	return id, ok
}

// proposePlacement switches placement on in the metadata log once it is
// asked for, the log is at the level that knows it and names queue
// groups, every group has its members, and each group this node runs was
// made a queue group's by its leader (a node serves the queues of the
// groups it does not run through their members: SubmitGroup and the
// stream of effects, effects.go; a declare waits for its group's log to
// take queues).
func (n *Node) proposePlacement(ctx context.Context) {
	if !n.cfg.PlaceQueues {
		return
	}
	var level uint32
	var groups []fsm.QueueGroup
	var on bool
	n.View(func(m *fsm.Machine) { level, groups, on = m.ProtocolLevel(), m.QueueGroups(), m.Placing() })
	if on || len(groups) == 0 || level < fsm.PlacementLevel {
		return
	}
	for _, g := range groups {
		if len(g.Members) == 0 {
			return
		}
		var k uint32
		if n.ViewGroup(g.ID, func(m *fsm.Machine) { k = m.Group() }) && k == 0 {
			return
		}
	}
	res, err := n.Submit(ctx, &proto.Command{Cmd: &proto.Command_PlaceQueues{PlaceQueues: &proto.PlaceQueues{}}})
	switch {
	case err != nil:
		n.log.Warn("switching queue placement on failed", "err", err)
	case res.GetCode() != 0:
		n.log.Warn("queue placement refused", "code", res.GetCode(), "text", res.GetText())
	default:
		n.log.Info("new queues are placed into queue groups", "index", res.GetIndex())
	}
}

// GroupID is the id of the group whose log has number k (fsm
// Machine.Group: 0 for the metadata group, a queue group's position in
// the metadata log's list from 1), "" for a number the log does not name.
func (n *Node) GroupID(k uint32) string {
	if k == 0 {
		return group.DefaultID
	}
	var id string
	n.View(func(m *fsm.Machine) {
		if gs := m.QueueGroups(); int(k) <= len(gs) {
			id = gs[k-1].ID
		}
	})
	return id
}

// RunningQueueGroups are the ids of the queue groups this node runs,
// sorted.
func (n *Node) RunningQueueGroups() []string {
	qgs := n.runningQueueGroups()
	ids := make([]string, len(qgs))
	for i, qg := range qgs {
		ids[i] = qg.id
	}
	return ids
}

// NamedQueueGroups are the ids of the queue groups the metadata log this
// node applied names, in the log's order: those it runs and those it
// does not.
func (n *Node) NamedQueueGroups() []string {
	var ids []string
	n.View(func(m *fsm.Machine) {
		for _, g := range m.QueueGroups() {
			ids = append(ids, g.ID)
		}
	})
	return ids
}

// RunsQueueGroups reports whether this node runs any queue group.
func (n *Node) RunsQueueGroups() bool {
	n.qmu.Lock()
	defer n.qmu.Unlock()
	return len(n.byID) > 0
}

// CatchUp returns once this node applied every metadata entry committed
// before the call: a Tick through the metadata log, whose result comes
// once this node applied it. It is how a node that reads its own view of
// the metadata (routing, placement, the mirror) makes sure the view is
// not behind a change made on another node before it acts on an absence.
func (n *Node) CatchUp(ctx context.Context) error {
	_, err := n.Submit(ctx, &proto.Command{Cmd: &proto.Command_Tick{Tick: &proto.Tick{}}})
	return err
}
