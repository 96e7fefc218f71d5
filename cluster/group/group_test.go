package group

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	gproto "google.golang.org/protobuf/proto"

	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// startGroup opens and starts a lone group in dir on an in-memory
// transport and waits until it leads.
func startGroup(t *testing.T, dir string, closing <-chan struct{}) *Group {
	t.Helper()
	g, err := Open(Config{ID: "n1", Dir: dir, Logger: discardLogger(),
		Raft: RaftTimings{HeartbeatTimeout: 50 * time.Millisecond, ElectionTimeout: 50 * time.Millisecond,
			LeaderLeaseTimeout: 50 * time.Millisecond, CommitTimeout: time.Millisecond,
			SnapshotThreshold: 8192, SnapshotInterval: time.Minute, TrailingLogs: 1024},
		FSM: FSMConfig{NodeID: "n1"}, Closing: closing})
	if err != nil {
		t.Fatal(err)
	}
	addr, trans := raft.NewInmemTransport("")
	had, err := g.Start(trans.Consumer(), func(rpcs <-chan raft.RPC) raft.Transport { return rpcsTransport{trans, rpcs} }, closing)
	if err != nil {
		t.Fatal(err)
	}
	if !had {
		cfg := raft.Configuration{Servers: []raft.Server{{ID: "n1", Address: addr}}}
		if err := g.Raft().BootstrapCluster(cfg).Error(); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for g.Raft().State() != raft.Leader {
		if time.Now().After(deadline) {
			t.Fatal("the group did not elect itself")
		}
		time.Sleep(5 * time.Millisecond)
	}
	return g
}

// rpcsTransport is an in-memory transport whose RPCs come through rpcs.
type rpcsTransport struct {
	*raft.InmemTransport
	rpcs <-chan raft.RPC
}

func (t rpcsTransport) Consumer() <-chan raft.RPC { return t.rpcs }

// Two groups of one process, each in its own directory, apply their own
// logs to their own state, and each restarts on its own.
func TestGroup_SeveralInOneProcess(t *testing.T) {
	dataDir := t.TempDir()
	vhost := func(name string) []byte {
		b, err := gproto.Marshal(&proto.Envelope{Version: EnvelopeVersion, StampMs: 1,
			Commands: []*proto.Command{{Cmd: &proto.Command_VhostPut{VhostPut: &proto.VhostPut{Name: name}}}}})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	vhosts := func(g *Group) (names []string) {
		g.FSM().state.View(func(m *fsm.Machine) {
			for _, v := range m.Vhosts() {
				names = append(names, v.Name)
			}
		})
		return names
	}
	run := func(write bool) {
		closing := make(chan struct{})
		a := startGroup(t, filepath.Join(dataDir, "a"), closing)
		b := startGroup(t, filepath.Join(dataDir, "b"), closing)
		if write {
			for _, c := range []struct {
				g    *Group
				name string
			}{{a, "in-a"}, {b, "in-b"}} {
				if err := c.g.Raft().Apply(vhost(c.name), 5*time.Second).Error(); err != nil {
					t.Fatal(err)
				}
			}
		} else {
			for _, g := range []*Group{a, b} {
				if err := g.Raft().Barrier(5 * time.Second).Error(); err != nil {
					t.Fatal(err)
				}
			}
		}
		if got := vhosts(a); len(got) != 1 || got[0] != "in-a" {
			t.Errorf("group a holds vhosts %v, want [in-a]", got)
		}
		if got := vhosts(b); len(got) != 1 || got[0] != "in-b" {
			t.Errorf("group b holds vhosts %v, want [in-b]", got)
		}
		close(closing)
		for _, g := range []*Group{a, b} {
			if err := g.Shutdown().Error(); err != nil {
				t.Fatal(err)
			}
			g.Close()
		}
	}
	run(true)
	run(false) // restarted: each replays its own log
}
