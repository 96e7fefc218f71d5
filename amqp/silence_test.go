package amqp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/raftmq/raftmq/amqp/wire"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/broker"
	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
	"github.com/raftmq/raftmq/ttl"
)

// writeHold holds a server's connection writers between taking frames the
// log decided and writing them, once armed, as a pause of the process
// could hold them.
type writeHold struct {
	armed   atomic.Bool
	held    chan struct{} // closed when a writer is held
	release chan struct{} // closed to let it go
}

func newWriteHold() *writeHold {
	return &writeHold{held: make(chan struct{}), release: make(chan struct{})}
}

func (h *writeHold) hold(*conn) {
	if h.armed.CompareAndSwap(true, false) {
		close(h.held)
		<-h.release
	}
}

// silenceCluster is a test cluster of n nodes, each serving AMQP with a
// writeHold installed.
func silenceCluster(t *testing.T, n int) (*clustertest.Cluster, []*Server, []string, []*writeHold) {
	t.Helper()
	return silenceClusterPlacing(t, n, false)
}

// silenceClusterPlacing is silenceCluster, with queues placed into queue
// groups when placing is set (placedCluster).
func silenceClusterPlacing(t *testing.T, n int, placing bool) (*clustertest.Cluster, []*Server, []string, []*writeHold) {
	t.Helper()
	servers := make([]*Server, n)
	holds := make([]*writeHold, n)
	c := clustertest.New(t, n, clustertest.WithConfig(func(i int, cfg *cluster.Config) {
		servers[i] = NewServer(Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), CloseTimeout: time.Second})
		holds[i] = newWriteHold()
		servers[i].holdWrite = holds[i].hold
		// No Pauser: a node cut off would close its clients' connections
		// after NodeDownAfter, which hides a stale write whenever it comes
		// first; a paused process closes nothing before it writes.
		cfg.Effects = servers[i]
		if placing {
			cfg.QueueGroups, cfg.PlaceQueues = 3, true
		}
	}))
	c.WaitForLeader(clustertest.Timeout)
	urls := make([]string, n)
	for i, srv := range servers {
		node := c.Nodes[i].Node()
		<-node.Ready()
		srv.SetBroker(broker.New(node, nil))
		// The first leader creates the default user: wait until it is here.
		clustertest.Eventually(t, clustertest.Timeout, func() error {
			if !broker.New(node, nil).UserExists("guest") {
				return errors.New("no default user yet on " + node.NodeID())
			}
			return nil
		})
		urls[i] = "amqp://guest:guest@" + serveLoopback(t, srv) + "/"
	}
	return c, servers, urls, holds
}

// got is one delivery as a consumer received it.
type got struct {
	consumer    string
	body        string
	redelivered bool
	seq         int // order of receipt across consumers
}

// receiver records the deliveries of several consumers in the order they
// arrive.
type receiver struct {
	mu  sync.Mutex
	all []got
}

// consume starts a consumer; the channel it returns is closed when its
// deliveries end (its channel or connection closed).
func (r *receiver) consume(t *testing.T, name string, ch *amqp091.Channel, queue string) <-chan struct{} {
	t.Helper()
	ds, err := ch.Consume(queue, name, false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for d := range ds {
			r.mu.Lock()
			r.all = append(r.all, got{consumer: name, body: string(d.Body), redelivered: d.Redelivered, seq: len(r.all)})
			r.mu.Unlock()
			_ = d.Ack(false)
		}
	}()
	return done
}

func (r *receiver) has(consumer, body string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, g := range r.all {
		if g.consumer == consumer && g.body == body {
			return true
		}
	}
	return false
}

// unflaggedRepeats names every delivery of a message that came after
// another delivery of it without the redelivered flag.
func (r *receiver) unflaggedRepeats() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	byBody := map[string][]got{}
	for _, g := range r.all {
		byBody[g.body] = append(byBody[g.body], g)
	}
	var bad []string
	for body, gs := range byBody {
		sort.Slice(gs, func(i, j int) bool { return gs[i].seq < gs[j].seq })
		for _, g := range gs[1:] {
			if !g.redelivered {
				bad = append(bad, fmt.Sprintf("%s to %s (%d deliveries: %+v)", body, g.consumer, len(gs), gs))
			}
		}
	}
	return bad
}

// A node held between applying a delivery and writing it to its consumer
// (as a SIGSTOP can hold it, or a stalled process), while the others
// declare it down and give the message, flagged redelivered, to a
// consumer on another node: once released, it must not write what it had
// decided before. Issue #36 found a frozen leader doing so four seconds
// after the cluster handed its dead-lettered messages to another node.
func TestSilence_NodeHeldBeforeWritingADeliveryDropsItOnceTheLogTookItBack(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	c, _, urls, holds := silenceCluster(t, 3)
	leader := c.Index(c.WaitForLeader(clustertest.Timeout).NodeID())
	victim, other := (leader+1)%3, (leader+2)%3

	pconn := dialURL(t, urls[leader])
	pch, err := pconn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pch.QueueDeclare("held", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := pch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	var r receiver
	vdone := r.consumeOneAtATime(t, "victim", urls[victim], "held")

	// The victim's node applies the assignment and its writer takes the
	// delivery; there it stops.
	publishHeld(t, pch, holds[victim], "held", "m1")

	silenceUntilOtherHasIt(t, c, &r, urls[other], c.Nodes[victim].ID, holds[victim], vdone)
}

// silenceUntilOtherHasIt consumes "held" on url as "other", cuts off the
// victim until the cluster declared it down and gave m1, which the
// victim's consumer held, to the other consumer (flagged), then lets the
// victim's writer go on, heals it, and checks that it did not write m1.
func silenceUntilOtherHasIt(t *testing.T, c *clustertest.Cluster, r *receiver, url, victim string, hold *writeHold, vdone <-chan struct{}) {
	t.Helper()
	och, err := dialURL(t, url).Channel()
	if err != nil {
		t.Fatal(err)
	}
	r.consume(t, "other", och, "held")

	// The others stop hearing from the victim, declare it down and give
	// the message to the other consumer, flagged.
	c.Freeze(victim)
	clustertest.Eventually(t, 3*clustertest.Timeout, func() error {
		if !r.has("other", "m1") {
			return errors.New("the other consumer has not got m1 yet")
		}
		return nil
	})

	// The victim resumes: its writer goes on, and its links heal.
	close(hold.release)
	c.Heal()
	// It applies its own NodeDown, which closes its clients' connections;
	// everything it wrote before reached the consumer by then.
	select {
	case <-vdone:
	case <-time.After(3 * clustertest.Timeout):
		t.Fatal("the victim's connection was not closed after its NodeDown")
	}
	if bad := r.unflaggedRepeats(); len(bad) > 0 {
		t.Fatalf("delivered again without the redelivered flag: %v", bad)
	}
	if r.has("victim", "m1") {
		t.Fatal("the victim's consumer got m1 after the cluster gave it to another consumer")
	}
}

// The same for a node that does not run the queue's group (five nodes,
// groups of three): the delivery reaches it from a member's stream, and
// once it caught up it must ask a member whether the group's log still
// holds it, not take it for standing because it cannot read that log
// itself. The fault suite's frozen leader on five nodes wrote a window
// of such dead letters to its client on the thaw, after another node's
// consumer had them flagged.
func TestSilence_NodeOutsideTheGroupHeldBeforeWritingDropsWhatTheGroupTookBack(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	c, _, urls, holds := silenceClusterPlacing(t, 5, true)
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		for _, nd := range c.Live() {
			if len(nd.RunningQueueGroups()) == 0 {
				return fmt.Errorf("%s runs no queue group yet", nd.NodeID())
			}
		}
		return nil
	})
	leader := c.Index(c.WaitForLeader(clustertest.Timeout).NodeID())
	pch, err := dialURL(t, urls[leader]).Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pch.QueueDeclare("held", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	id := c.Nodes[leader].Node().QueueGroup("/", "held")
	victim, other := -1, -1
	for i, nd := range c.Live() {
		switch {
		case i == leader:
		case victim < 0 && !slices.Contains(nd.RunningQueueGroups(), id):
			victim = c.Index(nd.NodeID())
		case other < 0:
			other = c.Index(nd.NodeID())
		}
	}
	if victim < 0 || other < 0 {
		t.Fatalf("no node outside group %q besides the leader", id)
	}
	if err := pch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	var r receiver
	vdone := r.consumeOneAtATime(t, "victim", urls[victim], "held")
	publishHeld(t, pch, holds[victim], "held", "m1")
	silenceUntilOtherHasIt(t, c, &r, urls[other], c.Nodes[victim].ID, holds[victim], vdone)
}

// A node held between applying a delivery and writing it, for a silence
// shorter than it takes the cluster to declare it down: the log still
// holds the delivery for its consumer when the node catches up, but the
// message's TTL ran out meanwhile. It is not handed to the consumer late;
// it goes back unseen and the log dead-letters it as expired. The fault
// suite saw messages with a TTL of 0 reach a client 1.2 s after their
// confirm this way.
func TestSilence_NodeHeldPastAMessagesTTLDeadLettersIt(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	c, _, urls, holds := silenceCluster(t, 3)
	leader := c.Index(c.WaitForLeader(clustertest.Timeout).NodeID())
	victim := (leader + 1) % 3

	pconn := dialURL(t, urls[leader])
	pch, err := pconn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := pch.ExchangeDeclare("ttl.dlx", "fanout", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := pch.QueueDeclare("ttl.dead", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := pch.QueueBind("ttl.dead", "", "ttl.dlx", false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := pch.QueueDeclare("ttl.short", false, false, false, false,
		amqp091.Table{"x-message-ttl": int32(100), "x-dead-letter-exchange": "ttl.dlx"}); err != nil {
		t.Fatal(err)
	}
	if err := pch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	var r receiver
	r.consumeOneAtATime(t, "victim", urls[victim], "ttl.short")
	publishHeld(t, pch, holds[victim], "ttl.short", "m1")

	// The victim finds itself cut off (a new silence epoch), and is
	// healed before the others declare it down.
	node := c.Nodes[victim].Node()
	epoch := node.SilenceEpoch()
	c.Freeze(c.Nodes[victim].ID)
	clustertest.Eventually(t, 3*clustertest.Timeout, func() error {
		if node.SilenceEpoch() == epoch {
			return errors.New("the victim has not found its silence yet")
		}
		return nil
	})
	c.Heal()
	close(holds[victim].release)

	dconn := dialURL(t, urls[leader])
	dch, err := dconn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	dead, err := dch.Consume("ttl.dead", "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-dead:
		deaths, _ := d.Headers["x-death"].([]any)
		if string(d.Body) != "m1" || len(deaths) != 1 || deaths[0].(amqp091.Table)["reason"] != "expired" {
			t.Fatalf("dead-lettered %q with x-death %v, want m1 expired once", d.Body, d.Headers["x-death"])
		}
	case <-time.After(3 * clustertest.Timeout):
		t.Fatal("m1 was not dead-lettered")
	}
	if r.has("victim", "m1") {
		t.Fatal("the victim's consumer got m1 after its TTL ran out during the silence")
	}
}

// silentConn is a connection of a server on b, over a pipe nobody reads:
// the tests take what its writer would write and guard it themselves.
func silentConn(t *testing.T, b *silentBroker) *conn {
	t.Helper()
	srv := NewServer(Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	srv.SetBroker(b)
	a, peer := net.Pipe()
	c := srv.newConn(a)
	t.Cleanup(func() { c.cancel(); a.Close(); peer.Close() })
	return c
}

// consumeOneAtATime starts consumer name of queue, prefetch 1, on a
// connection of its own to url (receiver.consume).
func (r *receiver) consumeOneAtATime(t *testing.T, name, url, queue string) <-chan struct{} {
	t.Helper()
	ch, err := dialURL(t, url).Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Qos(1, 0, false); err != nil {
		t.Fatal(err)
	}
	return r.consume(t, name, ch, queue)
}

// publishHeld arms hold, publishes body to queue on pch (in confirm mode)
// and returns once the publish is confirmed and hold holds a writer: the
// delivery is taken from the queue, not written.
func publishHeld(t *testing.T, pch *amqp091.Channel, hold *writeHold, queue, body string) {
	t.Helper()
	hold.armed.Store(true)
	conf, err := pch.PublishWithDeferredConfirmWithContext(context.Background(), "", queue, false, false, amqp091.Publishing{Body: []byte(body)})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := conf.WaitContext(ctxFor(t, clustertest.Timeout)); !ok || err != nil {
		t.Fatalf("publish not confirmed: %v %v", ok, err)
	}
	select {
	case <-hold.held:
	case <-time.After(clustertest.Timeout):
		t.Fatal("the writer never took the delivery")
	}
}

func dialURL(t *testing.T, url string) *amqp091.Connection {
	t.Helper()
	conn, err := amqp091.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// silentBroker is a fake broker whose node's silences the test sets.
type silentBroker struct {
	*fakeBroker
	epoch atomic.Uint64
}

func (b *silentBroker) SilenceEpoch() uint64 { return b.epoch.Load() }

// The writer's guard on what was decided before a silence: a confirm,
// a no-ack delivery and a delivery the log still holds are written, late
// and in order, once a Tick proposed after the silence is applied; a
// delivery the log took back is dropped; what was decided after the
// silence passes at once. If the connection fails before the node
// catches up, every stale frame is dropped and the rest written.
func TestSilence_WriterHoldsStaleFramesUntilTheLogSaysTheyStand(t *testing.T) {
	b := &silentBroker{fakeBroker: newFakeBroker()}
	ref := &proto.ChannelRef{Node: "node-a", Connection: "c1", Channel: 1}
	b.unacked = func(r *proto.ChannelRef, tags []uint64) []uint64 {
		if r.GetChannel() == ref.GetChannel() && len(tags) == 1 && tags[0] == 1 {
			return tags // tag 1 stands; the log took tag 2 back
		}
		return nil
	}
	c := silentConn(t, b)

	frame := func(s string) func([]byte) []byte { return func(p []byte) []byte { return append(p, s...) } }
	queue := func(epoch uint64) {
		c.out.append(frame("[plain]"))
		c.out.appendMarked(&mark{epoch: epoch, ch: ref, tag: 1}, frame("[d1]"))
		c.out.appendMarked(&mark{epoch: epoch, ch: ref, tag: 2}, frame("[d2]"))
		c.out.appendMarked(&mark{epoch: epoch}, frame("[noack]"))
		c.out.appendMarked(&mark{epoch: epoch}, frame("[confirm]"))
	}
	ticks := func() int {
		return len(commandsOf(b.fakeBroker, func(cmd *proto.Command) *proto.Tick { return cmd.GetTick() }))
	}
	write := func() string {
		buf, marks, _ := c.out.take(nil, nil)
		return string(c.guard(buf, marks))
	}

	queue(0)
	if got := write(); got != "[plain][d1][d2][noack][confirm]" || ticks() != 0 {
		t.Fatalf("with no silence: wrote %q after %d ticks", got, ticks())
	}
	queue(0)
	b.epoch.Store(1)
	if got := write(); got != "[plain][d1][noack][confirm]" || ticks() != 1 {
		t.Fatalf("after a silence: wrote %q after %d ticks, want the delivery the log took back dropped after 1 tick", got, ticks())
	}
	queue(1)
	if got := write(); got != "[plain][d1][d2][noack][confirm]" || ticks() != 1 {
		t.Fatalf("decided after the silence: wrote %q after %d ticks", got, ticks())
	}

	queue(1)
	b.epoch.Store(2)
	b.fail = func([]*proto.Command) error { return errors.New("no leader") }
	c.markFailed()
	if got := write(); got != "[plain]" {
		t.Fatalf("connection failing before the node caught up: wrote %q, want only what the log did not decide", got)
	}
}

// A delivery decided before a silence, which the log still holds for its
// channel but whose message died meanwhile (past its deadline by more
// than overdueGrace), is not written once the node caught up: the channel
// takes it back for an unseen requeue, so the log kills it. A live one,
// one without a deadline and a no-ack one (settled as it was assigned)
// are written as before.
func TestSilence_WriterTakesBackADeliveryThatDiedDuringTheSilence(t *testing.T) {
	b := &silentBroker{fakeBroker: newFakeBroker()}
	b.unacked = func(_ *proto.ChannelRef, tags []uint64) []uint64 { return tags }
	c := silentConn(t, b)
	ch := newChannel(c, 1)
	c.mu.Lock()
	c.channels[1] = ch
	c.mu.Unlock()
	ch.led.startConsume("ctag", 0, 0)
	ch.led.consumed("ctag", true)

	// The ledger numbered them as they came, in time (as offer does); the
	// silence then held them in the writer's queue.
	now := time.Now().UnixMilli()
	consumer := &proto.ConsumerRef{Channel: ch.ref(), Tag: "ctag"}
	ch.mu.Lock()
	for _, d := range []struct {
		tag      uint64
		body     string
		deadline int64
		noAck    bool
	}{
		{1, "<dead>", now - 2000, false},
		{2, "<alive>", now + 60_000, false},
		{3, "<forever>", ttl.NoDeadline, false},
		{4, "<noack>", now - 2000, true},
	} {
		fd := &fsm.Delivery{Consumer: consumer, DeliveryTag: d.tag, Deadline: d.deadline, NoAck: d.noAck, Body: []byte(d.body)}
		ch.writeDelivery(numbered{d: fd, wire: ch.led.record(refOf(fd), "ctag", fd.NoAck)})
	}
	ch.mu.Unlock()
	b.epoch.Store(1)
	buf, marks, _ := c.out.take(nil, nil)
	out := string(c.guard(buf, marks))

	for _, body := range []string{"<alive>", "<forever>", "<noack>"} {
		if !strings.Contains(out, body) {
			t.Errorf("%s was not written", body)
		}
	}
	if strings.Contains(out, "<dead>") {
		t.Fatal("a delivery whose message died during the silence was written")
	}
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if _, ok := ch.led.written[1]; ok {
		t.Fatal("wire tag 1 is still the client's to acknowledge")
	}
	if got := ch.led.takeOverdue(); !slices.Equal(got, g0(1)) {
		t.Fatalf("withheld for an unseen requeue: %v, want log tag 1", got)
	}
}

// A writer that checks frames decided before a silence waits for the log,
// or a member of the frames' group, to answer: a second or two while a
// group elects, and a frozen member has held one longer. Its heartbeats go
// on meanwhile, or a client with short heartbeats closes the connection,
// as the fault suite's clients did after 2.6 s of a writer's silence; the
// frames follow once the member answers.
func TestSilence_WriterBeatsWhileAMemberIsAsked(t *testing.T) {
	b := &silentBroker{fakeBroker: newFakeBroker()}
	release := make(chan struct{})
	b.farUnacked = func(_ uint32, _ *proto.ChannelRef, tags []uint64) ([]uint64, bool, error) {
		<-release
		return tags, false, nil
	}
	srv := NewServer(Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	srv.SetBroker(b)
	a, peer := net.Pipe()
	c := srv.newConn(a)
	c.heartbeat.Store(int64(20 * time.Millisecond))
	writerDone := make(chan struct{})
	go func() { defer close(writerDone); c.writer() }()
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
		c.cancel()
		c.markFailed()
		c.out.close()
		a.Close()
		peer.Close()
		<-writerDone
	})
	b.epoch.Store(1)
	ref := &proto.ChannelRef{Node: "node-a", Connection: "c1", Channel: 1}
	c.out.appendMarked(&mark{ch: ref, group: 2, tag: 7}, func(p []byte) []byte { return append(p, "[g2t7]"...) })

	heartbeat := wire.AppendHeartbeat(nil)
	var got []byte
	// read takes what the writer wrote until cond holds of it.
	read := func(what string, cond func([]byte) bool) {
		t.Helper()
		buf := make([]byte, 256)
		for !cond(got) {
			_ = peer.SetReadDeadline(time.Now().Add(10 * time.Second))
			n, err := peer.Read(buf)
			if err != nil {
				t.Fatalf("waiting for %s, read %q: %v", what, got, err)
			}
			got = append(got, buf[:n]...)
		}
	}
	read("three heartbeats while the member is asked", func(p []byte) bool {
		return bytes.Count(p, heartbeat) >= 3
	})
	if bytes.Contains(got, []byte("[g2t7]")) {
		t.Fatalf("wrote the delivery before its member answered: %q", got)
	}
	close(release)
	read("the delivery its member holds", func(p []byte) bool { return bytes.Contains(p, []byte("[g2t7]")) })
}
