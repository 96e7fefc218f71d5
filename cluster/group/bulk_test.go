package group

import (
	"bytes"
	"context"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	gproto "google.golang.org/protobuf/proto"

	"github.com/raftmq/raftmq/proto"
)

// largeEntry is an envelope of one publish with a body of n bytes: the
// state machine applies it (to a vhost that is not there) like any other.
func largeEntry(t *testing.T, n int) []byte {
	t.Helper()
	body := make([]byte, n)
	for i := range body {
		body[i] = byte(i) ^ byte(i>>11)
	}
	b, err := gproto.Marshal(&proto.Envelope{Version: EnvelopeVersion, StampMs: 1,
		Commands: []*proto.Command{{Cmd: &proto.Command_Publish{Publish: &proto.Publish{Vhost: "none", RoutingKey: "q", Body: body}}}}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A 16 MiB entry reaches both followers byte for byte, and the three nodes
// allocate a few copies of it, not the gigabyte that go-msgpack's growth
// in 256 KiB steps costs two followers decoding it inline (bulk.go).
func TestBulk_LargeEntryReachesFollowersInFewAllocations(t *testing.T) {
	const size = 16 << 20
	nodes := startMuxCluster(t, []string{DefaultID})
	commit(t, nodes, DefaultID, "warm")
	data := largeEntry(t, size)

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f := leaderOf(t, nodes, DefaultID).Raft().Apply(data, 30*time.Second)
	if err := f.Error(); err != nil {
		t.Fatal(err)
	}
	idx := f.Index()
	for _, n := range nodes {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := n.groups[DefaultID].Applied().Wait(ctx, nil, idx)
		cancel()
		if err != nil {
			t.Fatalf("%s did not apply entry %d: %v", n.id, idx, err)
		}
	}
	runtime.ReadMemStats(&after)
	for _, n := range nodes {
		var l raft.Log
		if err := n.groups[DefaultID].Storage().Store().GetLog(idx, &l); err != nil {
			t.Fatalf("%s: entry %d: %v", n.id, idx, err)
		}
		if !bytes.Equal(l.Data, data) || l.Extensions != nil {
			t.Fatalf("%s: entry %d holds %d bytes (extensions %q), not the %d applied", n.id, idx, len(l.Data), l.Extensions, len(data))
		}
	}
	t.Logf("committing a %d MiB entry on three nodes allocated %d MiB", size>>20, (after.TotalAlloc-before.TotalAlloc)>>20)
	// Inline, each follower allocates about 64 x 8 MiB decoding it.
	if got := after.TotalAlloc - before.TotalAlloc; got > 24*size {
		t.Fatalf("committing a %d MiB entry on three nodes allocated %d MiB: more than 24 copies of it", size>>20, got>>20)
	}
}

// startMuxCluster starts three nodes of groups ids and bootstraps each.
func startMuxCluster(t *testing.T, ids []string) []*muxNode {
	t.Helper()
	base := t.TempDir()
	var nodes []*muxNode
	for i := range 3 {
		id := string(rune('a' + i))
		nodes = append(nodes, startMuxNode(t, id, base+"/"+id, "127.0.0.1:0", ids))
	}
	t.Cleanup(func() { stopAll(nodes) })
	for _, gid := range ids {
		if err := nodes[0].groups[gid].Raft().BootstrapCluster(raft.Configuration{Servers: serversOf(nodes)}).Error(); err != nil {
			t.Fatal(err)
		}
	}
	return nodes
}

// A follower that does not serve the bulk layer (a release before it
// refuses the connection) gets the append inline, and is not asked again
// for a while.
func TestBulk_StripSendsInlineToAFollowerWithoutTheLayer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	b := NewBulk(BulkConfig{Layer: tcpLayer{mustListen(t)}, MaxEntry: MaxBulkEntry, Timeout: 5 * time.Second, Logger: discardLogger()})
	defer b.Close()
	entries := []*raft.Log{{Index: 7, Term: 2, Type: raft.LogCommand, Data: make([]byte, bulkMin)}}
	target := raft.ServerAddress(ln.Addr().String())
	if got := b.Strip(target, entries); len(got) != 1 || got[0] != entries[0] {
		t.Fatalf("Strip to a follower without the layer = %v; want the entries unchanged", got)
	}
	if p := b.peer(target); !time.Now().Before(p.off) {
		t.Fatal("the follower without the layer is asked again at once")
	}
}

func mustListen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// Between two Bulks: the append names the entry by a marker and the
// follower puts the data back; an append whose data did not come, or
// came for another entry, is refused; small and configuration entries
// stay inline; raft's own entries are not changed.
func TestBulk_StripAndRestore(t *testing.T) {
	follower := NewBulk(BulkConfig{Layer: tcpLayer{mustListen(t)}, MaxEntry: 4 << 20, Timeout: 5 * time.Second, Logger: discardLogger()})
	defer follower.Close()
	leader := NewBulk(BulkConfig{Layer: tcpLayer{mustListen(t)}, MaxEntry: 4 << 20, Timeout: 5 * time.Second, Logger: discardLogger()})
	defer leader.Close()
	target := raft.ServerAddress(follower.layer.Addr().String())

	big := bytes.Repeat([]byte("x"), bulkMin+3)
	entries := []*raft.Log{
		{Index: 10, Term: 3, Type: raft.LogCommand, Data: []byte("small")},
		{Index: 11, Term: 3, Type: raft.LogCommand, Data: big},
		{Index: 12, Term: 3, Type: raft.LogConfiguration, Data: big},
		{Index: 13, Term: 3, Type: raft.LogCommand, Data: make([]byte, 5<<20)}, // over MaxEntry: inline
	}
	sent := leader.Strip(target, entries)
	if entries[1].Data == nil || entries[1].Extensions != nil {
		t.Fatal("Strip changed raft's entry")
	}
	for i, e := range sent {
		if stripped := e.Data == nil; stripped != (i == 1) {
			t.Fatalf("entry %d stripped: %v", e.Index, stripped)
		}
	}
	marker := sent[1].Extensions
	a := &raft.AppendEntriesRequest{Entries: sent}
	if err := follower.restore(a); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Entries[1].Data, big) || a.Entries[1].Extensions != nil {
		t.Fatalf("restored entry 11: %d bytes, extensions %q", len(a.Entries[1].Data), a.Entries[1].Extensions)
	}

	// The same append again: the data was taken by the first.
	again := &raft.AppendEntriesRequest{Entries: []*raft.Log{{Index: 11, Term: 3, Type: raft.LogCommand, Extensions: marker}}}
	if err := follower.restore(again); err == nil || !strings.Contains(err.Error(), "did not arrive") {
		t.Fatalf("an append whose data is gone: %v", err)
	}
	// A node without a Bulk cannot restore a marked entry.
	var none *Bulk
	if err := none.restore(&raft.AppendEntriesRequest{Entries: []*raft.Log{{Index: 11, Extensions: marker}}}); err == nil {
		t.Fatal("a node without a bulk layer took a marked entry")
	}
}

// The mux routes a group's bulk layer by its header, and refuses a bulk
// header that names no valid group.
func TestBulk_HeaderNamesTheGroupsBulkLayer(t *testing.T) {
	for _, tc := range []struct {
		id string
		ok bool
	}{{BulkLayerID(DefaultID), true}, {BulkLayerID("q1"), true}, {BulkLayerID(strings.Repeat("a", MaxIDLen)), true},
		{BulkLayerID("Q!"), false}, {"!bul", false}} {
		a, b := net.Pipe()
		go func() {
			_, _ = a.Write(append([]byte{muxMagic, muxVersion, byte(len(tc.id))}, tc.id...))
			_ = a.Close()
		}()
		id, _, err := readHeader(b)
		_ = b.Close()
		if ok := err == nil && id == tc.id; ok != tc.ok {
			t.Errorf("header naming %q: id %q, err %v; want accepted %v", tc.id, id, err, tc.ok)
		}
	}
	m := NewMux(listenTCP(t, "127.0.0.1:0"), MuxConfig{Logger: discardLogger()})
	defer m.Close()
	if _, err := m.Layer(BulkLayerID("Q!")); err == nil {
		t.Error("a bulk layer for an invalid group id was made")
	}
	if _, err := m.Layer(BulkLayerID("q1")); err != nil {
		t.Errorf("bulk layer of q1: %v", err)
	}
}

// A follower holds at most bulkKeep entries, and no more than
// bulkKeepBytes of them beyond the newest, for appends that never came.
func TestBulk_HoldsABoundedNumberOfEntries(t *testing.T) {
	b := &Bulk{held: map[bulkKey]heldEntry{}}
	for i := range uint64(bulkKeep + 3) {
		b.hold(bulkKey{1, i}, heldEntry{data: make([]byte, 10)})
	}
	if len(b.held) != bulkKeep || b.bytes != 10*bulkKeep {
		t.Fatalf("held %d entries, %d bytes; want %d, %d", len(b.held), b.bytes, bulkKeep, 10*bulkKeep)
	}
	if _, ok := b.held[bulkKey{1, 0}]; ok {
		t.Fatal("the oldest entry is still held")
	}
	big := heldEntry{data: make([]byte, bulkKeepBytes)}
	b.hold(bulkKey{2, 1}, big)
	if len(b.held) != 1 || b.bytes != bulkKeepBytes {
		t.Fatalf("after an entry of the whole budget: %d entries, %d bytes", len(b.held), b.bytes)
	}
	if _, ok := b.take(bulkKey{2, 1}); !ok || b.bytes != 0 || len(b.order) != 0 {
		t.Fatalf("take left %d bytes, %d in order", b.bytes, len(b.order))
	}
}
