package fault

import (
	"slices"
	"strings"
	"testing"
)

// A failed scenario's course merges the nodes' logs in time order, keeps
// only the events that make it up, and shortens each to what a reader
// needs; it runs without docker.
func TestFaultCourse_MergesTheNodesEventsInTimeOrder(t *testing.T) {
	raftmq2 := `time=2026-12-04T20:23:16.871Z level=INFO msg="raft: entering leader state: leader=\"Node at 172.30.105.12:5681 [Leader]\"" component=cluster node=raftmq2 group=q3 subsystem=raft
time=2026-12-04T20:23:20.000Z level=INFO msg="published" component=amqp node=raftmq2
time=2026-12-04T20:23:36.416Z level=WARN msg="handing off a group's outbox failed" component=cluster node=raftmq2 group=q3 err="to group \"q1\": cluster: leadership lost, outcome unknown: forwarding to raftmq1: leader changed to raftmq2" retry=100ms
`
	raftmq5 := `time=2026-12-04T20:23:35.864Z level=INFO msg="raft: entering leader state: leader=\"Node at 172.30.105.15:5681 [Leader]\"" component=cluster node=raftmq5 subsystem=raft
time=2026-12-04T20:23:35.500Z level=INFO msg="raft: entering candidate state: node=\"Node at 172.30.105.15:5681 [Candidate]\" term=3" component=cluster node=raftmq5 group=q1 subsystem=raft
time=2026-12-04T20:23:36.709Z level=WARN msg="a server has not answered raft for NodeDownAfter" component=cluster node=raftmq5 id=raftmq1 silent=1.5s
time=2026-12-04T20:23:36.735Z level=INFO msg="declared node down" component=cluster node=raftmq5 id=raftmq1 group=q3 index=512
`
	got := faultCourse([]string{raftmq2, raftmq5})
	want := []string{
		`20:23:16.871 raftmq2 q3 entering leader state: leader="Node at 172.30.105.12:5681 [Leader]"`,
		`20:23:35.500 raftmq5 q1 entering candidate state: node="Node at 172.30.105.15:5681 [Candidate]" term=3`,
		`20:23:35.864 raftmq5 meta entering leader state: leader="Node at 172.30.105.15:5681 [Leader]"`,
		`20:23:36.416 raftmq2 q3 handing off a group's outbox failed retry=100ms err=to group "q1": cluster: leadership lost, outcome unknown: forwarding to raftmq1: leader changed to raftmq2`,
		`20:23:36.709 raftmq5 meta a server has not answered raft for NodeDownAfter id=raftmq1 silent=1.5s`,
		`20:23:36.735 raftmq5 q3 declared node down id=raftmq1 index=512`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("course:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}
