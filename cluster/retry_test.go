package cluster_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// A message rejected on a queue with delayed retry waits in the state of
// every replica and is released by the leader of the time it falls due,
// in log time: the leader that held it when it was rejected is gone by
// then. No node releases it early.
func TestCluster_DelayedRetryThroughLeaderChange(t *testing.T) {
	c := clustertest.New(t, 3, clustertest.WithFakeClock(t0))
	l := setupDelayed(t, c)
	f := c.Followers()[0]
	ch := &proto.ChannelRef{Node: f.NodeID(), Connection: "c1", Channel: 1}
	args := &proto.Table{Fields: []*proto.Field{
		{Key: "x-delayed-retry-type", Value: &proto.Value{Kind: &proto.Value_LongString{LongString: []byte("failed")}}},
		{Key: "x-delayed-retry-min", Value: &proto.Value{Kind: &proto.Value_Int64{Int64: 2000}}},
	}}
	requireFSM(t, mustSubmit(t, f, &proto.Command{Cmd: &proto.Command_QueueDeclare{QueueDeclare: &proto.QueueDeclare{
		Vhost: "/", Name: "rq", Durable: true, Arguments: args}}}))
	requireFSM(t, mustSubmit(t, c.Followers()[1], &proto.Command{Cmd: &proto.Command_Publish{Publish: &proto.Publish{
		Vhost: "/", RoutingKey: "rq", Body: []byte("m")}}}))
	res := mustSubmit(t, f, &proto.Command{Cmd: &proto.Command_Get{Get: &proto.Get{Vhost: "/", Queue: "rq", Channel: ch}}})
	requireFSM(t, res)
	if res[0].GetGet() == nil {
		t.Fatalf("get: %v", res[0])
	}
	res = mustSubmit(t, f, &proto.Command{Cmd: &proto.Command_Requeue{Requeue: &proto.Requeue{
		Channel: ch, Tags: []uint64{res[0].GetGet().GetDeliveryTag()}, Failed: true}}})
	requireFSM(t, res)
	// Until a replica has applied the get and the requeue, it holds the
	// message ready, as published: not a release.
	c.WaitApplied(res[0].GetIndex())
	due := entryStamp(t, l, res[0].GetIndex()) + 2000
	now := entryStamp(t, l, res[0].GetIndex())
	check := func(released bool) {
		t.Helper()
		clustertest.Eventually(t, clustertest.Timeout, func() error {
			for _, x := range c.Live() {
				var qi *proto.QueueInfo
				x.View(func(m *fsm.Machine) { qi, _ = m.Queue("/", "rq") })
				if !released && qi.GetReady() != 0 {
					t.Fatalf("%s: released at %d, due %d", x.NodeID(), now, due)
				}
				if want := map[bool]uint64{false: 1, true: 0}[released]; qi.GetMessagesDelayed() != want || qi.GetReady() != 1-want {
					return fmt.Errorf("%s: ready %d delayed %d", x.NodeID(), qi.GetReady(), qi.GetMessagesDelayed())
				}
			}
			return nil
		})
	}
	check(false)
	c.Kill(c.Index(l.NodeID()))
	c.WaitForLeader(clustertest.Timeout)
	for now+500 < due {
		c.AdvanceClock(500 * time.Millisecond)
		now += 500
		check(false)
	}
	c.AdvanceClock(time.Duration(due-now) * time.Millisecond)
	now = due
	check(true)
	c.AssertSameDigest(t)
}

// While a server announces a level below 9 (a node of an earlier release
// during a rolling upgrade), a basic.reject is sent as the nack it means
// there instead of being refused, and a delayed-retry policy is refused
// by the leader; once every server has level 8, the reject counts.
func TestCluster_RejectBelowLevel8IsANack(t *testing.T) {
	const old = 2
	c := clustertest.New(t, 3, clustertest.WithConfig(func(i int, cfg *cluster.Config) {
		if i == old {
			cfg.Protocol = 6
		}
	}))
	l := c.WaitForLeader(clustertest.Timeout)
	waitLevel(t, c, 6)
	f := c.Followers()[0]
	ch := &proto.ChannelRef{Node: f.NodeID(), Connection: "c1", Channel: 1}
	requeueOnce := func() *proto.Result {
		t.Helper()
		requireFSM(t, mustSubmit(t, f, &proto.Command{Cmd: &proto.Command_Publish{Publish: &proto.Publish{Vhost: "/", RoutingKey: "lq", Body: []byte("m")}}}))
		res := mustSubmit(t, f, &proto.Command{Cmd: &proto.Command_Get{Get: &proto.Get{Vhost: "/", Queue: "lq", Channel: ch, NoAck: false}}})
		requireFSM(t, res)
		rej := &proto.Command{Cmd: &proto.Command_Requeue{Requeue: &proto.Requeue{Channel: ch, Tags: []uint64{res[0].GetGet().GetDeliveryTag()}, Failed: true}}}
		return mustSubmit(t, f, rej)[0]
	}
	requireFSM(t, mustSubmit(t, l, queueDeclare("/", "lq")))
	if r := requeueOnce(); r.GetCode() != 0 {
		t.Fatalf("reject below level 8: %v", r)
	}
	pol := &proto.Command{Cmd: &proto.Command_PolicySet{PolicySet: &proto.PolicySet{Vhost: "/", Name: "p", Pattern: ".*", ApplyTo: "queues",
		Definition: &proto.PolicyDefinition{DelayedRetryMin: ptrTo(int64(100))}}}}
	if r, err := l.Submit(ctxT(t, 10*time.Second), pol); err != nil || r.GetCode() != 540 {
		t.Fatalf("a delayed-retry policy below level 8: %v %v", r, err)
	}
	c.Kill(old)
	c.Nodes[old].Config.Protocol = fsm.Protocol
	c.Restart(old)
	waitLevel(t, c, fsm.Protocol)
	requireFSM(t, mustSubmit(t, f, &proto.Command{Cmd: &proto.Command_QueueDelete{QueueDelete: &proto.QueueDelete{Vhost: "/", Name: "lq"}}}))
	requireFSM(t, mustSubmit(t, l, queueDeclare("/", "lq")))
	requireFSM(t, []*proto.Result{requeueOnce()})
	res := mustSubmit(t, f, &proto.Command{Cmd: &proto.Command_Get{Get: &proto.Get{Vhost: "/", Queue: "lq", Channel: ch, NoAck: true}}})
	requireFSM(t, res)
	var failed bool
	for _, fld := range res[0].GetGet().GetProperties().GetHeaders().GetFields() {
		failed = failed || (fld.GetKey() == "x-delivery-count" && fld.GetValue().GetInt64() == 1)
	}
	if !failed {
		t.Fatalf("a reject at level 8 counted no failed attempt: %v", res[0].GetGet().GetProperties())
	}
	requireFSM(t, mustSubmit(t, l, pol))
	c.AssertSameDigest(t)
}

func ptrTo[T any](v T) *T { return &v }
