package group

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	gproto "google.golang.org/protobuf/proto"

	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// muxNode is a node of several groups, as a node of queue groups is to
// be: one listener shared by its groups through a Mux, each group in its
// directory under the node's data dir (Dir).
type muxNode struct {
	id, dataDir, addr string
	mux               *Mux
	closing           chan struct{}
	groups            map[string]*Group
	trans             map[string]*raft.NetworkTransport
	had               map[string]bool
	bulks             []*Bulk
}

// netTransport is raft's network transport whose RPCs come through rpcs
// (the gap mend), as the node gives a group.
type netTransport struct {
	NoPipeline
	rpcs <-chan raft.RPC
}

func (t netTransport) Consumer() <-chan raft.RPC { return t.rpcs }

// muxTestTimings give a leader a 500 ms lease: the bulk tests append
// 16 MiB entries, which under -race on a loaded machine can keep a
// follower from answering within a shorter one, and the leader then
// steps down in the middle of the test.
var muxTestTimings = RaftTimings{HeartbeatTimeout: time.Second, ElectionTimeout: time.Second,
	LeaderLeaseTimeout: 500 * time.Millisecond, CommitTimeout: 5 * time.Millisecond,
	SnapshotThreshold: 8192, SnapshotInterval: time.Minute, TrailingLogs: 1024}

// startMuxNode listens on addr (":0" picks one; a restart reuses the
// node's) and opens and starts each group.
func startMuxNode(t *testing.T, id, dataDir, addr string, ids []string) *muxNode {
	return startNode(t, id, dataDir, addr, ids, false)
}

// startNode starts a node; landed is a node of the release before the
// mux: its one group, the default, has raft's transport on the listener
// itself.
func startNode(t *testing.T, id, dataDir, addr string, ids []string, landed bool) *muxNode {
	t.Helper()
	var ln tcpLayer
	deadline := time.Now().Add(10 * time.Second)
	for {
		l, err := net.Listen("tcp", addr)
		if err == nil {
			ln = tcpLayer{l}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("listen %s: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	n := &muxNode{id: id, dataDir: dataDir, addr: ln.Addr().String(), closing: make(chan struct{}),
		groups: map[string]*Group{}, trans: map[string]*raft.NetworkTransport{}, had: map[string]bool{}}
	if !landed {
		n.mux = NewMux(ln, MuxConfig{Logger: discardLogger()})
	}
	for _, gid := range ids {
		dir, err := Dir(dataDir, gid)
		if err != nil {
			t.Fatal(err)
		}
		g, err := Open(Config{ID: id, Dir: dir, Logger: discardLogger(), Raft: muxTestTimings,
			FSM: FSMConfig{NodeID: id}, Closing: n.closing})
		if err != nil {
			t.Fatal(err)
		}
		var l raft.StreamLayer = ln
		var bulk *Bulk
		if !landed {
			if l, err = n.mux.Layer(gid); err != nil {
				t.Fatal(err)
			}
			bl, err := n.mux.Layer(BulkLayerID(gid))
			if err != nil {
				t.Fatal(err)
			}
			bulk = NewBulk(BulkConfig{Layer: bl, MaxEntry: MaxBulkEntry, Timeout: 10 * time.Second, Logger: discardLogger()})
			n.bulks = append(n.bulks, bulk)
			g.UseBulk(bulk)
		} else if gid != DefaultID {
			t.Fatalf("a node of the landed release runs the default group only, not %q", gid)
		}
		trans := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{Stream: l, MaxPool: 3,
			Timeout: 10 * time.Second, Logger: hclog.NewNullLogger()})
		had, err := g.Start(trans.Consumer(), func(rpcs <-chan raft.RPC) raft.Transport {
			return netTransport{NoPipeline{NetworkTransport: trans, Bulk: bulk}, rpcs}
		}, n.closing)
		if err != nil {
			t.Fatal(err)
		}
		n.groups[gid], n.trans[gid], n.had[gid] = g, trans, had
	}
	return n
}

func (n *muxNode) stop() {
	select {
	case <-n.closing: // stopped already (a test that failed while it was down)
		return
	default:
	}
	close(n.closing)
	for gid, g := range n.groups {
		_ = g.Shutdown().Error()
		n.trans[gid].Close()
		n.trans[gid].CloseStreams()
		g.Close()
	}
	for _, b := range n.bulks {
		b.Close()
	}
	if n.mux != nil {
		_ = n.mux.Close()
	}
}

// stopAll stops the nodes as they are when it runs (a restarted node
// replaces its slot).
func stopAll(nodes []*muxNode) {
	for _, n := range nodes {
		n.stop()
	}
}

// serversOf is a configuration of the nodes, at their one address.
func serversOf(nodes []*muxNode) (servers []raft.Server) {
	for _, n := range nodes {
		servers = append(servers, raft.Server{ID: raft.ServerID(n.id), Address: raft.ServerAddress(n.addr)})
	}
	return servers
}

// vhostEntry is an envelope that creates vhost name.
func vhostEntry(t *testing.T, name string) []byte {
	t.Helper()
	b, err := gproto.Marshal(&proto.Envelope{Version: EnvelopeVersion, StampMs: 1,
		Commands: []*proto.Command{{Cmd: &proto.Command_VhostPut{VhostPut: &proto.VhostPut{Name: name}}}}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// leaderOf awaits a leader of group gid among nodes.
func leaderOf(t *testing.T, nodes []*muxNode, gid string) *Group {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		for _, n := range nodes {
			if g := n.groups[gid]; g.Raft().State() == raft.Leader {
				return g
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("group %q elected no leader", gid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// commit applies a vhost for each name to group gid through its leader,
// retrying across a change of leader.
func commit(t *testing.T, nodes []*muxNode, gid string, names ...string) {
	t.Helper()
	for _, name := range names {
		for attempt := 0; ; attempt++ {
			err := leaderOf(t, nodes, gid).Raft().Apply(vhostEntry(t, name), 5*time.Second).Error()
			if err == nil {
				break
			}
			if attempt == 20 {
				t.Fatalf("group %q: commit %s: %v", gid, name, err)
			}
		}
	}
}

type groupView struct {
	index  uint64
	digest [32]byte
	vhosts []string
}

func viewOf(g *Group) (v groupView) {
	g.State().View(func(m *fsm.Machine) {
		v.index, v.digest = m.AppliedIndex(), m.Digest()
		for _, vh := range m.Vhosts() {
			v.vhosts = append(v.vhosts, vh.Name)
		}
	})
	slices.Sort(v.vhosts)
	return v
}

// agree awaits every member of group gid applying what its leader has
// applied, and checks that they reach the same digest and hold want.
func agree(t *testing.T, nodes []*muxNode, gid string, want []string) [32]byte {
	t.Helper()
	leader := leaderOf(t, nodes, gid)
	if err := leader.Raft().Barrier(10 * time.Second).Error(); err != nil {
		t.Fatalf("group %q: barrier: %v", gid, err)
	}
	// What the leader's state machine applied: raft's own entries (the
	// barrier) reach no state machine.
	target, _ := leader.Applied().Load()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var first *groupView
	for _, n := range nodes {
		g := n.groups[gid]
		if err := g.Applied().Wait(ctx, nil, target); err != nil {
			t.Fatalf("group %q on %s did not apply index %d: %v", gid, n.id, target, err)
		}
		v := viewOf(g)
		if !slices.Equal(v.vhosts, want) {
			t.Errorf("group %q on %s holds vhosts %v, want %v", gid, n.id, v.vhosts, want)
		}
		if v.index != target {
			t.Errorf("group %q on %s applied to %d, its leader to %d", gid, n.id, v.index, target)
		}
		if first == nil {
			first = &v
		} else if v.digest != first.digest {
			t.Errorf("group %q: %s's digest at %d differs from %s's", gid, n.id, v.index, nodes[0].id)
		}
	}
	return first.digest
}

// Three groups on three nodes, each node with one listener shared by its
// groups through the mux and each group with its own state machine in
// its own directory: every group elects a leader and commits, its
// members agree on its digest, and after one node restarts every group
// recovers and catches it up.
func TestMux_SeveralGroupsOverOneListenerPerNode(t *testing.T) {
	ids := []string{DefaultID, "q1", "q2"}
	root := t.TempDir()
	var nodes []*muxNode
	for i := range 3 {
		id := fmt.Sprintf("n%d", i)
		nodes = append(nodes, startMuxNode(t, id, filepath.Join(root, id), "127.0.0.1:0", ids))
	}
	defer stopAll(nodes)
	// Every group has the same members at the same addresses: one port
	// per node. Group i is bootstrapped on node i, to spread leaders.
	servers := serversOf(nodes)
	for i, gid := range ids {
		if err := nodes[i].groups[gid].Raft().BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil {
			t.Fatal(err)
		}
	}
	name := func(gid string, i int) string { return fmt.Sprintf("g%s-v%d", gid, i) }
	want := map[string][]string{}
	for _, gid := range ids {
		for i := range 3 {
			want[gid] = append(want[gid], name(gid, i))
		}
		commit(t, nodes, gid, want[gid]...)
	}
	digests := map[[32]byte]string{}
	for _, gid := range ids {
		d := agree(t, nodes, gid, want[gid])
		if other, ok := digests[d]; ok {
			t.Errorf("groups %q and %q reached the same digest: their logs were not their own", gid, other)
		}
		digests[d] = gid
	}

	// Node n2 stops; the groups it led elect again and commit without it.
	nodes[2].stop()
	for _, gid := range ids {
		for i := 3; i < 5; i++ {
			want[gid] = append(want[gid], name(gid, i))
		}
		commit(t, nodes[:2], gid, want[gid][3:]...)
		slices.Sort(want[gid])
	}
	// It comes back on its address, reads each group from its directory
	// and catches up.
	nodes[2] = startMuxNode(t, "n2", nodes[2].dataDir, nodes[2].addr, ids)
	for _, gid := range ids {
		if !nodes[2].had[gid] {
			t.Errorf("group %q on the restarted node found no state in its directory", gid)
		}
		commit(t, nodes, gid, name(gid, 9))
		want[gid] = append(want[gid], name(gid, 9))
		agree(t, nodes, gid, want[gid])
	}

	// The default group is where a single-group node has it; the others
	// under groups/.
	for _, n := range nodes {
		for path, isWant := range map[string]bool{
			"wal": true, "snapshots": true, "bodies": true,
			filepath.Join("groups", "q1", "wal"): true, filepath.Join("groups", "q2", "snapshots"): true,
			filepath.Join("groups", "wal"): false,
		} {
			_, err := os.Stat(filepath.Join(n.dataDir, path))
			if (err == nil) != isWant {
				t.Errorf("%s: %s exists: %v, want %v", n.id, path, err == nil, isWant)
			}
		}
	}
}

// During a rolling upgrade the default group has members on nodes of the
// landed release (no mux) and on upgraded ones (the mux, with another
// group beside it): it elects, commits and agrees, and the landed member
// restarts and catches up; the other group is untouched.
func TestMux_DefaultGroupWithLandedReleaseMembers(t *testing.T) {
	both := []string{DefaultID, "q1"}
	root := t.TempDir()
	nodes := []*muxNode{
		startMuxNode(t, "n0", filepath.Join(root, "n0"), "127.0.0.1:0", both),
		startMuxNode(t, "n1", filepath.Join(root, "n1"), "127.0.0.1:0", both),
		startNode(t, "n2", filepath.Join(root, "n2"), "127.0.0.1:0", []string{DefaultID}, true),
	}
	defer stopAll(nodes)
	servers := serversOf(nodes)
	// The landed node bootstraps the default group, so that it likely
	// leads it; q1 lives on the upgraded nodes.
	if err := nodes[2].groups[DefaultID].Raft().BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil {
		t.Fatal(err)
	}
	if err := nodes[0].groups["q1"].Raft().BootstrapCluster(raft.Configuration{Servers: servers[:2]}).Error(); err != nil {
		t.Fatal(err)
	}
	// Each kind of node leads the default group in turn: the landed
	// release's leader replicates to upgraded followers, and the other
	// way round.
	for i, to := range []*muxNode{nodes[2], nodes[0]} {
		lead := func() *Group { return leaderOf(t, nodes, DefaultID) }
		if l := lead(); l != to.groups[DefaultID] {
			if err := l.Raft().LeadershipTransferToServer(raft.ServerID(to.id), raft.ServerAddress(to.addr)).Error(); err != nil {
				t.Fatalf("transfer to %s: %v", to.id, err)
			}
		}
		deadline := time.Now().Add(30 * time.Second)
		for lead() != to.groups[DefaultID] {
			if time.Now().After(deadline) {
				t.Fatalf("%s does not lead the default group", to.id)
			}
			time.Sleep(10 * time.Millisecond)
		}
		commit(t, nodes, DefaultID, fmt.Sprintf("d%d", i))
		agree(t, nodes, DefaultID, []string{"d0", "d1"}[:i+1])
	}
	commit(t, nodes[:2], "q1", "q0")
	agree(t, nodes[:2], "q1", []string{"q0"})

	// The landed member restarts and catches up.
	nodes[2].stop()
	commit(t, nodes[:2], DefaultID, "d2")
	nodes[2] = startNode(t, "n2", nodes[2].dataDir, nodes[2].addr, []string{DefaultID}, true)
	commit(t, nodes, DefaultID, "d3")
	agree(t, nodes, DefaultID, []string{"d0", "d1", "d2", "d3"})
	agree(t, nodes[:2], "q1", []string{"q0"})
}

func TestDir(t *testing.T) {
	data := filepath.Join("var", "lib", "raftmq")
	for id, want := range map[string]string{
		DefaultID: data,
		"q1":      filepath.Join(data, "groups", "q1"),
		"queue_7": filepath.Join(data, "groups", "queue_7"),
	} {
		if got, err := Dir(data, id); err != nil || got != want {
			t.Errorf("Dir(%q) = %q, %v; want %q", id, got, err, want)
		}
	}
	for _, id := range []string{"..", "../x", "a/b", "Q1", "a.b", string(make([]byte, MaxIDLen+1))} {
		if got, err := Dir(data, id); err == nil {
			t.Errorf("Dir(%q) = %q, want an error", id, got)
		}
	}
}
