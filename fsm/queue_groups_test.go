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
	var ids []string
	for _, g := range m.QueueGroups() {
		ids = append(ids, g.ID)
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
// state below level 15 writes format 11, which the release before reads.
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
	if b, _ := snapshotBytes(t, m); b[4] != 12 {
		t.Fatalf("a level 15 state wrote format %d, want 12", b[4])
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
