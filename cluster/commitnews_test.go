package cluster_test

import (
	"context"
	"testing"
	"time"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/proto"
)

// A command submitted on a follower answers once the follower applied
// it, and raft tells a follower of a commit only with its next append:
// with nothing more to send, after its commit timeout, here a minute.
// The leader's news of its commits (group.CommitNews) tells the
// followers at once, so each submit answers long before.
func TestCluster_AFollowerLearnsOfACommitWithoutWaitingForTheCommitTimeout(t *testing.T) {
	c := clustertest.New(t, 3, clustertest.WithConfig(func(_ int, cfg *cluster.Config) {
		cfg.CommitTimeout = time.Minute
	}))
	submitOK(t, c, tick())
	l := c.WaitForLeader(clustertest.Timeout)
	told := l.CommitNewsTold()
	for _, f := range c.Followers() {
		for i := range 5 {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			res, err := f.SubmitBatch(ctx, []*proto.Command{tick()})
			cancel()
			if err != nil || res[0].GetCode() != 0 {
				t.Fatalf("submit %d on follower %s: %v %v", i, f.NodeID(), res, err)
			}
		}
	}
	c.WaitApplied(tickOn(t, c))
	c.AssertSameDigest(t)
	if got := l.CommitNewsTold(); got <= told {
		t.Fatalf("the leader told its followers of no commit (%d before, %d after)", told, got)
	}
}
