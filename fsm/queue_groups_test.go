package fsm_test

import (
	"slices"
	"testing"

	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/fsm/fsmtest"
	"github.com/raftmq/raftmq/proto"
)

func groupSpec(id string, members ...string) *proto.QueueGroup {
	g := &proto.QueueGroup{Id: id}
	for _, m := range members {
		g.Members = append(g.Members, &proto.QueueGroupMember{Id: m, Addr: m + ":7000"})
	}
	return g
}

func queueGroupsCmd(gs ...*proto.QueueGroup) *proto.Command {
	return &proto.Command{Cmd: &proto.Command_QueueGroups{QueueGroups: &proto.QueueGroups{Groups: gs}}}
}

func groupIDs(m *fsm.Machine) []string {
	return idsOf(m.QueueGroups(), func(g fsm.QueueGroup) string { return g.ID })
}

// idsOf is the id of each of xs, in order.
func idsOf[T any](xs []T, id func(T) string) []string {
	var ids []string
	for _, x := range xs {
		ids = append(ids, id(x))
	}
	return ids
}

// QueueGroups only adds: a group the log holds keeps its members when a
// later command names it again, so every member bootstraps the same
// configuration whatever was proposed after.
func TestQueueGroups_AddOnlyAndKeepMembers(t *testing.T) {
	m := fsmtest.New(t)
	applyOK(t, m, 2, queueGroupsCmd(groupSpec("g1", "a", "b", "c"), groupSpec("g2", "b", "c", "a")))
	kept := m.QueueGroups()
	applyOK(t, m, 3, queueGroupsCmd(groupSpec("g2", "x"), groupSpec("g3", "c", "a", "b"), groupSpec("g3", "y")))
	if got := groupIDs(m); !slices.Equal(got, []string{"g1", "g2", "g3"}) {
		t.Fatalf("groups %v", got)
	}
	g := m.QueueGroups()
	if g[1].Members[0].ID != "b" || len(g[1].Members) != 3 || g[2].Members[0].ID != "c" || len(g[2].Members) != 3 {
		t.Fatalf("members changed: %+v", g)
	}
	if len(kept) != 2 {
		t.Fatalf("a list returned before changed: %+v", kept)
	}
	if g[0].Members[0].Addr != "a:7000" {
		t.Fatalf("address %q", g[0].Members[0].Addr)
	}
}

// The groups are in the snapshot and the digest from format 12 on; a
// state below level 15 writes format 11, which the release before reads,
// and one at level 15 format 12.
func TestQueueGroups_SnapshotAndDigest(t *testing.T) {
	m := fsmtest.New(t)
	before := m.Digest()
	applyOK(t, m, 2, queueGroupsCmd(groupSpec("g1", "a", "b", "c")))
	if m.Digest() == before {
		t.Fatal("the digest does not change with a queue group")
	}
	n := roundTrip(t, m)
	if got := groupIDs(n); !slices.Equal(got, []string{"g1"}) || len(n.QueueGroups()[0].Members) != 3 {
		t.Fatalf("restored groups %+v", n.QueueGroups())
	}
	at15 := fsmtest.NewAt(t, 15)
	applyOK(t, at15, 2, queueGroupsCmd(groupSpec("g1", "a", "b", "c")))
	if b, _ := snapshotBytes(t, at15); b[4] != 12 {
		t.Fatalf("a level 15 state wrote format %d, want 12", b[4])
	}
	if n := roundTrip(t, at15); len(n.QueueGroups()) != 1 || len(n.QueueGroups()[0].Members) != 3 {
		t.Fatalf("restored from format 12: %+v", n.QueueGroups())
	}
	old := fsmtest.NewAt(t, 14)
	if b, _ := snapshotBytes(t, old); b[4] != 11 {
		t.Fatalf("a level 14 state wrote format %d, want 11", b[4])
	}
}

func TestQueueGroups_Validate(t *testing.T) {
	if got := fsm.CommandProtocol(queueGroupsCmd(groupSpec("g1", "a"))); got != fsm.QueueGroupLevel {
		t.Fatalf("CommandProtocol = %d, want %d", got, fsm.QueueGroupLevel)
	}
	many := make([]string, fsm.MaxGroupMembers+1)
	for i := range many {
		many[i] = string(rune('a' + i))
	}
	for name, c := range map[string]*proto.Command{
		"no group":     queueGroupsCmd(),
		"bad id":       queueGroupsCmd(groupSpec("G/1", "a")),
		"empty id":     queueGroupsCmd(groupSpec("", "a")),
		"no member":    queueGroupsCmd(groupSpec("g1")),
		"too many":     queueGroupsCmd(groupSpec("g1", many...)),
		"member twice": queueGroupsCmd(groupSpec("g1", "a", "a")),
		"no address":   queueGroupsCmd(&proto.QueueGroup{Id: "g1", Members: []*proto.QueueGroupMember{{Id: "a"}}}),
		"empty member": queueGroupsCmd(&proto.QueueGroup{Id: "g1", Members: []*proto.QueueGroupMember{{Addr: "x:1"}}}),
	} {
		if err := fsm.Validate(c, fsm.Limits{}); err == nil {
			t.Errorf("%s: passed", name)
		}
	}
}

// A log holds at most MaxQueueGroups groups: the command that would
// pass it is refused whole, on every replica alike.
func TestQueueGroups_AtMostMax(t *testing.T) {
	m := fsmtest.New(t)
	var gs []*proto.QueueGroup
	for i := 0; i < fsm.MaxQueueGroups; i++ {
		gs = append(gs, groupSpec("g"+string(rune('a'+i/26))+string(rune('a'+i%26)), "a"))
	}
	applyOK(t, m, 2, queueGroupsCmd(gs...))
	res, _ := fsmtest.Apply(t, m, 3, queueGroupsCmd(groupSpec("one-more", "a")))
	if res[0].GetCode() == 0 || len(m.QueueGroups()) != fsm.MaxQueueGroups {
		t.Fatalf("%v, %d groups", res[0], len(m.QueueGroups()))
	}
}

func groupMembersCmd(id string, epoch uint64, members ...string) *proto.Command {
	return fsm.GroupMembersCommand(fsm.QueueGroup{ID: id, Members: membersOf(members...), Epoch: epoch})
}

func membersOf(ids ...string) []fsm.GroupMember {
	var ms []fsm.GroupMember
	for _, id := range ids {
		ms = append(ms, fsm.GroupMember{ID: id, Addr: id + ":7000"})
	}
	return ms
}

func memberIDs(g fsm.QueueGroup) []string {
	return idsOf(g.Members, func(m fsm.GroupMember) string { return m.ID })
}

// GroupMembers sets a group's members in the order given and counts
// the changes in the group's epoch; a list returned before stays as it
// was; a group the log does not hold, or members worked out from
// another epoch, are refused and nothing changes.
func TestGroupMembers_SetsMembersAndEpoch(t *testing.T) {
	m := fsmtest.New(t)
	applyOK(t, m, 2, queueGroupsCmd(groupSpec("g1", "a", "b", "c"), groupSpec("g2", "b", "c", "a")))
	kept := m.QueueGroups()
	applyOK(t, m, 3, groupMembersCmd("g2", 0, "d", "c", "a", "b"))
	g := m.QueueGroups()
	if !slices.Equal(memberIDs(g[1]), []string{"d", "c", "a", "b"}) || g[1].Epoch != 1 || g[0].Epoch != 0 || g[1].Members[0].Addr != "d:7000" {
		t.Fatalf("groups %+v", g)
	}
	if !slices.Equal(memberIDs(kept[1]), []string{"b", "c", "a"}) || kept[1].Epoch != 0 {
		t.Fatalf("a list returned before changed: %+v", kept)
	}
	applyOK(t, m, 4, groupMembersCmd("g2", 1, "b"))
	if g := m.QueueGroups()[1]; !slices.Equal(memberIDs(g), []string{"b"}) || g.Epoch != 2 || !g.HasMember("b") || g.HasMember("d") {
		t.Fatalf("group %+v", g)
	}
	before := m.QueueGroups()
	res, _ := fsmtest.Apply(t, m, 5, groupMembersCmd("g3", 0, "a"))
	if res[0].GetCode() != 404 || !slices.EqualFunc(m.QueueGroups(), before, func(a, b fsm.QueueGroup) bool { return a.ID == b.ID && a.Epoch == b.Epoch }) {
		t.Fatalf("unknown group: %v", res[0])
	}
	// Members worked out from an epoch the group has left are refused:
	// they would undo the change in between.
	res, _ = fsmtest.Apply(t, m, 6, groupMembersCmd("g2", 1, "a", "b", "c"))
	if res[0].GetCode() != 406 || m.QueueGroups()[1].Epoch != 2 {
		t.Fatalf("stale epoch: %v", res[0])
	}
	// QueueGroups naming the group again changes nothing.
	applyOK(t, m, 6, queueGroupsCmd(groupSpec("g2", "x", "y", "z")))
	if g := m.QueueGroups()[1]; !slices.Equal(memberIDs(g), []string{"b"}) || g.Epoch != 2 {
		t.Fatalf("group %+v", g)
	}
}

// The epoch is in the snapshot and the digest from format 13 (level 16)
// on, so two replicas that differ in it differ in their digest, and a
// restored node knows whether a group's members are those it was
// created with.
func TestGroupMembers_SnapshotAndDigest(t *testing.T) {
	a, b := fsmtest.NewAt(t, 16), fsmtest.NewAt(t, 16)
	for _, m := range []*fsm.Machine{a, b} {
		applyOK(t, m, 2, queueGroupsCmd(groupSpec("g1", "a", "b", "c")))
	}
	applyOK(t, b, 3, groupMembersCmd("g1", 0, "a", "b", "c"))
	if a.Digest() == b.Digest() {
		t.Fatal("the digest does not hold the epoch")
	}
	if b, _ := snapshotBytes(t, b); b[4] != 13 {
		t.Fatalf("format %d, want 13", b[4])
	}
	if n := roundTrip(t, b); n.QueueGroups()[0].Epoch != 1 || !slices.Equal(memberIDs(n.QueueGroups()[0]), []string{"a", "b", "c"}) {
		t.Fatalf("restored %+v", n.QueueGroups())
	}
}

// GroupMembers needs level 16, a group id and 1 to MaxGroupMembers
// members, each with an address, none twice.
func TestGroupMembers_Validate(t *testing.T) {
	if got := fsm.CommandProtocol(groupMembersCmd("g1", 0, "a")); got != fsm.GroupMembersLevel {
		t.Fatalf("level %d", got)
	}
	if err := fsm.Validate(groupMembersCmd("g1", 0, "a", "b"), fsm.Limits{}); err != nil {
		t.Fatal(err)
	}
	many := make([]string, fsm.MaxGroupMembers+1)
	for i := range many {
		many[i] = string(rune('a' + i))
	}
	if err := fsm.Validate(groupMembersCmd("g1", 0, many[:fsm.MaxGroupMembers]...), fsm.Limits{}); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]*proto.Command{
		"no group":     groupMembersCmd("", 0, "a"),
		"bad id":       groupMembersCmd("G/1", 0, "a"),
		"no member":    groupMembersCmd("g1", 0),
		"too many":     groupMembersCmd("g1", 0, many...),
		"member twice": groupMembersCmd("g1", 0, "a", "b", "a"),
		"no address": {Cmd: &proto.Command_GroupMembers{GroupMembers: &proto.GroupMembers{Group: "g1",
			Members: []*proto.QueueGroupMember{{Id: "a"}}}}},
	} {
		if fsm.Validate(c, fsm.Limits{}) == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
