package amqp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/broker"
	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/proto"
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
	vconn := dialURL(t, urls[victim])
	vch, err := vconn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := vch.Qos(1, 0, false); err != nil {
		t.Fatal(err)
	}
	vdone := r.consume(t, "victim", vch, "held")

	// The victim's node applies the assignment and its writer takes the
	// delivery; there it stops.
	holds[victim].armed.Store(true)
	conf, err := pch.PublishWithDeferredConfirmWithContext(context.Background(), "", "held", false, false, amqp091.Publishing{Body: []byte("m1")})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := conf.WaitContext(ctxFor(t, clustertest.Timeout)); !ok || err != nil {
		t.Fatalf("publish not confirmed: %v %v", ok, err)
	}
	select {
	case <-holds[victim].held:
	case <-time.After(clustertest.Timeout):
		t.Fatal("the victim's writer never took the delivery")
	}

	oconn := dialURL(t, urls[other])
	och, err := oconn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	r.consume(t, "other", och, "held")

	// The others stop hearing from the victim, declare it down and give
	// the message to the other consumer, flagged.
	c.Freeze(c.Nodes[victim].ID)
	clustertest.Eventually(t, 3*clustertest.Timeout, func() error {
		if !r.has("other", "m1") {
			return errors.New("the other consumer has not got m1 yet")
		}
		return nil
	})

	// The victim resumes: its writer goes on, and its links heal.
	close(holds[victim].release)
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
	srv := NewServer(Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	srv.SetBroker(b)
	a, peer := net.Pipe()
	defer a.Close()
	defer peer.Close()
	c := srv.newConn(a)
	defer c.cancel()

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
