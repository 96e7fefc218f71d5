package fsm_test

import (
	"testing"

	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/fsm/fsmtest"
	"github.com/raftmq/raftmq/proto"
)

// A queue declared before the log reached level 3 keeps what it had then:
// its x-max-priority was accepted and ignored, and stays ignored after the
// level is raised, on the replica that applied the declare and on one
// restored from a snapshot alike; a queue declared at level 3 has
// priorities. Without the queue's own record of its level, a restore
// would parse the old queue's arguments anew and the two replicas would
// deliver in different orders.
func TestFeatures_FollowTheLevelTheQueueWasDeclaredAt(t *testing.T) {
	m := fsmtest.NewAt(t, 2)
	args := table("x-max-priority", i64(5))
	fsmtest.One(t, m, 1, declare("old", args))
	fsmtest.One(t, m, 2, fsmtest.SetProtocol(3))
	fsmtest.One(t, m, 3, declare("new", args))
	for _, q := range []string{"old", "new"} {
		fsmtest.One(t, m, 4, publish("", q, "low", prio(1)))
		fsmtest.One(t, m, 4, publish("", q, "high", prio(9)))
	}
	restored := roundTrip(t, m)
	for name, mm := range map[string]*fsm.Machine{"applied": m, "restored": restored} {
		one := func(_ int64, c *proto.Command) *proto.Result { r, _ := fsmtest.One(t, mm, 5, c); return r }
		if got := getAll(t, one, "old"); got != "low high" {
			t.Errorf("%s: the queue declared at level 2 gives %q, want publish order", name, got)
		}
		if got := getAll(t, one, "new"); got != "high low" {
			t.Errorf("%s: the queue declared at level 3 gives %q, want priority order", name, got)
		}
	}
	if m.Digest() != restored.Digest() {
		t.Fatal("the applied and the restored replica differ")
	}
}
