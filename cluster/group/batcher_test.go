package group

import (
	"strings"
	"testing"
	"time"

	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// The group commit of a lone group puts the requests queued together in
// one entry, answers each with its own results in order, and refuses a
// command over its limits alone, before the log.
func TestBatcher_OneEntryPerBatchAndRefusalsAlone(t *testing.T) {
	closing := make(chan struct{})
	g := startGroup(t, t.TempDir(), closing)
	var stamp int64
	b := NewBatcher(BatcherConfig{MaxCommands: 1024, MaxBytes: 1 << 20, MaxInflight: 1, MaxMessageSize: 10,
		Leading: func() bool { return true }, Stamp: func() int64 { stamp++; return stamp },
		CommandProtocol: fsm.CommandProtocol, ClusterProtocol: func() uint32 { return fsm.Protocol },
		Proposals: g.fsm.proposals, Raft: g.Raft, Logger: discardLogger(), Closing: closing})
	vhost := func(name string) *proto.Command {
		return &proto.Command{Cmd: &proto.Command_VhostPut{VhostPut: &proto.VhostPut{Name: name}}}
	}
	reqs := []*Request{
		NewRequest([]*proto.Command{vhost("a"), vhost("b")}),
		// A body over MaxMessageSize is refused before the log.
		NewRequest([]*proto.Command{{Cmd: &proto.Command_Publish{Publish: &proto.Publish{Vhost: "a", Body: make([]byte, 20),
			Properties: &proto.Properties{}}}}, vhost("c")}),
		NewRequest([]*proto.Command{vhost("d")}),
	}
	// Queued before the batcher runs, so they are drained together.
	for _, p := range reqs {
		b.Enqueue(p)
	}
	b.Run()
	defer func() {
		close(closing)
		b.Wait()
		_ = g.Shutdown().Error()
		g.Close()
	}()
	var index uint64
	for i, p := range reqs {
		select {
		case <-p.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("request %d not answered", i)
		}
		res, idx, err := p.Outcome()
		if err != nil || len(res) != len(p.Commands()) {
			t.Fatalf("request %d: %v, %v", i, res, err)
		}
		if index == 0 {
			index = idx
		}
		if idx != index {
			t.Fatalf("request %d in entry %d, the first in %d: one entry for the batch", i, idx, index)
		}
		for j, r := range res {
			if i == 1 && j == 0 {
				if r.GetCode() != 406 || !strings.Contains(r.GetText(), "larger than configured max size 10") || r.GetIndex() != idx {
					t.Errorf("the publish over the limit: %v", r)
				}
				continue
			}
			if r.GetCode() != 0 || r.GetIndex() != idx {
				t.Errorf("request %d command %d: %v", i, j, r)
			}
		}
	}
	if g.fsm.proposals.Len() != 0 {
		t.Error("a proposal is held after its entry applied")
	}
	var names []string
	g.fsm.state.View(func(m *fsm.Machine) {
		for _, v := range m.Vhosts() {
			names = append(names, v.Name)
		}
	})
	if len(names) != 4 {
		t.Errorf("vhosts %v, want a, b, c and d", names)
	}
}
