package group

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftmq/raftmq/bodies"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// subscribeAdapter is an adapter with a body store over an in-memory log,
// and apply, which appends one entry of cmds to both.
func subscribeAdapter(t *testing.T) (*FSM, func(cmds ...*proto.Command)) {
	t.Helper()
	logs := raft.NewInmemStore()
	store, err := bodies.Open(filepath.Join(t.TempDir(), "bodies"), logs, bodies.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	f, n := testAdapter()
	f.bodies = store
	var index uint64
	apply := func(cmds ...*proto.Command) {
		t.Helper()
		index++
		l := entry(t, index, &proto.Envelope{Version: 1, StampMs: int64(index), Commands: cmds})
		if err := logs.StoreLog(l); err != nil {
			t.Fatal(err)
		}
		for _, r := range f.ApplyBatch([]*raft.Log{l})[0].([]*proto.Result) {
			if r.GetCode() != 0 {
				t.Fatalf("entry %d refused: %v", index, r)
			}
		}
	}
	apply(&proto.Command{Cmd: &proto.Command_VhostPut{VhostPut: &proto.VhostPut{Name: "/"}}},
		&proto.Command{Cmd: &proto.Command_SetProtocol{SetProtocol: &proto.SetProtocol{Level: fsm.Protocol}}},
		&proto.Command{Cmd: &proto.Command_QueueDeclare{QueueDeclare: &proto.QueueDeclare{Vhost: "/", Name: "q", Durable: true}}})
	_ = n
	return f, apply
}

func publishTo(q, body string) *proto.Command {
	return &proto.Command{Cmd: &proto.Command_Publish{Publish: &proto.Publish{Vhost: "/", RoutingKey: q, Body: []byte(body),
		Channel: &proto.ChannelRef{Node: "me", Connection: "p", Channel: 1}}}}
}

// A node that does not run the group subscribes: it gets what the log
// holds of its channels (the deliveries it may have missed, with their
// bodies), then each effect for its channels as entries apply, and none
// of another node's. A restore from a snapshot ends the subscription:
// its entries produced no effects.
func TestSubscribe_SyncThenTheNodesEffectsInLogOrder(t *testing.T) {
	f, apply := subscribeAdapter(t)
	x := &proto.ChannelRef{Node: "x", Connection: "c", Channel: 1}
	y := &proto.ChannelRef{Node: "y", Connection: "c", Channel: 1}
	consume := func(ch *proto.ChannelRef, tag string) *proto.Command {
		return &proto.Command{Cmd: &proto.Command_Consume{Consume: &proto.Consume{Vhost: "/", Queue: "q", Prefetch: 1,
			Consumer: &proto.ConsumerRef{Channel: ch, Tag: tag}}}}
	}
	apply(consume(x, "cx"), publishTo("q", "before"))

	sub, sync := f.Subscribe("x", 1<<20)
	if len(sync.Channels) != 1 || len(sync.Channels[0].Deliveries) != 1 || string(sync.Channels[0].Deliveries[0].Body) != "before" {
		t.Fatalf("sync: %+v", sync)
	}
	if sync.Index != 2 {
		t.Fatalf("sync at index %d, want 2", sync.Index)
	}
	apply(consume(y, "cy"), publishTo("q", "to-y"), publishTo("q", "waits"))
	apply(&proto.Command{Cmd: &proto.Command_Settle{Settle: &proto.Settle{Channel: x, DeliveryTag: 1}}})
	apply(&proto.Command{Cmd: &proto.Command_QueueDelete{QueueDelete: &proto.QueueDelete{Vhost: "/", Name: "q"}}})

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	es, err := sub.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 2 || es[0].Deliver == nil || string(es[0].Deliver.Body) != "waits" || es[0].Deliver.DeliveryTag != 2 ||
		es[1].Cancelled.GetTag() != "cx" {
		t.Fatalf("effects for x: %+v, want the delivery of \"waits\" (tag 2) after the settle, then cx cancelled", es)
	}

	state := f.state
	state.mu.Lock()
	f.endSubscriptions(ErrStateRestored)
	state.mu.Unlock()
	if _, err := sub.Next(ctx); err != ErrStateRestored {
		t.Fatalf("after a restore: %v", err)
	}
}

// A subscriber that does not keep up is cut off, not waited for: the
// apply goroutine never blocks on it.
func TestSubscribe_ASubscriberFarBehindIsCutOff(t *testing.T) {
	f, apply := subscribeAdapter(t)
	x := &proto.ChannelRef{Node: "x", Connection: "c", Channel: 1}
	apply(&proto.Command{Cmd: &proto.Command_Consume{Consume: &proto.Consume{Vhost: "/", Queue: "q",
		Consumer: &proto.ConsumerRef{Channel: x, Tag: "cx"}}}})
	sub, _ := f.Subscribe("x", 4096)
	for range 20 {
		apply(publishTo("q", string(make([]byte, 1024))))
	}
	if _, err := sub.Next(context.Background()); err != ErrSubscriberBehind {
		t.Fatalf("a subscriber 20 KiB behind with a 4 KiB bound: %v", err)
	}
	f.state.mu.Lock()
	left := len(f.subs)
	f.state.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d subscriptions left after it was cut off", left)
	}
}

// A node's release of its previous runs (a NodeDown naming its run)
// closes none of the clients of the run that made it, when this node's
// replica applies it later than the release committed; one of an
// earlier run, or a NodeDown the cluster declared, reaches them. A
// subscribed node gets the release with its run, to tell it the same.
func TestLocalSink_ThisRunsOwnReleaseClosesNothing(t *testing.T) {
	f, apply := subscribeAdapter(t)
	rec := &recSink{}
	f.run = "now"
	f.host.Effects = func() fsm.Sink { return rec }
	sub, _ := f.Subscribe("x", 1<<20)
	down := func(node, run string) *proto.Command {
		return &proto.Command{Cmd: &proto.Command_NodeDown{NodeDown: &proto.NodeDown{Node: node, Run: run}}}
	}
	apply(down("me", "now"))
	if len(rec.down) != 0 {
		t.Fatalf("this run's release reached its clients: %v", rec.down)
	}
	apply(down("me", "before"), down("me", ""))
	if want := []string{"me", "me"}; !slices.Equal(rec.down, want) {
		t.Fatalf("an earlier run's release and a declared NodeDown: %v, want %v", rec.down, want)
	}
	apply(down("x", "its"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	es, err := sub.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 1 || es[0].NodeDown != "x" || es[0].Run != "its" {
		t.Fatalf("effects for x: %+v, want its release with its run", es)
	}
}
