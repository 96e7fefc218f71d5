package amqp

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/broker"
	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// A consumer with a prefetch of 300 takes 150 messages, acknowledges
// them and closes, as a pika script does. Its node was assigned more
// than it wrote (look-ahead beyond the prefetch, and deliveries still on
// their way at the close). RabbitMQ flags redelivered, and counts in
// x-delivery-count, only what it sent: at most the 300 unacknowledged;
// the next consumer gets every other message as new. Closing the
// channel alone, and a queue in a queue group, alike.
func TestClose_FlagsOnlyWhatTheClientWasSent(t *testing.T) {
	for _, c := range []struct {
		name          string
		placed, chans bool
		// old runs a node of the release before level 22: the log stays
		// below it, the close names nothing and every delivery comes
		// back flagged, as before, but the close reaches the log.
		old bool
		// cancel cancels the consumer first and nacks, requeueing, what
		// the client got meanwhile, as pika's consume generator does.
		cancel bool
	}{
		{"connection close", false, false, false, false},
		{"channel close", false, true, false, false},
		{"connection close, queue group", true, false, false, false},
		{"cancel, nack and close", false, false, false, true},
		{"cancel, nack and close, queue group", true, false, false, true},
		{"connection close, a node of the release before", false, false, true, false},
		{"channel close, a node of the release before", false, true, true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			url := closeCluster(t, c.placed, c.old)
			const total, prefetch, acked = 3000, 300, 150
			_, p := dialT(t, url)
			if _, err := p.QueueDeclare("seen", true, false, false, false, amqp091.Table{"x-queue-type": "quorum"}); err != nil {
				t.Fatal(err)
			}
			nacked := publishConfirmed(t, p, "seen", total)

			first, err := amqp091.Dial(url)
			if err != nil {
				t.Fatal(err)
			}
			ch, err := first.Channel()
			if err != nil {
				t.Fatal(err)
			}
			if err := ch.Qos(prefetch, 0, false); err != nil {
				t.Fatal(err)
			}
			ds, err := ch.Consume("seen", "first", false, false, false, false, nil)
			if err != nil {
				t.Fatal(err)
			}
			for range acked {
				d := <-ds
				if d.Redelivered {
					t.Fatalf("message %s came flagged on its first delivery", d.Body)
				}
				if err := d.Ack(false); err != nil {
					t.Fatal(err)
				}
			}
			if c.cancel {
				if err := ch.Cancel("first", false); err != nil {
					t.Fatal(err)
				}
				var last uint64
				for d := range ds {
					last = d.DeliveryTag
				}
				if last != 0 {
					if err := ch.Nack(last, true, true); err != nil {
						t.Fatal(err)
					}
				}
			}
			if c.chans {
				err = ch.Close()
			} else {
				err = first.Close()
			}
			if err != nil {
				t.Fatal(err)
			}

			_, second := dialT(t, url)
			flagged, got := 0, map[string]bool{}
			for _, d := range drainQueue(t, second, "seen", total-acked-nacked) {
				if got[string(d.Body)] {
					t.Fatalf("message %s came twice", d.Body)
				}
				got[string(d.Body)] = true
				count, _ := d.Headers["x-delivery-count"].(int64)
				// A nack returns a message flagged but counts no failed
				// attempt (RabbitMQ 4.3).
				if d.Redelivered != (count == 1) && !(c.cancel && d.Redelivered && count == 0) {
					t.Fatalf("message %s: redelivered %v with x-delivery-count %d", d.Body, d.Redelivered, count)
				}
				if d.Redelivered {
					flagged++
				}
			}
			if len(got) > total-acked {
				t.Fatalf("%d came back, more than the %d not acknowledged", len(got), total-acked)
			}
			if !c.old && (flagged == 0 || flagged > prefetch) {
				t.Fatalf("%d of %d came back flagged redelivered; the client was sent at most the prefetch, %d, unacknowledged",
					flagged, total-acked, prefetch)
			}
		})
	}
}

// A client whose socket dies right after its acknowledgements (no
// connection.close) had those acknowledgements read by its node, which
// cannot commit them once the connection is gone. The messages they
// name were seen: each comes back flagged, or not at all when its ack
// made it. No message the client got comes back unflagged.
func TestClose_ADeadSocketsUnsettledAcksComeBackFlagged(t *testing.T) {
	url := closeCluster(t, false, false)
	const total, prefetch, acked = 1000, 100, 60
	for round := range 5 {
		_, p := dialT(t, url)
		q := fmt.Sprint("dead-socket-", round)
		if _, err := p.QueueDeclare(q, true, false, false, false, amqp091.Table{"x-queue-type": "quorum"}); err != nil {
			t.Fatal(err)
		}
		nacked := publishConfirmed(t, p, q, total)

		ch, sock := dialWithSocket(t, url)
		if err := ch.Qos(prefetch, 0, false); err != nil {
			t.Fatal(err)
		}
		ds, err := ch.Consume(q, "", false, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]bool{}
		for range acked {
			d := <-ds
			got[string(d.Body)] = true
			if err := d.Ack(false); err != nil {
				t.Fatal(err)
			}
		}
		_ = sock.Close()
		for d := range ds {
			got[string(d.Body)] = true
		}

		// The close requeues every unacknowledged delivery in one
		// command: once the queue holds them, a get takes each.
		_, second := dialT(t, url)
		back := drainQueue(t, second, q, total-acked-nacked)
		for _, d := range back {
			if got[string(d.Body)] && !d.Redelivered {
				t.Fatalf("round %d: message %s, which the first client got, came back unflagged", round, d.Body)
			}
		}
		if len(back) > total {
			t.Fatalf("round %d: %d came back of %d", round, len(back), total)
		}
	}
}

// When the socket dies, the acknowledgements its node read and could not
// commit (the connection's submissions end with it) leave their
// deliveries with the channel: the close names them as seen, beside what
// the client held, so they come back flagged.
func TestClose_AcksThatFailedWithTheSocketAreNamedSeen(t *testing.T) {
	ts := startServer(t, Config{CloseTimeout: 5 * time.Second})
	var blocked atomic.Int32
	ts.broker.mu.Lock()
	ts.broker.fail = func(cmds []*proto.Command) error {
		if cmds[0].GetSettle() == nil {
			return nil
		}
		// The acks reached the node; they fail once the socket died.
		blocked.Add(1)
		<-ts.srv.lookupFirst().ctx.Done()
		return errors.New("cluster: leadership lost, outcome unknown")
	}
	ts.broker.mu.Unlock()
	ch, sock := dialWithSocket(t, ts.url)
	got := consumeLogTags(t, ts, ch, "q", 101, 102, 103)
	for _, d := range got[:2] {
		if err := d.Ack(false); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 5*time.Second, "the acks submitted", func() bool { return blocked.Load() > 0 })
	_ = sock.Close()
	seen, listed := firstClose(t, ts, (*proto.Command).GetConnectionClosed)
	wantSeenRange(t, seen, listed, 101, 103)
}

// An acknowledgement the log refused closes the channel with the log's
// exception, and the close names its delivery as seen with what the
// client still held: the client was sent it, and whatever the log still
// holds of it must come back flagged.
func TestClose_ARefusedAckIsNamedSeen(t *testing.T) {
	ts := startServer(t, Config{})
	ts.broker.mu.Lock()
	ts.broker.answer = func(c *proto.Command) *proto.Result {
		if c.GetSettle() != nil {
			return &proto.Result{Code: 406, Text: "PRECONDITION_FAILED - unknown delivery tag 101"}
		}
		return nil
	}
	ts.broker.mu.Unlock()
	_, ch := openChannel(t, ts)
	closedCh := ch.NotifyClose(make(chan *amqp091.Error, 1))
	got := consumeLogTags(t, ts, ch, "q", 101, 102)
	if err := got[0].Ack(false); err != nil {
		t.Fatal(err)
	}
	if err := <-closedCh; err == nil || err.Code != 406 {
		t.Fatalf("channel closed with %v, want the log's 406", err)
	}
	seen, listed := firstClose(t, ts, (*proto.Command).GetChannelClosed)
	wantSeenRange(t, seen, listed, 101, 102)
}

// An acknowledgement the node read just before the channel closed with
// an exception, still queued for the worker when the close came, is
// dropped with everything else the client sent before close-ok, as
// RabbitMQ drops it; its delivery left what the client holds as the ack
// was read, so the close names it as seen, and the log returns it
// flagged, as RabbitMQ returns what it sent and had no ack for.
func TestClose_AnAckQueuedBehindTheExceptionIsNamedSeen(t *testing.T) {
	ts := startServer(t, Config{})
	declaring, release := make(chan struct{}), make(chan struct{})
	ts.broker.script(func(c *proto.Command) *proto.Result {
		if c.GetQueueDeclare().GetName() == "refused" {
			return &proto.Result{Code: 406, Text: "PRECONDITION_FAILED - inequivalent arg 'durable'"}
		}
		return nil
	}, func(c *proto.Command) {
		if c.GetQueueDeclare().GetName() == "refused" {
			close(declaring)
			<-release
		}
	})
	_, ch := openChannel(t, ts)
	got := consumeLogTags(t, ts, ch, "q", 101, 102)
	declared := make(chan error, 1)
	go func() {
		_, err := ch.QueueDeclare("refused", true, false, false, false, nil)
		declared <- err
	}()
	<-declaring
	if err := got[0].Ack(false); err != nil {
		t.Fatal(err)
	}
	// The reader took the ack: wire tag 1 left what the client holds.
	sch := ts.srv.lookupFirst().channel(1)
	eventually(t, 5*time.Second, "the ack read", func() bool {
		sch.mu.Lock()
		defer sch.mu.Unlock()
		_, held := sch.led.written[1]
		return !held
	})
	close(release)
	if err := <-declared; err == nil {
		t.Fatal("the declare was not refused")
	}
	seen, listed := firstClose(t, ts, (*proto.Command).GetChannelClosed)
	if n := len(commandsOf(ts.broker, (*proto.Command).GetSettle)); n != 0 {
		t.Fatalf("%d settles went to the log after the exception, want none", n)
	}
	wantSeenRange(t, seen, listed, 101, 102)
}

// basic.recover takes the channel's deliveries out of what the client
// holds and hands them back to the log. When that fails (the connection
// closes with 541), the connection's close names them as seen, and they
// come back flagged: the client had them.
func TestClose_ARecoverThatFailedIsNamedSeen(t *testing.T) {
	ts := startServer(t, Config{})
	ts.broker.mu.Lock()
	ts.broker.fail = func(cmds []*proto.Command) error {
		if r := cmds[0].GetRequeue(); r != nil && !r.GetUnseen() {
			return errors.New("cluster: leadership lost, outcome unknown")
		}
		return nil
	}
	ts.broker.mu.Unlock()
	conn, ch := openChannel(t, ts)
	closedConn := conn.NotifyClose(make(chan *amqp091.Error, 1))
	consumeLogTags(t, ts, ch, "q", 101, 102)
	if err := ch.Recover(true); err == nil {
		t.Fatal("the recover did not fail")
	}
	if err := <-closedConn; err == nil || err.Code != 541 {
		t.Fatalf("connection closed with %v, want 541", err)
	}
	seen, listed := firstClose(t, ts, (*proto.Command).GetConnectionClosed)
	wantSeenRange(t, seen, listed, 101, 102)
}

// firstClose waits for the first command of the server's that get
// finds (a ChannelClosed or a ConnectionClosed) and returns what it names
// as seen and whether it names it.
func firstClose[C interface {
	GetSeen() []*proto.SeenDeliveries
	GetSeenListed() bool
}](t *testing.T, ts *testServer, get func(*proto.Command) C) (seen []*proto.SeenDeliveries, listed bool) {
	t.Helper()
	eventually(t, 10*time.Second, "the close", func() bool {
		if cs := commandsOf(ts.broker, get); len(cs) > 0 {
			seen, listed = cs[0].GetSeen(), cs[0].GetSeenListed()
			return true
		}
		return false
	})
	return seen, listed
}

// wantSeenRange checks that a close names one range of channel 1's log
// tags as seen, from to to.
func wantSeenRange(t *testing.T, seen []*proto.SeenDeliveries, listed bool, from, to uint64) {
	t.Helper()
	if !listed || len(seen) != 1 || seen[0].GetChannel() != 1 || !slices.Equal(seen[0].GetRanges(), []uint64{from, to}) {
		t.Fatalf("the close names %v (listed %v), want %d to %d", seen, listed, from, to)
	}
}

// closeCluster is a cluster of three nodes whose first serves AMQP with
// the look-ahead cmd/raftmq sets by default (--consumer-lookahead), with
// queues placed in queue groups when placed and its last node announcing
// level 21 when old, and that first node's URL.
func closeCluster(t *testing.T, placed, old bool) string {
	t.Helper()
	srv := NewServer(Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), CloseTimeout: time.Second, ConsumerLookahead: 10})
	c := clustertest.New(t, 3, clustertest.WithConfig(func(i int, cfg *cluster.Config) {
		if i == 0 {
			cfg.Effects = srv
		}
		if old && i == 2 {
			cfg.Protocol = fsm.SeenAtCloseLevel - 1
		}
		if placed {
			cfg.QueueGroups = 3
			cfg.PlaceQueues = true
		}
	}))
	c.WaitForLeader(clustertest.Timeout)
	node := c.Nodes[0].Node()
	<-node.Ready()
	srv.SetBroker(broker.New(node, nil))
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		var on, users bool
		var level uint32
		node.View(func(m *fsm.Machine) { on, users, level = m.Placing(), m.Initialized(), m.ProtocolLevel() })
		if !users || on != placed {
			return fmt.Errorf("defaults %v, placement %v", users, on)
		}
		if want := map[bool]uint32{false: fsm.Protocol, true: fsm.SeenAtCloseLevel - 1}[old]; level != want {
			return fmt.Errorf("level %d, want %d", level, want)
		}
		if got := node.RunningQueueGroups(); placed && len(got) != 3 {
			return fmt.Errorf("runs groups %v", got)
		}
		return nil
	})
	return "amqp://guest:guest@" + serveLoopback(t, srv) + "/"
}

// publishConfirmed publishes n persistent messages, their numbers as
// bodies, to queue q through ch, waits for every confirm and returns how
// many were nacked: on a loaded machine a test cluster can change leaders,
// and a publish whose outcome that left unknown is nacked (it may be in
// the queue or not).
func publishConfirmed(t *testing.T, ch *amqp091.Channel, q string, n int) (nacked int) {
	t.Helper()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	var dcs []*amqp091.DeferredConfirmation
	for i := range n {
		dc, err := ch.PublishWithDeferredConfirm("", q, false, false, amqp091.Publishing{DeliveryMode: 2, Body: []byte(fmt.Sprint(i))})
		if err != nil {
			t.Fatal(err)
		}
		dcs = append(dcs, dc)
	}
	for _, dc := range dcs {
		if !dc.Wait() {
			nacked++
		}
	}
	if ch.IsClosed() {
		t.Fatal("the publishing channel closed")
	}
	return nacked
}

// drainQueue gets every message of queue q, without acknowledging, once
// it holds at least atLeast ready: a close requeues what its channels
// held in one command, so they are all back by then.
func drainQueue(t *testing.T, ch *amqp091.Channel, q string, atLeast int) []amqp091.Delivery {
	t.Helper()
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		n, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		if n.Messages < atLeast {
			return fmt.Errorf("%d ready, want %d", n.Messages, atLeast)
		}
		return nil
	})
	var out []amqp091.Delivery
	for {
		d, ok, err := ch.Get(q, true)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return out
		}
		out = append(out, d)
	}
}

// dialWithSocket opens a channel on a new connection to url and returns
// it with the connection's socket, for a test to cut it as a dead peer
// would (no connection.close).
func dialWithSocket(t *testing.T, url string) (*amqp091.Channel, net.Conn) {
	t.Helper()
	var sock net.Conn
	conn, err := amqp091.DialConfig(url, amqp091.Config{Dial: func(network, addr string) (net.Conn, error) {
		c, err := net.Dial(network, addr)
		sock = c
		return c, err
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return ch, sock
}
