package amqp

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/raftmq/raftmq/proto"
)

func TestReplyTo_Names(t *testing.T) {
	key := newReplyKey()
	if len(key) != replyKeyLen || strings.Contains(key, ".") {
		t.Fatalf("key %q: want %d characters without a dot", key, replyKeyLen)
	}
	a := replyAddr{key: key, channel: 65535, conn: "0a1b2c3d4e5f-17", node: "node.with.dots"}
	got, ok := parseReplyName(a.name())
	if !ok || got != a {
		t.Fatalf("parse(%q) = %+v, %v; want %+v", a.name(), got, ok, a)
	}
	good := replyPrefix + key + ".7.conn.node"
	if _, ok := parseReplyName(good); !ok {
		t.Fatalf("%q does not parse", good)
	}
	for _, bad := range []string{
		"",
		replyQueue,
		replyPrefix,
		replyPrefix + "garbage",
		"amq.rabbitmq.reply-tox" + key + ".7.conn.node",
		replyPrefix + key[1:] + ".7.conn.node",
		replyPrefix + key + "A.7.conn.node",
		replyPrefix + key + ".0.conn.node",
		replyPrefix + key + ".07.conn.node",
		replyPrefix + key + ".+7.conn.node",
		replyPrefix + key + ".65536.conn.node",
		replyPrefix + key + ".-1.conn.node",
		replyPrefix + key + ".7.conn",
		replyPrefix + key + ".7..node",
		replyPrefix + key + ".7.conn.",
	} {
		if a, ok := parseReplyName(bad); ok {
			t.Errorf("%q parses as %+v", bad, a)
		}
	}
}

// replyPair is a requester with its reply consumer and a responder, on
// the servers given (the same server, or two nodes).
type replyPair struct {
	reqCh, respCh *amqp091.Channel
	replies       <-chan amqp091.Delivery
	tag           string
}

func newReplyPair(t *testing.T, requester, responder *testServer) *replyPair {
	t.Helper()
	_, reqCh := openChannel(t, requester)
	replies, err := reqCh.Consume(replyQueue, "rpc-client", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, respCh := openChannel(t, responder)
	return &replyPair{reqCh: reqCh, respCh: respCh, replies: replies, tag: "rpc-client"}
}

// request publishes a request with reply_to amq.rabbitmq.reply-to and
// returns the name the log saw as its reply_to.
func (p *replyPair) request(t *testing.T, ts *testServer, queue string) string {
	t.Helper()
	before := len(commandsOf(ts.broker, publishOf))
	if err := p.reqCh.Publish("", queue, false, false, amqp091.Publishing{ReplyTo: replyQueue, CorrelationId: "c1", Body: []byte("question")}); err != nil {
		t.Fatal(err)
	}
	var pub *proto.Publish
	eventually(t, 5*time.Second, "the request in the log", func() bool {
		pubs := commandsOf(ts.broker, publishOf)
		if len(pubs) > before {
			pub = pubs[before]
			return true
		}
		return false
	})
	return pub.GetProperties().GetReplyTo()
}

func publishOf(c *proto.Command) *proto.Publish { return c.GetPublish() }

func nextReply(t *testing.T, replies <-chan amqp091.Delivery) amqp091.Delivery {
	t.Helper()
	select {
	case d := <-replies:
		return d
	case <-time.After(5 * time.Second):
		t.Fatal("no reply")
	}
	return amqp091.Delivery{}
}

func TestReplyTo_RequestAndReply(t *testing.T) {
	ts := startServer(t, Config{})
	p := newReplyPair(t, ts, ts)
	name := p.request(t, ts, "rpc")
	addr, ok := parseReplyName(name)
	if !ok || addr.node != ts.broker.NodeID() || addr.channel != 1 {
		t.Fatalf("the request's reply_to became %q (%+v)", name, addr)
	}
	if err := p.respCh.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confirms := p.respCh.NotifyPublish(make(chan amqp091.Confirmation, 4))
	returns := p.respCh.NotifyReturn(make(chan amqp091.Return, 4))
	logged := len(commandsOf(ts.broker, publishOf))
	if err := p.respCh.Publish("", name, true, false, amqp091.Publishing{CorrelationId: "c1", Body: []byte("answer")}); err != nil {
		t.Fatal(err)
	}
	d := nextReply(t, p.replies)
	if string(d.Body) != "answer" || d.CorrelationId != "c1" || d.ConsumerTag != p.tag || d.Exchange != "" || d.RoutingKey != name || d.Redelivered {
		t.Fatalf("reply %+v", d)
	}
	// As in RabbitMQ 3.x, the name is no queue: a mandatory reply comes
	// back unroutable although it was delivered, and is confirmed.
	select {
	case r := <-returns:
		if r.ReplyCode != 312 || r.RoutingKey != name || string(r.Body) != "answer" {
			t.Fatalf("return %+v", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no basic.return for a mandatory reply")
	}
	if c := <-confirms; !c.Ack || c.DeliveryTag != 1 {
		t.Fatalf("confirm %+v", c)
	}
	if n := len(commandsOf(ts.broker, publishOf)); n != logged {
		t.Fatalf("the reply went to the log (%d publishes, %d before)", n, logged)
	}
	// The requester may answer its own request on the same channel.
	if err := p.reqCh.Publish("", name, false, false, amqp091.Publishing{Body: []byte("self")}); err != nil {
		t.Fatal(err)
	}
	if d := nextReply(t, p.replies); string(d.Body) != "self" {
		t.Fatalf("reply %q", d.Body)
	}
}

func TestReplyTo_Refusals(t *testing.T) {
	ts := startServer(t, Config{})
	cases := []struct {
		name string
		run  func(c *amqp091.Connection, ch *amqp091.Channel) error
		code int
		text string
	}{
		{"acknowledging consumer", func(_ *amqp091.Connection, ch *amqp091.Channel) error {
			_, err := ch.Consume(replyQueue, "", false, false, false, false, nil)
			return err
		}, 406, "PRECONDITION_FAILED - reply consumer cannot acknowledge"},
		{"second reply consumer", func(_ *amqp091.Connection, ch *amqp091.Channel) error {
			if _, err := ch.Consume(replyQueue, "one", true, false, false, false, nil); err != nil {
				return err
			}
			_, err := ch.Consume(replyQueue, "two", true, false, false, false, nil)
			return err
		}, 406, "PRECONDITION_FAILED - reply consumer already set"},
		{"consumer tag in use", func(_ *amqp091.Connection, ch *amqp091.Channel) error {
			if _, err := ch.Consume("q", "tag", true, false, false, false, nil); err != nil {
				return err
			}
			_, err := ch.Consume(replyQueue, "tag", true, false, false, false, nil)
			return err
		}, 530, "NOT_ALLOWED - attempt to reuse consumer tag 'tag'"},
		{"request without a reply consumer", func(_ *amqp091.Connection, ch *amqp091.Channel) error {
			return closedBy(ch, func() { _ = ch.Publish("", "rpc", false, false, amqp091.Publishing{ReplyTo: replyQueue}) })
		}, 406, "PRECONDITION_FAILED - fast reply consumer does not exist"},
		{"request in a transaction without a reply consumer", func(_ *amqp091.Connection, ch *amqp091.Channel) error {
			if err := ch.Tx(); err != nil {
				return err
			}
			// Refused at publish, before any commit.
			return closedBy(ch, func() { _ = ch.Publish("", "rpc", false, false, amqp091.Publishing{ReplyTo: replyQueue}) })
		}, 406, "PRECONDITION_FAILED - fast reply consumer does not exist"},
		{"request from another channel", func(c *amqp091.Connection, ch *amqp091.Channel) error {
			other, err := c.Channel()
			if err != nil {
				return err
			}
			if _, err := other.Consume(replyQueue, "", true, false, false, false, nil); err != nil {
				return err
			}
			return closedBy(ch, func() { _ = ch.Publish("", "rpc", false, false, amqp091.Publishing{ReplyTo: replyQueue}) })
		}, 406, "PRECONDITION_FAILED - fast reply consumer does not exist"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, ch := openChannel(t, ts)
			err := tc.run(c, ch)
			var e *amqp091.Error
			if err == nil || !asAMQPError(err, &e) || e.Code != tc.code || e.Reason != tc.text {
				t.Fatalf("got %v, want %d %q", err, tc.code, tc.text)
			}
		})
	}
	assertServing(t, ts)
	if n := len(commandsOf(ts.broker, publishOf)); n != 0 {
		t.Fatalf("%d refused requests reached the log", n)
	}
}

// closedBy runs send and returns the error the server closed ch with.
func closedBy(ch *amqp091.Channel, send func()) error {
	closed := ch.NotifyClose(make(chan *amqp091.Error, 1))
	send()
	select {
	case e := <-closed:
		if e == nil {
			return errors.New("closed without an error")
		}
		return e
	case <-time.After(5 * time.Second):
		return errors.New("not closed")
	}
}

func asAMQPError(err error, e **amqp091.Error) bool {
	v, ok := err.(*amqp091.Error)
	*e = v
	return ok
}

func TestReplyTo_Declare(t *testing.T) {
	ts := startServer(t, Config{})
	p := newReplyPair(t, ts, ts)
	name := p.request(t, ts, "rpc")
	declares := len(commandsOf(ts.broker, func(c *proto.Command) *proto.QueueDeclare { return c.GetQueueDeclare() }))
	c, _ := openChannel(t, ts)
	declare := func(queue string, passive bool) (amqp091.Queue, error) {
		t.Helper()
		ch, err := c.Channel()
		if err != nil {
			t.Fatal(err)
		}
		if passive {
			return ch.QueueDeclarePassive(queue, false, false, false, false, nil)
		}
		return ch.QueueDeclare(queue, true, false, true, false, nil)
	}
	for _, q := range []string{replyQueue, name, replyQueue + "\r\n"} {
		for _, passive := range []bool{true, false} {
			got, err := declare(q, passive)
			want := strings.TrimRight(q, "\r\n")
			if err != nil || got.Name != want || got.Messages != 0 || got.Consumers != 1 {
				t.Fatalf("declare %q passive=%v: %+v, %v", q, passive, got, err)
			}
		}
	}
	forged := name[:len(replyPrefix)] + strings.Repeat("A", replyKeyLen) + name[len(replyPrefix)+replyKeyLen:]
	for _, q := range []string{forged, replyPrefix + "garbage", replyQueue + "X"} {
		_, err := declare(q, true)
		var e *amqp091.Error
		if !asAMQPError(err, &e) || e.Code != 404 || e.Reason != "NOT_FOUND - no queue '"+q+"' in vhost '/'" {
			t.Fatalf("declare %q: %v", q, err)
		}
	}
	if err := p.reqCh.Cancel(p.tag, false); err != nil {
		t.Fatal(err)
	}
	if _, err := declare(name, true); err == nil {
		t.Fatal("the name of a cancelled reply consumer still exists")
	}
	if n := len(commandsOf(ts.broker, func(c *proto.Command) *proto.QueueDeclare { return c.GetQueueDeclare() })); n != declares {
		t.Fatalf("reply-to declares reached the log")
	}
}

// TestReplyTo_Dropped checks that replies to names that lead nowhere (a
// forged key, garbage, a cancelled consumer, a closed channel) are
// dropped, confirmed, and leave the server serving. Each is followed by a
// good reply through the same responder channel: a dropped one would have
// arrived first.
func TestReplyTo_Dropped(t *testing.T) {
	ts := startServer(t, Config{})
	p := newReplyPair(t, ts, ts)
	name := p.request(t, ts, "rpc")
	if err := p.respCh.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confirms := p.respCh.NotifyPublish(make(chan amqp091.Confirmation, 16))
	seq := uint64(0)
	reply := func(to, body string) {
		t.Helper()
		if err := p.respCh.Publish("", to, false, false, amqp091.Publishing{Body: []byte(body)}); err != nil {
			t.Fatal(err)
		}
		seq++
		select {
		case c := <-confirms:
			if !c.Ack || c.DeliveryTag != seq {
				t.Fatalf("confirm %+v, want ack of %d", c, seq)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no confirm for %q", body)
		}
	}
	addr, _ := parseReplyName(name)
	forgedKey := addr
	forgedKey.key = newReplyKey()
	otherChannel := addr
	otherChannel.channel = 2
	for _, bad := range []string{forgedKey.name(), otherChannel.name(), replyPrefix + "garbage", replyPrefix, name + "x"} {
		reply(bad, "forged")
		reply(name, "good")
		if d := nextReply(t, p.replies); string(d.Body) != "good" {
			t.Fatalf("after a reply to %q the requester got %q", bad, d.Body)
		}
	}

	// A cancelled consumer's name is dead, also for the channel's next
	// reply consumer.
	if err := p.reqCh.Cancel(p.tag, false); err != nil {
		t.Fatal(err)
	}
	replies, err := p.reqCh.Consume(replyQueue, "second", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	second := p.request(t, ts, "rpc")
	if second == name {
		t.Fatal("a new reply consumer got the name of the cancelled one")
	}
	reply(name, "to the cancelled consumer")
	reply(second, "good")
	if d := nextReply(t, replies); string(d.Body) != "good" || d.ConsumerTag != "second" {
		t.Fatalf("got %q for %s", d.Body, d.ConsumerTag)
	}

	// A closed channel takes nothing; the responder is still confirmed.
	if err := p.reqCh.Close(); err != nil {
		t.Fatal(err)
	}
	reply(second, "to a closed channel")
	if ts.srv.DirectReply(&proto.DirectReply{Name: second, Probe: true}) {
		t.Fatal("a closed channel's reply consumer is still there")
	}

	// Nor does a closed connection.
	c, ch := openChannel(t, ts)
	if _, err := ch.Consume(replyQueue, "", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	p.reqCh = ch
	third := p.request(t, ts, "rpc")
	if !ts.srv.DirectReply(&proto.DirectReply{Name: third, Probe: true}) {
		t.Fatal("no reply consumer for a live channel")
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the connection's reply consumer gone", func() bool {
		return !ts.srv.DirectReply(&proto.DirectReply{Name: third, Probe: true})
	})
	reply(third, "to a closed connection")
	assertServing(t, ts)
}

func TestReplyTo_Transaction(t *testing.T) {
	ts := startServer(t, Config{})
	p := newReplyPair(t, ts, ts)
	name := p.request(t, ts, "rpc")
	if err := p.respCh.Tx(); err != nil {
		t.Fatal(err)
	}
	publish := func(body string) {
		t.Helper()
		if err := p.respCh.Publish("", name, false, false, amqp091.Publishing{Body: []byte(body)}); err != nil {
			t.Fatal(err)
		}
	}
	publish("rolled back")
	if err := p.respCh.TxRollback(); err != nil {
		t.Fatal(err)
	}
	publish("committed")
	if err := p.respCh.TxCommit(); err != nil {
		t.Fatal(err)
	}
	if d := nextReply(t, p.replies); string(d.Body) != "committed" {
		t.Fatalf("got %q", d.Body)
	}
}

// twoNodes are two servers of different node ids whose brokers carry
// replies to each other, as the cluster does.
type replyNode struct {
	*fakeBroker
	id    string
	peers map[string]*Server
}

func (b *replyNode) NodeID() string { return b.id }

func (b *replyNode) Reply(ctx context.Context, node string, r *proto.DirectReply) (bool, error) {
	peer, ok := b.peers[node]
	if !ok {
		return false, context.DeadlineExceeded
	}
	// What the internal service carries is a copy.
	return peer.DirectReply(cloneReply(r)), nil
}

func cloneReply(r *proto.DirectReply) *proto.DirectReply {
	return &proto.DirectReply{Name: r.GetName(), Properties: r.GetProperties(), Body: bytes.Clone(r.GetBody()), Probe: r.GetProbe()}
}

func startNodes(t *testing.T, cfg Config) (a, b *testServer) {
	t.Helper()
	a, b = startServer(t, cfg), startServer(t, cfg)
	peers := map[string]*Server{"node-a": a.srv, "node-b": b.srv}
	a.srv.SetBroker(&replyNode{fakeBroker: a.broker, id: "node-a", peers: peers})
	b.srv.SetBroker(&replyNode{fakeBroker: b.broker, id: "node-b", peers: peers})
	return a, b
}

func TestReplyTo_OtherNode(t *testing.T) {
	const max = 64 << 10
	a, b := startNodes(t, Config{MaxMessageSize: max})
	p := newReplyPair(t, a, b)
	name := p.request(t, a, "rpc")
	if addr, _ := parseReplyName(name); addr.node != "node-a" {
		t.Fatalf("reply_to %q", name)
	}
	// The responder on node-b checks that the requester is there.
	if q, err := p.respCh.QueueDeclarePassive(name, false, false, false, false, nil); err != nil || q.Consumers != 1 {
		t.Fatalf("passive declare on the other node: %+v, %v", q, err)
	}
	big := bytes.Repeat([]byte("x"), max)
	if err := p.respCh.Publish("", name, false, false, amqp091.Publishing{Body: big}); err != nil {
		t.Fatal(err)
	}
	if d := nextReply(t, p.replies); !bytes.Equal(d.Body, big) || d.RoutingKey != name {
		t.Fatalf("reply of %d bytes for %s", len(d.Body), d.RoutingKey)
	}
	// One byte more is refused as any publish is.
	closed := p.respCh.NotifyClose(make(chan *amqp091.Error, 1))
	_ = p.respCh.Publish("", name, false, false, amqp091.Publishing{Body: append(big, 'x')})
	mustClosedWith(t, closed, 406)

	// A node that does not know the name's node drops the reply.
	_, respCh := openChannel(t, b)
	addr, _ := parseReplyName(name)
	addr.node = "node-c"
	if err := respCh.Publish("", addr.name(), false, false, amqp091.Publishing{Body: []byte("lost")}); err != nil {
		t.Fatal(err)
	}
	if err := respCh.Publish("", name, false, false, amqp091.Publishing{Body: []byte("good")}); err != nil {
		t.Fatal(err)
	}
	if d := nextReply(t, p.replies); string(d.Body) != "good" {
		t.Fatalf("got %q", d.Body)
	}
	if n := len(commandsOf(b.broker, publishOf)); n != 0 {
		t.Fatalf("%d replies went to the log", n)
	}
	assertServing(t, a)
	assertServing(t, b)
}
