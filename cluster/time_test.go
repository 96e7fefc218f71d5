package cluster_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

var t0 = time.UnixMilli(1_800_000_000_000)

// stamps returns the stamps of n's log entries in index order.
func stamps(t testing.TB, n *cluster.Node) (idx []uint64, st []int64) {
	t.Helper()
	if err := n.LogEntries(func(i uint64, env *proto.Envelope) bool {
		idx = append(idx, i)
		st = append(st, env.GetStampMs())
		return true
	}); err != nil {
		t.Fatal(err)
	}
	return idx, st
}

func assertMonotonicLog(t testing.TB, n *cluster.Node) {
	t.Helper()
	idx, st := stamps(t, n)
	for i := 1; i < len(st); i++ {
		if st[i] < st[i-1] {
			t.Fatalf("%s: log time goes back from %d (entry %d) to %d (entry %d)", n.NodeID(), st[i-1], idx[i-1], st[i], idx[i])
		}
	}
}

func TestCluster_DefaultsInOneEntry(t *testing.T) {
	c := clustertest.New(t, 3, clustertest.WithConfig(func(_ int, cfg *cluster.Config) {
		cfg.DefaultUser, cfg.DefaultPassword = "admin", "s3cret"
	}))
	l := c.WaitForLeader(clustertest.Timeout)
	var found *proto.Envelope
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		found = nil
		_ = l.LogEntries(func(_ uint64, env *proto.Envelope) bool {
			for _, cmd := range env.GetCommands() {
				if cmd.GetUserPut() != nil {
					found = env
					return false
				}
			}
			return true
		})
		if found == nil {
			return fmt.Errorf("no UserPut in the log")
		}
		return nil
	})
	// Group commit may put other commands of the new leader (its
	// SetProtocol) into the same entry.
	var cmds []*proto.Command
	for _, cmd := range found.GetCommands() {
		if cmd.GetSetProtocol() == nil {
			cmds = append(cmds, cmd)
		}
	}
	if len(cmds) != 3 || cmds[0].GetVhostPut().GetName() != "/" || cmds[2].GetPermissionSet().GetUser() != "admin" {
		t.Fatalf("defaults entry: %v", cmds)
	}
	u := cmds[1].GetUserPut()
	if u.GetName() != "admin" || u.GetHashAlgorithm() != fsm.PasswordHashAlgorithm ||
		!fsm.CheckPassword(u.GetPasswordHash(), fsm.PasswordSaltLen, "s3cret") ||
		len(u.GetTags()) != 1 || u.GetTags()[0] != "administrator" {
		t.Fatalf("default user: %v", u)
	}
	p := cmds[2].GetPermissionSet()
	if p.GetVhost() != "/" || p.GetConfigure() != ".*" || p.GetWrite() != ".*" || p.GetRead() != ".*" {
		t.Fatalf("default permissions: %v", p)
	}
}

// A killed node is declared down in the log, and shown dead. The
// leader declares it down once its raft has not reached the node for
// NodeDownAfter, which may come before memberlist's own suspicion ends:
// until then the node shows suspect.
func TestCluster_DeadNodeDeclaredDown(t *testing.T) {
	c := clustertest.New(t, 3)
	c.WaitForLeader(clustertest.Timeout)
	victim := c.Followers()[0].NodeID()
	c.Kill(c.Index(victim))
	l := c.WaitForLeader(clustertest.Timeout)
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		down := false
		_ = l.LogEntries(func(_ uint64, env *proto.Envelope) bool {
			for _, cmd := range env.GetCommands() {
				if cmd.GetNodeDown().GetNode() == victim {
					down = true
				}
			}
			return !down
		})
		if !down {
			return fmt.Errorf("no NodeDown{%s} in the log", victim)
		}
		return nil
	})
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		for _, m := range l.Members() {
			if m.ID == victim && m.Health != cluster.HealthDead {
				return fmt.Errorf("%s is %q, want dead", victim, m.Health)
			}
		}
		return nil
	})
}

func TestCluster_LeaveRemovesTheNode(t *testing.T) {
	c := clustertest.New(t, 3)
	l := c.WaitForLeader(clustertest.Timeout)
	// The leader leaves: it hands over leadership first.
	id := l.NodeID()
	if err := l.Leave(); err != nil {
		t.Fatal(err)
	}
	c.Kill(c.Index(id))
	nl := c.WaitForLeader(clustertest.Timeout)
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		for _, m := range nl.Members() {
			if m.ID == id && m.Suffrage != "" {
				return fmt.Errorf("%s still a %s", id, m.Suffrage)
			}
		}
		return nil
	})
	// Two voters remain: both needed, both working.
	for _, n := range c.Live() {
		mustSubmit(t, n, tick())
	}
}

func TestCluster_AdminOperations(t *testing.T) {
	c := clustertest.New(t, 3)
	l := c.WaitForLeader(clustertest.Timeout)
	f := c.Followers()[0]

	// Leader-only operations refuse on a follower.
	if err := f.TransferLeadership(""); !errors.Is(err, cluster.ErrNotLeader) {
		t.Fatalf("transfer on a follower: %v", err)
	}
	if err := f.RemoveNode(l.NodeID()); !errors.Is(err, cluster.ErrNotLeader) {
		t.Fatalf("remove on a follower: %v", err)
	}
	if err := f.ConsistentView(ctxT(t, time.Second), func(*fsm.Machine) {}); !errors.Is(err, cluster.ErrNotLeader) {
		t.Fatalf("consistent view on a follower: %v", err)
	}
	// A consistent view on the leader sees every committed write.
	res := mustSubmit(t, f, tick())
	var applied uint64
	if err := l.ConsistentView(ctxT(t, 5*time.Second), func(m *fsm.Machine) { applied = m.AppliedIndex() }); err != nil {
		t.Fatal(err)
	}
	if applied < res[0].GetIndex() {
		t.Fatalf("consistent view at %d, a write committed at %d", applied, res[0].GetIndex())
	}

	// Transfer to whichever follower is most up to date.
	if err := l.TransferLeadership(""); err != nil {
		t.Fatal(err)
	}
	nl := c.WaitForLeader(clustertest.Timeout)
	if nl.NodeID() == l.NodeID() {
		t.Fatal("leadership did not move")
	}
	// Remove the old leader from the configuration.
	if err := nl.RemoveNode(l.NodeID()); err != nil {
		t.Fatal(err)
	}
	if err := nl.RemoveNode("nobody"); err == nil {
		t.Fatal("removing an unknown node succeeded")
	}
	for _, m := range nl.Members() {
		if m.ID == l.NodeID() && m.Suffrage != "" {
			t.Fatalf("%s is still a %s", m.ID, m.Suffrage)
		}
	}
	st := nl.Stats()
	if st.State != "Leader" || st.LeaderID != nl.NodeID() || st.CommitIndex == 0 || st.LastLogIndex < st.CommitIndex || st.FSMIndex == 0 {
		t.Fatalf("leader stats: %+v", st)
	}
}
