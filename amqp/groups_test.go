package amqp

import (
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	gproto "google.golang.org/protobuf/proto"

	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// A channel consumes from queues of two groups, whose logs number their
// deliveries on their own: the same log tags come from both. The tests
// check that the wire tags stay the channel's own and that each
// settlement names its group's tags and goes to that group's log.

// groupConsumer is a consumer of the test's channel whose queue lives in
// group.
type groupConsumer struct {
	group uint32
	ref   *proto.ConsumerRef
	ds    <-chan amqp091.Delivery
}

// consumeIn starts a consumer of queue, whose deliveries the log of group
// assigns.
func consumeIn(t *testing.T, ts *testServer, ch *amqp091.Channel, queue string, group uint32) groupConsumer {
	t.Helper()
	ds, err := ch.Consume(queue, queue+"-c", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	cons := commandsOf(ts.broker, (*proto.Command).GetConsume)
	return groupConsumer{group: group, ref: cons[len(cons)-1].Consumer, ds: ds}
}

// deliver has c's log assign it a delivery of log tag and returns what
// the client got.
func (c groupConsumer) deliver(t *testing.T, ts *testServer, tag uint64) amqp091.Delivery {
	t.Helper()
	ts.srv.Deliver(&fsm.Delivery{Consumer: c.ref, Group: c.group, DeliveryTag: tag, Body: []byte(fmt.Sprintf("g%d-%d", c.group, tag))})
	select {
	case d, ok := <-c.ds:
		if !ok {
			t.Fatal("the consumer ended")
		}
		return d
	case <-time.After(5 * time.Second):
		t.Fatalf("no delivery of group %d tag %d", c.group, tag)
	}
	return amqp091.Delivery{}
}

// forget drops what the broker recorded so far.
func (b *fakeBroker) forget() {
	b.mu.Lock()
	b.cmds, b.batches, b.sent = nil, nil, nil
	b.mu.Unlock()
}

// sentLog is what the broker was given, one line per command: the group,
// how it was submitted, the kind and the tags.
func (b *fakeBroker) sentLog() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, s := range b.sent {
		kind := "?"
		switch {
		case s.cmd.GetSettle() != nil:
			kind = "settle"
		case s.cmd.GetRequeue() != nil:
			kind = "requeue"
			if s.cmd.GetRequeue().GetUnseen() {
				kind += "-unseen"
			}
			if s.cmd.GetRequeue().GetFailed() {
				kind += "-failed"
			}
		case s.cmd.GetDiscard() != nil:
			kind = "discard"
		case s.cmd.GetTick() != nil:
			kind = "tick"
		case s.cmd.GetCancel() != nil:
			kind = "cancel"
		case s.cmd.GetChannelClosed() != nil:
			kind = "channel-closed"
		case s.cmd.GetConnectionClosed() != nil:
			kind = "connection-closed"
		}
		out = append(out, fmt.Sprintf("g%d %s %s %v", s.group, s.via, kind, ackTags(s.cmd)))
	}
	return out
}

func wantSent(t *testing.T, b *fakeBroker, want ...string) {
	t.Helper()
	if got := b.sentLog(); !slices.Equal(got, want) {
		t.Fatalf("sent\n  %q\nwant\n  %q", got, want)
	}
}

// twoGroups opens a channel consuming from q0 (group 0) and q1 (group 1)
// and has each log assign log tags 1 and 2, interleaved: the client gets
// wire tags 1 to 4, the same log tags from both groups.
func twoGroups(t *testing.T, ts *testServer) (*amqp091.Channel, groupConsumer, groupConsumer, []amqp091.Delivery) {
	t.Helper()
	_, ch := openChannel(t, ts)
	c0 := consumeIn(t, ts, ch, "q0", 0)
	c1 := consumeIn(t, ts, ch, "q1", 1)
	ds := []amqp091.Delivery{c0.deliver(t, ts, 1), c1.deliver(t, ts, 1), c0.deliver(t, ts, 2), c1.deliver(t, ts, 2)}
	for i, d := range ds {
		if d.DeliveryTag != uint64(i+1) {
			t.Fatalf("delivery %d (%s) has wire tag %d, want %d", i, d.Body, d.DeliveryTag, i+1)
		}
	}
	ts.broker.forget()
	return ch, c0, c1, ds
}

func TestGroups_SingleAcksGoToTheirGroups(t *testing.T) {
	ts := startServer(t, Config{})
	ch, _, _, ds := twoGroups(t, ts)
	// Log tag 2 of group 1, then log tag 1 of group 0.
	if err := ds[3].Ack(false); err != nil {
		t.Fatal(err)
	}
	syncChannel(t, ch)
	if err := ds[0].Ack(false); err != nil {
		t.Fatal(err)
	}
	syncChannel(t, ch)
	wantSent(t, ts.broker, "g1 group settle [2]", "g0 submit settle [1]")
}

func TestGroups_MultipleAckSettlesOncePerGroup(t *testing.T) {
	ts := startServer(t, Config{})
	ch, _, _, ds := twoGroups(t, ts)
	// Wire 3 covers group 0's log tags 1 and 2 and group 1's log tag 1.
	if err := ds[2].Ack(true); err != nil {
		t.Fatal(err)
	}
	syncChannel(t, ch)
	wantSent(t, ts.broker, "g0 submit settle [1 2]", "g1 group settle [1]")
	if err := ds[3].Ack(true); err != nil {
		t.Fatal(err)
	}
	syncChannel(t, ch)
	wantSent(t, ts.broker, "g0 submit settle [1 2]", "g1 group settle [1]", "g1 group settle [2]")
}

func TestGroups_NackAndRejectGoToTheirGroups(t *testing.T) {
	ts := startServer(t, Config{})
	ch, _, _, ds := twoGroups(t, ts)
	if err := ds[1].Nack(true, true); err != nil { // wire 1 and 2: tag 1 of each
		t.Fatal(err)
	}
	syncChannel(t, ch)
	if err := ds[3].Reject(false); err != nil { // group 1's tag 2
		t.Fatal(err)
	}
	syncChannel(t, ch)
	if err := ds[2].Reject(true); err != nil { // group 0's tag 2
		t.Fatal(err)
	}
	syncChannel(t, ch)
	wantSent(t, ts.broker,
		"g0 submit requeue [1]", "g1 group requeue [1]",
		"g1 group discard [2]",
		"g0 submit requeue-failed [2]")
}

func TestGroups_TransactionCommitsOneSettlePerGroup(t *testing.T) {
	ts := startServer(t, Config{})
	ch, _, _, ds := twoGroups(t, ts)
	if err := ch.Tx(); err != nil {
		t.Fatal(err)
	}
	if err := ds[1].Ack(true); err != nil { // tag 1 of each group
		t.Fatal(err)
	}
	if err := ds[3].Ack(false); err != nil { // group 1's tag 2
		t.Fatal(err)
	}
	syncChannel(t, ch)
	wantSent(t, ts.broker) // nothing before tx.commit
	if err := ch.TxCommit(); err != nil {
		t.Fatal(err)
	}
	wantSent(t, ts.broker, "g0 submit settle [1]", "g1 group settle [1]", "g1 group settle [2]")
	// Committed: those wire tags are gone, group 0's tag 2 is still the
	// client's.
	if err := ds[2].Ack(false); err != nil {
		t.Fatal(err)
	}
	if err := ch.TxCommit(); err != nil {
		t.Fatal(err)
	}
	wantSent(t, ts.broker, "g0 submit settle [1]", "g1 group settle [1]", "g1 group settle [2]", "g0 submit settle [2]")
}

// A consumer timeout names the tags of the log of the consumer's queue:
// group 1's tag 1 is taken back, group 0's tag 1 stays the client's.
func TestGroups_ConsumerTimeoutTakesBackItsGroupsTags(t *testing.T) {
	ts := startServer(t, Config{})
	ch, _, c1, ds := twoGroups(t, ts)
	cancels := ch.NotifyCancel(make(chan string, 1))
	ts.srv.ConsumerTimedOut(c1.ref, 500, []uint64{1, 2})
	select {
	case tag := <-cancels:
		if tag != "q1-c" {
			t.Fatalf("basic.cancel for %q", tag)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no basic.cancel")
	}
	// The late acks of group 1's deliveries are ignored; group 0's go.
	for _, d := range ds {
		if err := d.Ack(false); err != nil {
			t.Fatal(err)
		}
		syncChannel(t, ch)
	}
	wantSent(t, ts.broker, "g0 submit settle [1]", "g0 submit settle [2]")
}

func TestLedger_ConsumerTimeoutFindsTheConsumersGroup(t *testing.T) {
	l := started(t, []string{"a", "b"}, nil)
	da, db := dl("a", 7, 0), dl("b", 7, 0)
	db.Group = 3
	if got := feed(l, t0, da, db); len(got) != 2 {
		t.Fatalf("written %v", got)
	}
	if !l.timedOut("b", []uint64{7}) {
		t.Fatal("b not known")
	}
	if !l.wasReclaimed(3, []uint64{7}) || l.wasReclaimed(0, []uint64{7}) {
		t.Fatal("reclaimed the wrong group's tag 7")
	}
	tags, _, _, e := l.ack(ack(0, true), false, t0)
	if e != nil || !slices.Equal(tags, g0(7)) {
		t.Fatalf("multiple ack named %v (%v), want group 0's 7", tags, e)
	}
}

// An ack of unknown outcome in group 1 is resolved in group 1's log: the
// Tick goes there and the state asked is that log's.
func TestGroups_AckOfUnknownOutcomeIsResolvedInItsGroup(t *testing.T) {
	ts := startServer(t, Config{})
	ch, _, _, ds := twoGroups(t, ts)
	var failed atomic.Bool
	ts.broker.mu.Lock()
	ts.broker.fail = func(cmds []*proto.Command) error {
		if cmds[0].GetSettle() != nil && failed.CompareAndSwap(false, true) {
			return errors.New("leadership lost")
		}
		return nil
	}
	ts.broker.unackedIn = func(group uint32, _ *proto.ChannelRef, tags []uint64) []uint64 {
		if group == 1 {
			return tags
		}
		return nil
	}
	ts.broker.mu.Unlock()
	if err := ds[3].Ack(false); err != nil {
		t.Fatal(err)
	}
	syncChannel(t, ch)
	wantSent(t, ts.broker, "g1 group tick []", "g1 group settle [2]")
}

// A node that does not run group 1 resolves an ack of unknown outcome
// from a member (FarUnacked), not from its own Unacked, which reports
// every tag of a log it does not run as held. The ack had committed
// after all: nothing is settled again, and the channel stays open. Read
// from Unacked, the settle went again, the log refused it ("unknown
// delivery tag"), and the consumer's channel closed with 406 while the
// acks behind it were still on their way to the log.
func TestGroups_AckOfUnknownOutcomeOnANonMemberIsResolvedFromAMember(t *testing.T) {
	for _, committed := range []bool{true, false} {
		t.Run(fmt.Sprintf("committed=%v", committed), func(t *testing.T) {
			ts := startServer(t, Config{})
			ch, _, _, ds := twoGroups(t, ts)
			closed := ch.NotifyClose(make(chan *amqp091.Error, 1))
			var failed atomic.Bool
			var asked atomic.Int32
			ts.broker.mu.Lock()
			ts.broker.fail = func(cmds []*proto.Command) error {
				if cmds[0].GetSettle() != nil && failed.CompareAndSwap(false, true) {
					return errors.New("leadership lost, outcome unknown")
				}
				return nil
			}
			// This node's view of a log it does not run: every tag held.
			ts.broker.unackedIn = func(group uint32, _ *proto.ChannelRef, tags []uint64) []uint64 {
				if group == 1 {
					return tags
				}
				return nil
			}
			ts.broker.farUnacked = func(group uint32, _ *proto.ChannelRef, tags []uint64) ([]uint64, bool, error) {
				asked.Add(1)
				if committed {
					return nil, false, nil
				}
				return tags, false, nil
			}
			// The log refuses to settle a tag it settled already.
			ts.broker.answer = func(c *proto.Command) *proto.Result {
				if s := c.GetSettle(); s != nil && committed {
					return &proto.Result{Code: 406, Text: "PRECONDITION_FAILED - unknown delivery tag 2"}
				}
				return nil
			}
			ts.broker.mu.Unlock()
			if err := ds[3].Ack(false); err != nil {
				t.Fatal(err)
			}
			syncChannel(t, ch)
			if !failed.Load() || asked.Load() == 0 {
				t.Fatalf("the failure was not injected (%v) or no member was asked (%d)", failed.Load(), asked.Load())
			}
			if committed {
				wantSent(t, ts.broker)
			} else {
				wantSent(t, ts.broker, "g1 group settle [2]")
			}
			select {
			case err := <-closed:
				t.Fatalf("channel closed: %v", err)
			default:
			}
		})
	}
}

// Held look-ahead deliveries of a group-1 consumer go back to group 1's
// log, unseen, when the consumer is cancelled (before cancel-ok, however
// slowly the group commits) and when the channel closes.
func TestGroups_HeldDeliveriesGoBackToTheirGroup(t *testing.T) {
	ts := startServer(t, Config{ConsumerLookahead: 1})
	ts.broker.fail = func(cmds []*proto.Command) error {
		if cmds[0].GetRequeue() != nil {
			time.Sleep(50 * time.Millisecond) // a group that commits slowly
		}
		return nil
	}
	_, ch := openChannel(t, ts)
	if err := ch.Qos(10, 0, false); err != nil {
		t.Fatal(err)
	}
	c1 := consumeIn(t, ts, ch, "q1", 1)
	c2 := consumeIn(t, ts, ch, "q2", 2)
	for tag := uint64(1); tag <= 10; tag++ {
		c1.deliver(t, ts, tag)
		c2.deliver(t, ts, tag)
	}
	// Held: the client has its prefetch of each.
	for tag := uint64(11); tag <= 12; tag++ {
		ts.srv.Deliver(&fsm.Delivery{Consumer: c1.ref, Group: 1, DeliveryTag: tag})
		ts.srv.Deliver(&fsm.Delivery{Consumer: c2.ref, Group: 2, DeliveryTag: tag})
	}
	ts.broker.forget()
	if err := ch.Cancel("q1-c", false); err != nil {
		t.Fatal(err)
	}
	wantSent(t, ts.broker, "g0 submit cancel []", "g1 group requeue-unseen [11 12]")
	ts.broker.forget()
	if err := ch.Close(); err != nil {
		t.Fatal(err)
	}
	wantSent(t, ts.broker, "g0 submit cancel []", "g2 group requeue-unseen [11 12]", "g0 submit channel-closed []")
}

// With every queue in the metadata group (group 0) an acknowledgement is
// the one command it always was, submitted as before: a multiple ack of
// two deliveries is one Settle naming both tags, byte for byte.
func TestGroups_GroupZeroAloneIsAsBefore(t *testing.T) {
	ts := startServer(t, Config{})
	_, ch := openChannel(t, ts)
	c0 := consumeIn(t, ts, ch, "q0", 0)
	c0.deliver(t, ts, 5)
	b := c0.deliver(t, ts, 9)
	ts.broker.forget()
	if err := b.Ack(true); err != nil {
		t.Fatal(err)
	}
	syncChannel(t, ch)
	want := &proto.Command{Cmd: &proto.Command_Settle{Settle: &proto.Settle{
		Channel: c0.ref.GetChannel(), Tags: []uint64{5, 9},
	}}}
	ts.broker.mu.Lock()
	defer ts.broker.mu.Unlock()
	if len(ts.broker.batches) != 1 || len(ts.broker.batches[0]) != 1 || len(ts.broker.sent) != 1 {
		t.Fatalf("%d batches, %d commands, want one SubmitBatch of one command", len(ts.broker.batches), len(ts.broker.sent))
	}
	opts := gproto.MarshalOptions{Deterministic: true}
	got, err := opts.Marshal(ts.broker.batches[0][0])
	if err != nil {
		t.Fatal(err)
	}
	exp, _ := opts.Marshal(want)
	if string(got) != string(exp) {
		t.Fatalf("sent %v, want %v", ts.broker.batches[0][0], want)
	}
}

func TestGroups_RecoverRequeuesInEachGroup(t *testing.T) {
	ts := startServer(t, Config{})
	ch, _, _, ds := twoGroups(t, ts)
	if err := ds[0].Ack(false); err != nil {
		t.Fatal(err)
	}
	if err := ch.Recover(true); err != nil {
		t.Fatal(err)
	}
	wantSent(t, ts.broker, "g0 submit settle [1]", "g0 submit requeue [2]", "g1 group requeue [1 2]")
}

// A delivery that reaches its node past its deadline is withheld and
// handed back unseen to the log that assigned it.
func TestGroups_OverdueDeliveriesGoBackToTheirGroup(t *testing.T) {
	ts := startServer(t, Config{})
	ch, c0, c1, _ := twoGroups(t, ts)
	past := time.Now().Add(-time.Minute).UnixMilli()
	ts.srv.Deliver(&fsm.Delivery{Consumer: c1.ref, Group: 1, DeliveryTag: 3, Deadline: past})
	ts.srv.Deliver(&fsm.Delivery{Consumer: c0.ref, Group: 0, DeliveryTag: 3, Deadline: past})
	// The worker requeues what is withheld before the methods it takes;
	// it may wake between the two deliveries.
	syncChannel(t, ch)
	got := ts.broker.sentLog()
	slices.Sort(got)
	if want := []string{"g0 submit requeue-unseen [3]", "g1 group requeue-unseen [3]"}; !slices.Equal(got, want) {
		t.Fatalf("sent %q, want %q", got, want)
	}
}

// After a silence of the node the writer checks each delivery decided
// before it in the applied state of the log that assigned it, once a
// Tick proposed there is applied: group 1 took its tag 5 back, group 0
// did not.
func TestGroups_SilenceChecksEachDeliveryInItsGroup(t *testing.T) {
	b := &silentBroker{fakeBroker: newFakeBroker()}
	b.unackedIn = func(group uint32, _ *proto.ChannelRef, tags []uint64) []uint64 {
		if group == 0 {
			return tags
		}
		return nil
	}
	c := silentConn(t, b)
	ref := &proto.ChannelRef{Node: "node-a", Connection: "c1", Channel: 1}
	frame := func(s string) func([]byte) []byte { return func(p []byte) []byte { return append(p, s...) } }
	c.out.appendMarked(&mark{ch: ref, group: 1, tag: 5}, frame("[g1]"))
	c.out.appendMarked(&mark{ch: ref, group: 0, tag: 5}, frame("[g0]"))
	b.epoch.Store(1)
	buf, marks, _ := c.out.take(nil, nil)
	if got := string(c.guard(buf, marks)); got != "[g0]" {
		t.Fatalf("wrote %q, want group 0's delivery only", got)
	}
	wantSent(t, b.fakeBroker, "g0 submit tick []", "g1 group tick []")
}

// A delivery of a group's log this node does not run, decided before a
// silence, is checked on a member (FarUnacked), which applied a Tick of
// its own: this node reads nothing of that log, and must not take the
// delivery for standing because it cannot.
func TestGroups_SilenceChecksADeliveryOfAFarGroupOnAMember(t *testing.T) {
	b := &silentBroker{fakeBroker: newFakeBroker()}
	var asked []string
	b.farUnacked = func(group uint32, ref *proto.ChannelRef, tags []uint64) ([]uint64, bool, error) {
		asked = append(asked, fmt.Sprintf("g%d ch%d %v", group, ref.GetChannel(), tags))
		if group != 2 {
			return nil, true, nil
		}
		return []uint64{7}, false, nil
	}
	b.unackedIn = func(group uint32, _ *proto.ChannelRef, tags []uint64) []uint64 {
		if group == 2 {
			t.Errorf("group 2's log read here, where it is not run")
		}
		return tags
	}
	c := silentConn(t, b)
	ref := &proto.ChannelRef{Node: "node-a", Connection: "c1", Channel: 1}
	frame := func(s string) func([]byte) []byte { return func(p []byte) []byte { return append(p, s...) } }
	c.out.appendMarked(&mark{ch: ref, group: 2, tag: 7}, frame("[g2t7]"))
	c.out.appendMarked(&mark{ch: ref, group: 2, tag: 8}, frame("[g2t8]"))
	c.out.appendMarked(&mark{ch: ref, group: 1, tag: 8}, frame("[g1t8]"))
	b.epoch.Store(1)
	buf, marks, _ := c.out.take(nil, nil)
	if got := string(c.guard(buf, marks)); got != "[g2t7][g1t8]" {
		t.Fatalf("wrote %q, want the far group's tag 7 its member holds, and the near group's", got)
	}
	slices.Sort(asked)
	if want := []string{"g1 ch1 [8]", "g2 ch1 [7 8]"}; !slices.Equal(asked, want) {
		t.Fatalf("asked %q, want %q", asked, want)
	}
	wantSent(t, b.fakeBroker, "g0 submit tick []", "g1 group tick []")
}
