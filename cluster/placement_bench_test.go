package cluster

import (
	"fmt"
	"testing"

	"github.com/raftmq/raftmq/fsm/fsmtest"
	"github.com/raftmq/raftmq/proto"
)

// BenchmarkMirrorRound is one round of a group leader's mirror while
// queues are declared: 10,000 queues placed over three groups and in
// line, then one more declared in the metadata and placed in the group by
// its member. "all" compares every queue, as every round did before the
// logs of queue changes; "changed" looks at the queues named since the
// last round.
func BenchmarkMirrorRound(b *testing.B) {
	meta := fsmtest.New(b)
	var groups []*proto.QueueGroup
	for _, id := range []string{"q1", "q2", "q3"} {
		groups = append(groups, &proto.QueueGroup{Id: id, Members: []*proto.QueueGroupMember{{Id: "a", Addr: "a:1"}}})
	}
	fsmtest.Apply(b, meta, 1, &proto.Command{Cmd: &proto.Command_QueueGroups{QueueGroups: &proto.QueueGroups{Groups: groups}}}, fsmtest.PlaceQueues())
	grp := fsmtest.New(b)
	fsmtest.Apply(b, grp, 1, fsmtest.GroupInit(1))
	for i := range 10_000 {
		fsmtest.One(b, meta, 2, queueDeclare("/", fmt.Sprint("q", i)))
	}
	for _, c := range mirrorCommands(meta, grp, "q1") {
		fsmtest.One(b, grp, 2, c)
	}
	for _, all := range []bool{true, false} {
		name := map[bool]string{true: "all", false: "changed"}[all]
		b.Run(name, func(b *testing.B) {
			seen := markOf(meta, grp)
			i := 0
			for b.Loop() {
				b.StopTimer()
				q := fmt.Sprint("new", i)
				i++
				fsmtest.One(b, meta, 3, queueDeclare("/", q))
				for _, c := range placeCommands(meta, grp, "q1", "/", q) {
					fsmtest.One(b, grp, 3, c)
				}
				b.StartTimer()
				var cmds []*proto.Command
				cmds, seen = mirrorRead(meta, grp, "q1", seen, all, nil)
				if len(cmds) != 0 {
					b.Fatalf("in line, yet the mirror proposes %v", names(cmds))
				}
			}
		})
	}
}
