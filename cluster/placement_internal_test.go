package cluster

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand"
	"slices"
	"strings"
	"testing"
	"time"

	pb "google.golang.org/protobuf/proto"

	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/fsm/fsmtest"
	"github.com/raftmq/raftmq/proto"
)

func mirrorCmd(c *proto.Command) string {
	switch c := c.GetCmd().(type) {
	case *proto.Command_VhostPut:
		return "vhost+" + c.VhostPut.GetName()
	case *proto.Command_VhostDelete:
		return "vhost-" + c.VhostDelete.GetName()
	case *proto.Command_PolicySet:
		return "policy+" + c.PolicySet.GetVhost() + "/" + c.PolicySet.GetName()
	case *proto.Command_PolicyClear:
		return "policy-" + c.PolicyClear.GetVhost() + "/" + c.PolicyClear.GetName()
	case *proto.Command_QueueDeclare:
		return "queue+" + c.QueueDeclare.GetVhost() + "/" + c.QueueDeclare.GetName()
	case *proto.Command_QueueDelete:
		return "queue-" + c.QueueDelete.GetVhost() + "/" + c.QueueDelete.GetName()
	}
	return "?"
}

// mirrorRound applies to the group machine what mirrorCommands gives,
// and returns their names.
func mirrorRound(t *testing.T, meta, grp *fsm.Machine, id string) []string {
	t.Helper()
	cmds := mirrorCommands(meta, grp, id)
	var names []string
	for _, c := range cmds {
		names = append(names, mirrorCmd(c))
		if r, _ := fsmtest.One(t, grp, 10, c); r.GetCode() != 0 {
			t.Fatalf("%s refused in the group: %s", mirrorCmd(c), r.GetText())
		}
	}
	return names
}

func policySet(vhost, name string, ttl int64) *proto.Command {
	return &proto.Command{Cmd: &proto.Command_PolicySet{PolicySet: &proto.PolicySet{Vhost: vhost, Name: name, Pattern: ".*",
		ApplyTo: "queues", Definition: &proto.PolicyDefinition{MessageTtl: pb.Int64(ttl)}}}}
}

func vhostPut(name string) *proto.Command {
	return &proto.Command{Cmd: &proto.Command_VhostPut{VhostPut: &proto.VhostPut{Name: name}}}
}

func queueDeclare(vhost, name string) *proto.Command {
	return &proto.Command{Cmd: &proto.Command_QueueDeclare{QueueDeclare: &proto.QueueDeclare{Vhost: vhost, Name: name, Durable: true}}}
}

// The mirror brings a queue group's log in line with what the metadata
// places in it, round after round: vhosts and their policies before the
// queues, a policy changed or cleared, a queue or a vhost deleted in
// the metadata deleted in the group; queues of other groups and queues
// kept in the metadata group are not the group's; once in line, nothing.
func TestMirror_BringsTheGroupInLineWithTheMetadata(t *testing.T) {
	meta := fsmtest.New(t)
	fsmtest.Apply(t, meta, 1, vhostPut("/"), vhostPut("v2"),
		&proto.Command{Cmd: &proto.Command_QueueGroups{QueueGroups: &proto.QueueGroups{Groups: []*proto.QueueGroup{
			{Id: "q1", Members: []*proto.QueueGroupMember{{Id: "a", Addr: "a:1"}}},
			{Id: "q2", Members: []*proto.QueueGroupMember{{Id: "a", Addr: "a:1"}}}}}}},
		queueDeclare("/", "kept"), // before placement: stays in the metadata
		fsmtest.PlaceQueues(),
		policySet("/", "ttl", 1000),
		queueDeclare("/", "a"), queueDeclare("/", "b"), queueDeclare("v2", "c"), queueDeclare("/", "e"), queueDeclare("/", "f"))
	if g, _ := meta.QueuePlacement("/", "a"); g != "q1" {
		t.Fatalf("a placed in %q, want q1", g)
	}
	grp := fsmtest.New(t)
	fsmtest.Apply(t, grp, 1, fsmtest.GroupInit(1))

	got := mirrorRound(t, meta, grp, "q1")
	// The group's log holds "/" already (fsmtest's machine has it).
	want := []string{"policy+//ttl", "queue+//a", "queue+//f", "vhost+v2", "queue+v2/c"}
	if !slices.Equal(got, want) {
		t.Fatalf("first round %v, want %v", got, want)
	}
	if got := mirrorRound(t, meta, grp, "q1"); len(got) != 0 {
		t.Fatalf("in line, yet the mirror proposes %v", got)
	}
	for _, q := range []string{"b", "e", "kept"} {
		if _, ok := grp.Queue("/", q); ok {
			t.Fatalf("queue %s, not q1's, was declared in q1", q)
		}
	}

	// The policy changes, another goes away, a queue and a vhost are
	// deleted in the metadata.
	fsmtest.Apply(t, meta, 2, policySet("/", "ttl", 2000), policySet("/", "short", 10))
	fsmtest.Apply(t, grp, 2, policySet("/", "stale", 5))
	fsmtest.Apply(t, meta, 3, &proto.Command{Cmd: &proto.Command_QueueDelete{QueueDelete: &proto.QueueDelete{Vhost: "/", Name: "f"}}},
		&proto.Command{Cmd: &proto.Command_VhostDelete{VhostDelete: &proto.VhostDelete{Name: "v2"}}})
	got = mirrorRound(t, meta, grp, "q1")
	want = []string{"queue-//f", "vhost-v2", "policy+//short", "policy+//ttl", "policy-//stale"}
	if !slices.Equal(got, want) {
		t.Fatalf("after the changes %v, want %v", got, want)
	}
	if ps := grp.Policies("/", false); len(ps) != 2 || ps[1].GetDefinition().GetMessageTtl() != 2000 {
		t.Fatalf("group policies %v", ps)
	}
	if got := mirrorRound(t, meta, grp, "q1"); len(got) != 0 {
		t.Fatalf("in line again, yet the mirror proposes %v", got)
	}
}

// A mirror that found something to delete catches up with the metadata
// log and reads again; what it deletes then is only what the group held
// at its first read. A queue another node placed and mirrored into the
// group in between was placed by a metadata entry after the catch-up,
// which this node may not have applied: it looks unplaced, yet it is the
// other node's fresh queue, and deleting it answered that node's declare
// with 404.
func TestMirror_DeletesOnlyWhatTheGroupHeldBeforeTheCatchUp(t *testing.T) {
	meta := fsmtest.New(t)
	fsmtest.Apply(t, meta, 1,
		&proto.Command{Cmd: &proto.Command_QueueGroups{QueueGroups: &proto.QueueGroups{Groups: []*proto.QueueGroup{
			{Id: "q1", Members: []*proto.QueueGroupMember{{Id: "a", Addr: "a:1"}}}}}}},
		fsmtest.PlaceQueues(), queueDeclare("/", "gone"))
	grp := fsmtest.New(t)
	fsmtest.Apply(t, grp, 1, fsmtest.GroupInit(1))
	if got := mirrorRound(t, meta, grp, "q1"); !slices.Equal(got, []string{"queue+//gone"}) {
		t.Fatalf("first round %v", got)
	}
	// The metadata deletes "gone"; the mirror's first read finds it.
	fsmtest.Apply(t, meta, 2, &proto.Command{Cmd: &proto.Command_QueueDelete{QueueDelete: &proto.QueueDelete{Vhost: "/", Name: "gone"}}})
	before := mirrorCommands(meta, grp, "q1")
	// Meanwhile another node's declare of "fresh" reaches the group; this
	// node's metadata has not applied it.
	fsmtest.Apply(t, grp, 2, queueDeclare("/", "fresh"))
	after := mirrorCommands(meta, grp, "q1")
	if !slices.ContainsFunc(after, func(c *proto.Command) bool { return mirrorCmd(c) == "queue-//fresh" }) {
		t.Fatalf("the second read %v does not take the fresh queue for unplaced: the case is not made", names(after))
	}
	if got := names(keepEarlierDeletes(before, after)); !slices.Equal(got, []string{"queue-//gone"}) {
		t.Fatalf("the mirror proposes %v, want only the delete of the queue the group held before: [queue-//gone]", got)
	}
}

func names(cmds []*proto.Command) []string {
	var out []string
	for _, c := range cmds {
		out = append(out, mirrorCmd(c))
	}
	return out
}

// A declaring node brings only its queue into the group: the vhost and
// its policies where the group lacks them, then the declare; nothing for
// a queue of another group, a queue the group holds, or the other
// queues the group lacks (the group leader's rounds bring those).
func TestPlaceCommands_BringOnlyTheDeclaredQueue(t *testing.T) {
	meta := fsmtest.New(t)
	fsmtest.Apply(t, meta, 1, vhostPut("v2"),
		&proto.Command{Cmd: &proto.Command_QueueGroups{QueueGroups: &proto.QueueGroups{Groups: []*proto.QueueGroup{
			{Id: "q1", Members: []*proto.QueueGroupMember{{Id: "a", Addr: "a:1"}}},
			{Id: "q2", Members: []*proto.QueueGroupMember{{Id: "a", Addr: "a:1"}}}}}}},
		fsmtest.PlaceQueues(), policySet("v2", "ttl", 1000),
		queueDeclare("v2", "a"), queueDeclare("v2", "b"), queueDeclare("v2", "c"))
	grp := fsmtest.New(t)
	fsmtest.Apply(t, grp, 1, fsmtest.GroupInit(1))
	if got := names(placeCommands(meta, grp, "q1", "v2", "c")); !slices.Equal(got, []string{"vhost+v2", "policy+v2/ttl", "queue+v2/c"}) {
		t.Fatalf("placing c: %v", got)
	}
	if got := placeCommands(meta, grp, "q1", "v2", "b"); got != nil {
		t.Fatalf("b is q2's, yet placing it in q1 proposes %v", names(got))
	}
	for _, c := range placeCommands(meta, grp, "q1", "v2", "c") {
		fsmtest.One(t, grp, 2, c)
	}
	if got := placeCommands(meta, grp, "q1", "v2", "c"); got != nil {
		t.Fatalf("c is in the group, yet placing it proposes %v", names(got))
	}
	if grp.HasQueue("v2", "a") {
		t.Fatal("placing c brought a too")
	}
}

// A mirror that looks only at the queues declared or deleted since its
// last round (mirrorRead) proposes what a comparison of everything
// (mirrorCommands) would, through declares and deletes on both sides
// (the metadata's, a member's own placing, a queue the group deleted
// itself), vhosts and policies that come and go, and a group machine
// restored from a snapshot; and after each round the two are in line.
func TestMirrorRead_ProposesWhatAFullComparisonWould(t *testing.T) {
	for seed := int64(1); seed <= 20; seed++ {
		rng := rand.New(rand.NewSource(seed))
		meta := fsmtest.New(t)
		fsmtest.Apply(t, meta, 1, vhostPut("v"),
			&proto.Command{Cmd: &proto.Command_QueueGroups{QueueGroups: &proto.QueueGroups{Groups: []*proto.QueueGroup{
				{Id: "q1", Members: []*proto.QueueGroupMember{{Id: "a", Addr: "a:1"}}},
				{Id: "q2", Members: []*proto.QueueGroupMember{{Id: "a", Addr: "a:1"}}}}}}},
			fsmtest.PlaceQueues())
		grp := fsmtest.New(t)
		fsmtest.Apply(t, grp, 1, fsmtest.GroupInit(1))
		var seen mirrorMark
		all, incremental := true, 0
		vhosts := []string{"/", "v", "w"}
		for step := range 300 {
			stamp := int64(2 + step)
			vh, name := vhosts[rng.Intn(len(vhosts))], fmt.Sprint("q", rng.Intn(25))
			switch op := rng.Intn(20); {
			case op < 8:
				fsmtest.One(t, meta, stamp, queueDeclare(vh, name))
			case op < 12:
				fsmtest.One(t, meta, stamp, &proto.Command{Cmd: &proto.Command_QueueDelete{QueueDelete: &proto.QueueDelete{Vhost: vh, Name: name}}})
			case op < 15: // a member placing the queue it declared
				for _, c := range placeCommands(meta, grp, "q1", vh, name) {
					fsmtest.One(t, grp, stamp, c)
				}
			case op < 17: // the group deleting a queue itself
				fsmtest.One(t, grp, stamp, &proto.Command{Cmd: &proto.Command_QueueDelete{QueueDelete: &proto.QueueDelete{Vhost: vh, Name: name}}})
			case op == 17:
				fsmtest.One(t, meta, stamp, policySet(vh, "p", int64(rng.Intn(3)+1)))
			case op == 18:
				if rng.Intn(2) == 0 {
					fsmtest.One(t, meta, stamp, vhostPut("w"))
				} else {
					fsmtest.One(t, meta, stamp, &proto.Command{Cmd: &proto.Command_VhostDelete{VhostDelete: &proto.VhostDelete{Name: "w"}}})
				}
			default:
				grp = restored(t, grp)
			}
			if rng.Intn(3) == 0 {
				continue // changes pile up between rounds
			}
			got, mark := mirrorRead(meta, grp, "q1", seen, all, nil)
			want := mirrorCommands(meta, grp, "q1")
			if g, w := slices.Sorted(slices.Values(names(got))), slices.Sorted(slices.Values(names(want))); !slices.Equal(g, w) {
				t.Fatalf("seed %d step %d: the mirror proposes %v, a full comparison %v", seed, step, g, w)
			}
			if mark.settings == seen.settings && !all {
				incremental++
			}
			for _, c := range got {
				if r, _ := fsmtest.One(t, grp, stamp, c); r.GetCode() != 0 {
					t.Fatalf("seed %d step %d: %s refused: %s", seed, step, mirrorCmd(c), r.GetText())
				}
			}
			if rest := mirrorCommands(meta, grp, "q1"); len(rest) != 0 {
				t.Fatalf("seed %d step %d: after the round the group still lacks %v", seed, step, names(rest))
			}
			seen, all = mark, false
		}
		if incremental < 50 {
			t.Fatalf("seed %d: only %d rounds looked at the changed queues alone: the case is not made", seed, incremental)
		}
	}
}

// restored is m after a snapshot and a restore.
func restored(t *testing.T, m *fsm.Machine) *fsm.Machine {
	t.Helper()
	s, err := m.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := s.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	if rel, ok := s.(fsm.Releaser); ok {
		rel.Release()
	}
	r := fsm.New()
	if err := r.Restore(&buf); err != nil {
		t.Fatal(err)
	}
	return r
}

// queueNames are the queue declares and deletes among cmds.
func queueNames(cmds []*proto.Command) []string {
	var out []string
	for _, n := range names(cmds) {
		if strings.HasPrefix(n, "queue") {
			out = append(out, n)
		}
	}
	return out
}

// placingGroup is a metadata machine that places queues in its one group
// q1, the group's machine, and apply, which applies commands to the group
// and fails t on a refusal: a mirror's proposal the group refuses is a bug
// the test would otherwise miss.
func placingGroup(t *testing.T) (meta, grp *fsm.Machine, apply func([]*proto.Command)) {
	t.Helper()
	meta = fsmtest.New(t)
	fsmtest.Apply(t, meta, 1, &proto.Command{Cmd: &proto.Command_QueueGroups{QueueGroups: &proto.QueueGroups{Groups: []*proto.QueueGroup{
		{Id: "q1", Members: []*proto.QueueGroupMember{{Id: "a", Addr: "a:1"}}}}}}}, fsmtest.PlaceQueues())
	grp = fsmtest.New(t)
	fsmtest.Apply(t, grp, 1, fsmtest.GroupInit(1))
	apply = func(cmds []*proto.Command) {
		t.Helper()
		for _, c := range cmds {
			if r, _ := fsmtest.One(t, grp, 2, c); r.GetCode() != 0 {
				t.Fatalf("%s refused: %s", mirrorCmd(c), r.GetText())
			}
		}
	}
	return meta, grp, apply
}

// Where every node is a member of the group, the mirror leaves a queue
// it finds missing to the member that declared it for the grace: that
// member places it itself, and the mirror would write its declare into
// the group's log a second time. A queue still missing when the grace is
// over is declared, whatever else changed meanwhile, and one placed or
// deleted meanwhile is forgotten; a round that compares everything holds
// back alike. Without a hold, it is declared at once.
func TestMirrorRead_LeavesANewQueueToItsMemberForTheGrace(t *testing.T) {
	meta, grp, apply := placingGroup(t)
	cmds, seen := mirrorRead(meta, grp, "q1", mirrorMark{}, true, nil)
	apply(cmds)

	fsmtest.Apply(t, meta, 2, queueDeclare("/", "placed"), queueDeclare("/", "orphan"), queueDeclare("/", "gone"))
	if got, _ := mirrorRead(meta, grp, "q1", seen, false, nil); !slices.Equal(queueNames(got), []string{"queue+//gone", "queue+//orphan", "queue+//placed"}) {
		t.Fatalf("without a hold the mirror proposes %v", queueNames(got))
	}
	hold := newMirrorHold(DefaultPlaceGrace)
	hold.declares = true
	t0 := time.Unix(1000, 0)
	round := func(at time.Duration) []string {
		t.Helper()
		hold.now = t0.Add(at)
		cmds, mark := mirrorRead(meta, grp, "q1", seen, false, hold)
		apply(cmds)
		seen = mark
		return queueNames(cmds)
	}
	if got := round(0); len(got) != 0 {
		t.Fatalf("at once the mirror proposes %v", got)
	}
	if due := hold.settle(); !due.Equal(t0.Add(DefaultPlaceGrace)) {
		t.Fatalf("the held queues are due at %v, want %v", due, t0.Add(DefaultPlaceGrace))
	}
	// The member places its queue; another is deleted.
	apply(placeCommands(meta, grp, "q1", "/", "placed"))
	fsmtest.Apply(t, meta, 3, &proto.Command{Cmd: &proto.Command_QueueDelete{QueueDelete: &proto.QueueDelete{Vhost: "/", Name: "gone"}}})
	if got := round(DefaultPlaceGrace / 2); len(got) != 0 {
		t.Fatalf("within the grace the mirror proposes %v", got)
	}
	hold.settle()
	if got := slices.Collect(maps.Keys(hold.since)); len(got) != 1 || got[0].Name != "orphan" {
		t.Fatalf("held %v, want only orphan", got)
	}
	// Nothing changed since in either log: the grace alone brings it.
	if got := round(DefaultPlaceGrace); !slices.Equal(got, []string{"queue+//orphan"}) {
		t.Fatalf("once the grace is over the mirror proposes %v, want orphan's declare", got)
	}
	if due := hold.settle(); !due.IsZero() || len(hold.since) != 0 {
		t.Fatalf("after the declare: due %v, held %v", due, hold.since)
	}
	if rest := mirrorCommands(meta, grp, "q1"); len(rest) != 0 {
		t.Fatalf("the group still lacks %v", names(rest))
	}

	// A round that compares everything (a new leader's first) holds a
	// missing queue back too.
	fsmtest.Apply(t, meta, 4, queueDeclare("/", "late"))
	hold.now = t0.Add(2 * DefaultPlaceGrace)
	if got, _ := mirrorRead(meta, grp, "q1", seen, true, hold); len(queueNames(got)) != 0 {
		t.Fatalf("a full comparison within the grace proposes %v", queueNames(got))
	}
	hold.settle()
	hold.now = t0.Add(3 * DefaultPlaceGrace)
	if got, _ := mirrorRead(meta, grp, "q1", seen, true, hold); !slices.Equal(queueNames(got), []string{"queue+//late"}) {
		t.Fatalf("a full comparison after the grace proposes %v, want late's declare", queueNames(got))
	}
}

// A placed queue whose lease ran out in its group (fsm lease.go) is not
// declared there again while the metadata places it under the same
// record: the mirror's rounds, full or by name, leave it alone, and the
// group's leader has the metadata delete the record, once. The next round
// then has the group forget the name. A queue deleted and declared again
// in the metadata meanwhile is another record: no lease end goes for it,
// and the mirror declares it, fresh.
func TestMirror_AQueueWhoseLeaseEndedLeavesTheMetadataThenTheGroup(t *testing.T) {
	expires := &proto.Command{Cmd: &proto.Command_PolicySet{PolicySet: &proto.PolicySet{Vhost: "/", Name: "exp", Pattern: "^l",
		ApplyTo: "queues", Definition: &proto.PolicyDefinition{Expires: pb.Int64(100)}}}}
	meta := fsmtest.New(t)
	fsmtest.Apply(t, meta, 1,
		&proto.Command{Cmd: &proto.Command_QueueGroups{QueueGroups: &proto.QueueGroups{Groups: []*proto.QueueGroup{
			{Id: "q1", Members: []*proto.QueueGroupMember{{Id: "a", Addr: "a:1"}}}}}}},
		fsmtest.PlaceQueues(), expires, queueDeclare("/", "lq"), queueDeclare("/", "lr"))
	grp := fsmtest.New(t)
	fsmtest.Apply(t, grp, 1, fsmtest.GroupInit(1))
	if got := mirrorRound(t, meta, grp, "q1"); !slices.Equal(got, []string{"policy+//exp", "queue+//lq", "queue+//lr"}) {
		t.Fatalf("first round %v", got)
	}
	expire := func(name string) {
		t.Helper()
		r, _ := fsmtest.One(t, grp, 1000, &proto.Command{Cmd: &proto.Command_ExpireQueue{ExpireQueue: &proto.ExpireQueue{Queue: &proto.QueueRef{Vhost: "/", Name: name}}}})
		if r.GetQueue() != name || !grp.Ended("/", name) {
			t.Fatalf("%s's lease did not end in its group: %v", name, r)
		}
	}
	expire("lq")
	expire("lr")
	if got := mirrorRound(t, meta, grp, "q1"); len(got) != 0 {
		t.Fatalf("the mirror brings back a queue whose lease ended: %v", got)
	}
	keys := []fsm.QueueKey{{Vhost: "/", Name: "lq"}, {Vhost: "/", Name: "lr"}}
	if got := mirrorNamed(meta, grp, "q1", slices.Clone(keys), nil); len(got) != 0 {
		t.Fatalf("a round by name brings back a queue whose lease ended: %v", got)
	}

	// lr is deleted and declared again in the metadata before its lease
	// end reaches it: another record.
	fsmtest.Apply(t, meta, 2, &proto.Command{Cmd: &proto.Command_QueueDelete{QueueDelete: &proto.QueueDelete{Vhost: "/", Name: "lr"}}})
	fsmtest.Apply(t, meta, 3, queueDeclare("/", "lr"))
	ends := leaseEnds(meta, grp, "q1")
	if len(ends) != 1 || ends[0].GetQueueLeaseEnded().GetName() != "lq" {
		t.Fatalf("lease ends %v, want lq's alone", ends)
	}
	fsmtest.Apply(t, meta, 4, ends...)
	fsmtest.Apply(t, meta, 5, ends...) // a repeat finds the record gone
	if _, ok := meta.QueuePlacement("/", "lq"); ok {
		t.Fatal("the metadata still places lq after its lease end")
	}
	if _, ok := meta.QueuePlacement("/", "lr"); !ok {
		t.Fatal("the lease end of lr's old record deleted the new one")
	}
	if got := leaseEnds(meta, grp, "q1"); len(got) != 0 {
		t.Fatalf("lease ends again: %v", got)
	}
	if got := mirrorRound(t, meta, grp, "q1"); !slices.Equal(got, []string{"queue-//lq", "queue+//lr"}) {
		t.Fatalf("after the lease end %v, want lq forgotten and lr's new record declared", got)
	}
	if grp.Ended("/", "lq") || grp.Ended("/", "lr") || !grp.HasQueue("/", "lr") || grp.HasQueue("/", "lq") {
		t.Fatalf("the group still holds an ended name: %v", grp.EndedQueues())
	}
	if got := mirrorRound(t, meta, grp, "q1"); len(got) != 0 {
		t.Fatalf("in line, yet the mirror proposes %v", got)
	}
}

// A leader's mirror leaves a queue the metadata deleted in the group for
// the grace, member or not, to the node that deleted it (which counts
// its messages for the client's delete-ok there), and deletes it itself
// once the grace is over; a round that compares everything holds back
// alike. Without a hold, it is deleted at once.
func TestMirrorRead_LeavesADeletedQueueToItsNodeForTheGrace(t *testing.T) {
	meta, grp, apply := placingGroup(t)
	fsmtest.Apply(t, meta, 2, queueDeclare("/", "counted"), queueDeclare("/", "left"))
	cmds, seen := mirrorRead(meta, grp, "q1", mirrorMark{}, true, nil)
	apply(cmds)
	del := func(name string) *proto.Command {
		return &proto.Command{Cmd: &proto.Command_QueueDelete{QueueDelete: &proto.QueueDelete{Vhost: "/", Name: name}}}
	}
	fsmtest.Apply(t, meta, 3, del("counted"), del("left"))
	if got, _ := mirrorRead(meta, grp, "q1", seen, false, nil); !slices.Equal(queueNames(got), []string{"queue-//counted", "queue-//left"}) {
		t.Fatalf("without a hold the mirror proposes %v", queueNames(got))
	}
	hold := newMirrorHold(DefaultPlaceGrace) // declares not held: not every node is a member
	t0 := time.Unix(1000, 0)
	round := func(at time.Duration, all bool) []string {
		t.Helper()
		hold.now = t0.Add(at)
		cmds, mark := mirrorRead(meta, grp, "q1", seen, all, hold)
		apply(cmds)
		seen = mark
		hold.settle()
		return queueNames(cmds)
	}
	if got := round(0, false); len(got) != 0 {
		t.Fatalf("at once the mirror proposes %v", got)
	}
	// The deleting node deletes its queue from the group.
	apply([]*proto.Command{del("counted")})
	if got := round(DefaultPlaceGrace/2, true); len(got) != 0 {
		t.Fatalf("within the grace a full comparison proposes %v", got)
	}
	if got := slices.Collect(maps.Keys(hold.since)); len(got) != 1 || got[0].Name != "left" {
		t.Fatalf("held %v, want only left", got)
	}
	if got := round(DefaultPlaceGrace, false); !slices.Equal(got, []string{"queue-//left"}) {
		t.Fatalf("once the grace is over the mirror proposes %v, want left's delete", got)
	}
	if rest := mirrorCommands(meta, grp, "q1"); len(rest) != 0 || len(hold.since) != 0 {
		t.Fatalf("the group still differs by %v; held %v", names(rest), hold.since)
	}
}
