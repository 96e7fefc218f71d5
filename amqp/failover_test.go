package amqp

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// An acknowledgement whose commit outcome is unknown (the leader changed
// under it) is resolved from the applied state: settled again when its
// deliveries are still the channel's, left alone when they are not, and
// the consumer's connection stays open either way.
func TestAcks_UnknownOutcomeIsResolvedFromTheLog(t *testing.T) {
	eachOutcome(t, func(t *testing.T, committed bool) {
		ts := startServer(t, Config{})
		var failed atomic.Bool
		var asked atomic.Int32
		ts.broker.mu.Lock()
		ts.broker.fail = func(cmds []*proto.Command) error {
			if cmds[0].GetSettle() != nil && failed.CompareAndSwap(false, true) {
				return errors.New("cluster: leadership lost, outcome unknown")
			}
			return nil
		}
		ts.broker.unacked = func(ref *proto.ChannelRef, tags []uint64) []uint64 {
			asked.Add(1)
			if committed {
				return nil
			}
			return tags
		}
		ts.broker.mu.Unlock()
		conn, ch := openChannel(t, ts)
		closed := conn.NotifyClose(make(chan *amqp091.Error, 1))
		got := consumeLogTags(t, ts, ch, "q", 101, 102)
		if err := got[1].Ack(true); err != nil {
			t.Fatal(err)
		}
		// Any method but a publish follows the acks before it.
		if _, err := ch.QueueDeclare("after", false, false, false, false, nil); err != nil {
			t.Fatalf("the channel did not survive the unknown outcome: %v", err)
		}
		if !failed.Load() || asked.Load() == 0 {
			t.Fatalf("the failure was not injected (%v) or not resolved from the state (%d)", failed.Load(), asked.Load())
		}
		if len(commandsOf(ts.broker, (*proto.Command).GetTick)) == 0 {
			t.Fatal("no command went through the log before the state was read")
		}
		settles := commandsOf(ts.broker, (*proto.Command).GetSettle)
		switch {
		case committed && len(settles) != 0:
			t.Fatalf("settled again what the log had settled: %v", settles)
		case !committed && (len(settles) != 1 || !slices.Equal(settles[0].GetTags(), []uint64{101, 102})):
			t.Fatalf("retried settles %v, want one naming 101 and 102", settles)
		}
		select {
		case err := <-closed:
			t.Fatalf("connection closed: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
	})
}

// eachOutcome runs f as a subtest for a failed submission that did not
// commit and for one that did.
func eachOutcome(t *testing.T, f func(t *testing.T, committed bool)) {
	for _, committed := range []bool{false, true} {
		name := "not committed"
		if committed {
			name = "committed"
		}
		t.Run(name, func(t *testing.T) { f(t, committed) })
	}
}

// failFirst makes the first submission that carries a command of kind fail
// as a leader change would, and counts the submissions that carry one.
func failFirst(b *fakeBroker, kind func(*proto.Command) bool) *atomic.Int32 {
	var tries atomic.Int32
	b.mu.Lock()
	b.fail = func(cmds []*proto.Command) error {
		if !slices.ContainsFunc(cmds, kind) {
			return nil
		}
		if tries.Add(1) == 1 {
			return errors.New("cluster: leadership lost, outcome unknown")
		}
		return nil
	}
	b.mu.Unlock()
	return &tries
}

// The end of a channel or a connection that fails to commit is submitted
// again until it does: otherwise the log keeps consumers of a connection
// that is gone.
func TestClose_RetriedUntilItCommits(t *testing.T) {
	t.Run("channel", func(t *testing.T) {
		ts := startServer(t, Config{})
		tries := failFirst(ts.broker, func(c *proto.Command) bool { return c.GetChannelClosed() != nil })
		_, ch := openChannel(t, ts)
		consumeLogTags(t, ts, ch, "q", 7)
		if err := ch.Close(); err != nil {
			t.Fatalf("channel close: %v", err)
		}
		if n := tries.Load(); n != 2 {
			t.Fatalf("ChannelClosed submitted %d times, want 2 (one failed, one committed)", n)
		}
		if n := len(commandsOf(ts.broker, (*proto.Command).GetChannelClosed)); n != 1 {
			t.Fatalf("%d ChannelClosed committed, want 1", n)
		}
	})
	t.Run("connection", func(t *testing.T) {
		ts := startServer(t, Config{})
		tries := failFirst(ts.broker, func(c *proto.Command) bool { return c.GetConnectionClosed() != nil })
		conn, _ := openChannel(t, ts)
		if err := conn.Close(); err != nil {
			t.Fatalf("connection close: %v", err)
		}
		if n := tries.Load(); n != 2 {
			t.Fatalf("ConnectionClosed submitted %d times, want 2 (one failed, one committed)", n)
		}
		if n := len(commandsOf(ts.broker, (*proto.Command).GetConnectionClosed)); n != 1 {
			t.Fatalf("%d ConnectionClosed committed, want 1", n)
		}
	})
}

// A client's connection.close is answered while the log cannot take the
// connection's end (no quorum: the other nodes are down): the client is
// let go, and the end is recorded once the log takes commands again. A
// close that waited for the commit held the client as long as the quorum
// was gone, and the node's heartbeats kept its connection alive meanwhile.
func TestClose_AnsweredWithoutAQuorum(t *testing.T) {
	ts := startServer(t, Config{})
	var quorum atomic.Bool
	var refused atomic.Int32
	ts.broker.mu.Lock()
	ts.broker.fail = func(cmds []*proto.Command) error {
		if quorum.Load() || !slices.ContainsFunc(cmds, func(c *proto.Command) bool { return c.GetConnectionClosed() != nil }) {
			return nil
		}
		refused.Add(1)
		return errors.New("cluster: no leader")
	}
	ts.broker.mu.Unlock()
	conn, ch := openChannel(t, ts)
	consumeLogTags(t, ts, ch, "q", 3)

	closed := make(chan error, 1)
	go func() { closed <- conn.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("connection close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("connection.close not answered while the log takes no ConnectionClosed")
	}
	if refused.Load() == 0 || len(commandsOf(ts.broker, (*proto.Command).GetConnectionClosed)) != 0 {
		t.Fatalf("ConnectionClosed refused %d times, committed %d; want refused, not committed",
			refused.Load(), len(commandsOf(ts.broker, (*proto.Command).GetConnectionClosed)))
	}

	quorum.Store(true)
	eventually(t, 10*time.Second, "ConnectionClosed to commit once the log takes commands", func() bool {
		return len(commandsOf(ts.broker, (*proto.Command).GetConnectionClosed)) == 1
	})
}

// A node that applies its own NodeDown (it was cut off longer than the
// cluster waits, yet runs) closes its clients' connections: the log no
// longer has their channels or consumers. Another node's NodeDown closes
// nothing here.
func TestServer_OwnNodeDownClosesConnections(t *testing.T) {
	ts := startServer(t, Config{})
	conn, ch := openChannel(t, ts)
	closed := conn.NotifyClose(make(chan *amqp091.Error, 1))
	consumeLogTags(t, ts, ch, "q", 1)

	ts.srv.NodeDown("node-b")
	if _, err := ch.QueueDeclare("still-open", false, false, false, false, nil); err != nil {
		t.Fatalf("another node's NodeDown closed this one's connection: %v", err)
	}
	ts.srv.NodeDown(ts.broker.NodeID())
	mustClosedWith(t, closed, amqp091.ConnectionForced)
	// The client may come back at once.
	_, ch2 := openChannel(t, ts)
	if _, err := ch2.QueueDeclare("again", false, false, false, false, nil); err != nil {
		t.Fatalf("a new connection after NodeDown: %v", err)
	}
}

// A NodeDown of this node that reaches the server after the log applied
// it (held through a silence) closes only the connections made by then:
// a connection made later registered its channels after it, and the log
// dropped nothing of it.
func TestServer_OwnNodeDownClosesOnlyTheConnectionsMadeBeforeIt(t *testing.T) {
	ts := startServer(t, Config{})
	before, _ := openChannel(t, ts)
	closed := before.NotifyClose(make(chan *amqp091.Error, 1))
	applied := time.Now()
	after, ch := openChannel(t, ts)
	afterClosed := after.NotifyClose(make(chan *amqp091.Error, 1))
	ts.srv.NodeDownSince(ts.broker.NodeID(), applied)
	mustClosedWith(t, closed, amqp091.ConnectionForced)
	if _, err := ch.QueueDeclare("made-after", false, false, false, false, nil); err != nil {
		t.Fatalf("a connection made after the NodeDown applied was closed: %v", err)
	}
	select {
	case err := <-afterClosed:
		t.Fatalf("a connection made after the NodeDown applied was closed: %v", err)
	default:
	}
}

// A requeue of deliveries the client never saw that fails to commit is sent
// again: otherwise they stay the consumer's, against its credit, until the
// channel closes.
func TestOverdueRequeue_RetriedUntilItCommits(t *testing.T) {
	ts := startServer(t, Config{})
	tries := failFirst(ts.broker, func(c *proto.Command) bool { return c.GetRequeue() != nil })
	_, ch := openChannel(t, ts)
	if _, err := ch.Consume("work", "", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	cons := commandsOf(ts.broker, (*proto.Command).GetConsume)[0]
	ts.srv.Deliver(&fsm.Delivery{Consumer: cons.Consumer, DeliveryTag: 9, RoutingKey: "work", Deadline: time.Now().UnixMilli() - 5000})
	eventually(t, 5*time.Second, "the requeue to commit", func() bool {
		return len(commandsOf(ts.broker, (*proto.Command).GetRequeue)) == 1
	})
	r := commandsOf(ts.broker, (*proto.Command).GetRequeue)[0]
	if n := tries.Load(); n != 2 || !slices.Equal(r.Tags, []uint64{9}) || !r.Unseen {
		t.Fatalf("%d attempts, committed %v; want 2 attempts and an unseen requeue of 9", n, r)
	}
}

// A node cut off from the majority pauses: its clients' connections close
// with 320 CONNECTION_FORCED and the node's reason, and a client that
// tries again is refused at connection.open with the same until the node
// resumes, so clients move to a node that can serve them.
func TestServer_PauseClosesAndRefusesConnectionsUntilResume(t *testing.T) {
	ts := startServer(t, Config{})
	conn, ch := openChannel(t, ts)
	closed := conn.NotifyClose(make(chan *amqp091.Error, 1))
	consumeLogTags(t, ts, ch, "q", 1)

	const reason = "broker forced connection closure with reason 'no quorum': cut off"
	ts.srv.Pause(reason)
	e := mustClosedWith(t, closed, amqp091.ConnectionForced)
	if !strings.Contains(e.Reason, reason) {
		t.Fatalf("closed with %q, want the node's reason", e.Reason)
	}
	if got := ts.srv.Paused(); got != reason {
		t.Fatalf("Paused() = %q", got)
	}
	_, err := amqp091.Dial(ts.url)
	var ae *amqp091.Error
	if !errors.As(err, &ae) || ae.Code != amqp091.ConnectionForced || !strings.Contains(ae.Reason, reason) {
		t.Fatalf("a connection while paused: %v, want 320 with the reason", err)
	}
	ts.srv.Resume()
	_, ch2 := openChannel(t, ts)
	if _, err := ch2.QueueDeclare("again", false, false, false, false, nil); err != nil {
		t.Fatalf("a connection after Resume: %v", err)
	}
}

// A vhost or user deleted while a connection to it opens (after its
// checks at connection.open, before it counts as open, so the deletion's
// close passes it by) does not leave the connection open: it is refused
// with the deletion's reason, as RabbitMQ closes those already open.
func TestServer_ADeletionDuringConnectionOpenRefusesIt(t *testing.T) {
	for _, tc := range []struct {
		what, name string
		remove     func(b *fakeBroker)
		deleted    func(srv *Server, name string)
	}{
		{"vhost", "doomed", func(b *fakeBroker) { delete(b.vhosts, "doomed") }, (*Server).VhostDeleted},
		{"user", "guest", func(b *fakeBroker) { delete(b.users, "guest") }, (*Server).UserDeleted},
	} {
		t.Run(tc.what, func(t *testing.T) {
			ts := startServer(t, Config{})
			ts.broker.mu.Lock()
			ts.broker.vhosts["doomed"] = true
			ts.broker.onPermission = func(_, vhost string) {
				if vhost == "doomed" {
					ts.broker.mu.Lock()
					tc.remove(ts.broker)
					ts.broker.mu.Unlock()
					tc.deleted(ts.srv, tc.name)
				}
			}
			ts.broker.mu.Unlock()
			reason := tc.what + " '" + tc.name + "' is deleted"
			conn, err := amqp091.Dial("amqp://guest:guest@" + ts.addr + "/doomed")
			if err == nil {
				conn.Close()
				t.Fatal("a connection to what was deleted as it opened stayed open")
			}
			var ae *amqp091.Error
			if !errors.As(err, &ae) || ae.Code != amqp091.ConnectionForced || ae.Reason != "CONNECTION_FORCED - "+reason {
				t.Fatalf("refused with %v, want 320 %q", err, reason)
			}
		})
	}
}

// A node that has just resumed from a pause refuses a connection at
// connection.open with 320 and why, before its watch has looked (it did
// not tell the server to Pause yet), rather than open it and close it a
// moment later; once the node takes clients, so does the server.
func TestServer_RefusesConnectionsWhileTheNodeRefusesClients(t *testing.T) {
	ts := startServer(t, Config{})
	const reason = "this node did not run for 6s (paused or starved): it is checking its contact with the cluster"
	ts.broker.mu.Lock()
	ts.broker.refused = reason
	ts.broker.mu.Unlock()
	_, err := amqp091.Dial(ts.url)
	var ae *amqp091.Error
	if !errors.As(err, &ae) || ae.Code != amqp091.ConnectionForced || !strings.Contains(ae.Reason, reason) {
		t.Fatalf("a connection while the node refuses clients: %v, want 320 with its reason", err)
	}
	ts.broker.mu.Lock()
	ts.broker.refused = ""
	ts.broker.mu.Unlock()
	_, ch := openChannel(t, ts)
	if _, err := ch.QueueDeclare("again", false, false, false, false, nil); err != nil {
		t.Fatalf("a connection once the node takes clients: %v", err)
	}
}

// A basic.get whose commit outcome is unknown (the leader changed under
// it) is resolved from the log and tried again, with the connection
// open, as an ack is: after a Tick, a delivery of the channel's that the
// client does not hold came from the failed Get, and goes back to the
// queue unseen; one the client holds from an earlier get stays. Before,
// the connection was closed with 541.
func TestGet_UnknownOutcomeIsResolvedFromTheLog(t *testing.T) {
	eachOutcome(t, func(t *testing.T, committed bool) {
		ts := startServer(t, Config{})
		var gets, tries atomic.Int32
		ts.broker.mu.Lock()
		ts.broker.fail = func(cmds []*proto.Command) error {
			if cmds[0].GetGet() != nil && tries.Add(1) == 2 {
				return errors.New("cluster: leadership lost, outcome unknown")
			}
			return nil
		}
		ts.broker.gets = func(vhost, queue string, ref *proto.ChannelRef) (uint32, []uint64, error) {
			if vhost != "/" || queue != "q" {
				t.Errorf("Gets asked of %s in %s", queue, vhost)
			}
			if tries.Load() < 2 {
				return 0, []uint64{5}, nil
			}
			if committed {
				return 0, []uint64{5, 8}, nil
			}
			return 0, []uint64{5}, nil
		}
		ts.broker.mu.Unlock()
		ts.broker.script(func(c *proto.Command) *proto.Result {
			if c.GetGet() == nil {
				return nil
			}
			tag := uint64(5)
			if gets.Add(1) > 1 {
				tag = 9
			}
			return &proto.Result{Get: &proto.GetOk{DeliveryTag: tag, Body: []byte("m")}}
		}, nil)
		conn, ch := openChannel(t, ts)
		closed := conn.NotifyClose(make(chan *amqp091.Error, 1))
		if _, ok, err := ch.Get("q", false); err != nil || !ok {
			t.Fatalf("first get: %v %v", ok, err)
		}
		d, ok, err := ch.Get("q", false)
		if err != nil || !ok {
			t.Fatalf("the get of unknown outcome: %v %v", ok, err)
		}
		if d.DeliveryTag != 2 {
			t.Fatalf("wire tag %d, want 2", d.DeliveryTag)
		}
		if tries.Load() != 3 {
			t.Fatalf("%d submissions of a Get, want 3 (one failed, one tried again)", tries.Load())
		}
		if len(commandsOf(ts.broker, (*proto.Command).GetTick)) == 0 {
			t.Fatal("no command went through the log before the state was read")
		}
		requeues := commandsOf(ts.broker, (*proto.Command).GetRequeue)
		switch {
		case committed && (len(requeues) != 1 || !slices.Equal(requeues[0].GetTags(), []uint64{8}) || !requeues[0].GetUnseen()):
			t.Fatalf("requeues %v, want one of tag 8, unseen", requeues)
		case !committed && len(requeues) != 0:
			t.Fatalf("requeued %v, though the failed Get assigned nothing", requeues)
		}
		// Its ack names the retried Get's log tag.
		if err := d.Ack(false); err != nil {
			t.Fatal(err)
		}
		eventually(t, 5*time.Second, "ack of the get", func() bool {
			s := commandsOf(ts.broker, (*proto.Command).GetSettle)
			return len(s) == 1 && slices.Equal(s[0].Tags, []uint64{9})
		})
		select {
		case err := <-closed:
			t.Fatalf("connection closed: %v", err)
		default:
		}
	})
}

// A basic.get of unknown outcome whose log cannot be read where it is
// asked (a queue group this node does not run, whose members do not
// answer yet) is asked again until it can; past resolveGetFor the
// connection closes with 541.
func TestGet_UnknownOutcomeOnALogNotReadYet(t *testing.T) {
	for _, answers := range []bool{true, false} {
		t.Run(fmt.Sprintf("answered %v", answers), func(t *testing.T) {
			if !answers {
				defer func(d time.Duration) { resolveGetFor = d }(resolveGetFor)
				resolveGetFor = 300 * time.Millisecond
			}
			ts := startServer(t, Config{})
			failFirst(ts.broker, func(c *proto.Command) bool { return c.GetGet() != nil })
			var asked atomic.Int32
			ts.broker.mu.Lock()
			ts.broker.gets = func(string, string, *proto.ChannelRef) (uint32, []uint64, error) {
				if asked.Add(1) <= 3 || !answers {
					return 0, nil, errors.New("queue group \"q1\": no member answers")
				}
				return 0, nil, nil
			}
			ts.broker.mu.Unlock()
			ts.broker.script(func(c *proto.Command) *proto.Result {
				if c.GetGet() == nil {
					return nil
				}
				return &proto.Result{Get: &proto.GetOk{DeliveryTag: 1, Body: []byte("m")}}
			}, nil)
			conn, ch := openChannel(t, ts)
			closed := conn.NotifyClose(make(chan *amqp091.Error, 1))
			_, ok, err := ch.Get("q", false)
			if answers {
				if err != nil || !ok || asked.Load() < 4 {
					t.Fatalf("get: %v %v after %d reads", ok, err, asked.Load())
				}
				return
			}
			if err == nil {
				t.Fatal("the get of unknown outcome succeeded")
			}
			select {
			case err := <-closed:
				if err == nil || err.Code != 541 {
					t.Fatalf("connection closed with %v, want 541", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the connection stayed open")
			}
		})
	}
}
