package amqp

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/raftmq/raftmq/amqp/wire"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// fakeBroker records commands and answers them with scripted results.
type fakeBroker struct {
	mu      sync.Mutex
	cmds    []*proto.Command
	batches [][]*proto.Command
	// answer returns the result of one command; nil means success.
	answer func(cmd *proto.Command) *proto.Result
	// onSubmit runs after a command was recorded, before Submit returns
	// (the node applies the entry, and effects reach the Sink, then).
	onSubmit func(cmd *proto.Command)
	users    map[string]string
	vhosts   map[string]bool
	// onPermission, when set, runs after a permission was read (as at
	// connection.open), outside the fake's lock.
	onPermission func(user, vhost string)
	// perms holds configure, write and read patterns by user; a user not
	// in it may do everything.
	perms map[string][3]string
	// denied lists {user, vhost} pairs without any permission.
	denied map[[2]string]bool
	// queues holds the {vhost, name} of queues QueueCount reports.
	queues map[[2]string]bool
	// fail, when set, may fail a submission before it is recorded (the
	// outcome a node reports, e.g. after a leader change).
	fail func(cmds []*proto.Command) error
	// unacked answers Unacked; nil reports every tag settled.
	unacked func(ref *proto.ChannelRef, tags []uint64) []uint64
	// unackedIn, when set, answers Unacked with the group instead.
	unackedIn func(group uint32, ref *proto.ChannelRef, tags []uint64) []uint64
	// farUnacked, when set, answers FarUnacked for groups other than 0.
	farUnacked func(group uint32, ref *proto.ChannelRef, tags []uint64) ([]uint64, bool, error)
	// gets answers Gets; nil reports the metadata group, holding none.
	gets func(vhost, queue string, ref *proto.ChannelRef) (uint32, []uint64, error)
	// sent records every command with the group it was submitted to and
	// how: "submit" (Submit, SubmitBatch) or "group" (SubmitGroup).
	sent []sentCmd
	// refused is what Refusing answers.
	refused string
}

func (b *fakeBroker) Refusing() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.refused
}

// sentCmd is a command a fakeBroker was given.
type sentCmd struct {
	group uint32
	via   string
	cmd   *proto.Command
}

func newFakeBroker() *fakeBroker {
	return &fakeBroker{
		users:  map[string]string{"guest": "guest", "alice": "secret"},
		vhosts: map[string]bool{"/": true, "other": true},
	}
}

func (b *fakeBroker) NodeID() string { return "node-a" }

func (b *fakeBroker) result(cmd *proto.Command) *proto.Result {
	return b.resultIn(0, "submit", cmd)
}

func (b *fakeBroker) resultIn(group uint32, via string, cmd *proto.Command) *proto.Result {
	b.mu.Lock()
	b.cmds = append(b.cmds, cmd)
	b.sent = append(b.sent, sentCmd{group: group, via: via, cmd: cmd})
	answer, hook := b.answer, b.onSubmit
	b.mu.Unlock()
	if hook != nil {
		hook(cmd)
	}
	if answer != nil {
		if r := answer(cmd); r != nil {
			return r
		}
	}
	return &proto.Result{}
}

func (b *fakeBroker) failure(cmds []*proto.Command) error {
	b.mu.Lock()
	fail := b.fail
	b.mu.Unlock()
	if fail != nil {
		return fail(cmds)
	}
	return nil
}

func (b *fakeBroker) Submit(ctx context.Context, cmd *proto.Command) (*proto.Result, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := b.failure([]*proto.Command{cmd}); err != nil {
		return nil, err
	}
	return b.result(cmd), nil
}

func (b *fakeBroker) SubmitBatch(ctx context.Context, cmds []*proto.Command) ([]*proto.Result, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := b.failure(cmds); err != nil {
		return nil, err
	}
	b.mu.Lock()
	b.batches = append(b.batches, cmds)
	b.mu.Unlock()
	out := make([]*proto.Result, len(cmds))
	for i, c := range cmds {
		out[i] = b.result(c)
	}
	return out, nil
}

// SubmitGroup records cmds as submitted to group's log; group 0 is
// SubmitBatch's, recorded as that.
func (b *fakeBroker) SubmitGroup(ctx context.Context, group uint32, cmds []*proto.Command) ([]*proto.Result, error) {
	if group == 0 {
		return b.SubmitBatch(ctx, cmds)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := b.failure(cmds); err != nil {
		return nil, err
	}
	out := make([]*proto.Result, len(cmds))
	for i, c := range cmds {
		out[i] = b.resultIn(group, "group", c)
	}
	return out, nil
}

func (b *fakeBroker) Authenticate(user, password string) ([]string, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p, ok := b.users[user]
	return nil, ok && p == password
}

// Permission grants every user everything in an existing vhost unless
// perms names the user, as raftmq's default user has.
func (b *fakeBroker) Permission(user, vhost string) (configure, write, read string, ok bool) {
	configure, write, read, ok = b.permission(user, vhost)
	b.mu.Lock()
	hook := b.onPermission
	b.mu.Unlock()
	if hook != nil {
		hook(user, vhost)
	}
	return configure, write, read, ok
}

func (b *fakeBroker) permission(user, vhost string) (configure, write, read string, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.vhosts[vhost] || b.denied[[2]string{user, vhost}] {
		return "", "", "", false
	}
	if p, found := b.perms[user]; found {
		return p[0], p[1], p[2], true
	}
	return ".*", ".*", ".*", true
}

func (b *fakeBroker) UserExists(name string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.users[name]
	return ok
}

// QueueCount counts the queues named in queues (tests fill it).
func (b *fakeBroker) QueueCount(vhost, name string) (int, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, exists := 0, false
	for q := range b.queues {
		if q[0] == vhost {
			n++
			exists = exists || q[1] == name
		}
	}
	return n, exists
}

func (b *fakeBroker) Unacked(group uint32, ref *proto.ChannelRef, tags []uint64) []uint64 {
	b.mu.Lock()
	f, in := b.unacked, b.unackedIn
	b.mu.Unlock()
	if in != nil {
		return in(group, ref, tags)
	}
	if f == nil {
		return nil
	}
	return f(ref, tags)
}

// FarUnacked reads group from farUnacked, set by a test; without it, the
// fake runs every group.
func (b *fakeBroker) FarUnacked(_ context.Context, group uint32, ref *proto.ChannelRef, tags []uint64) ([]uint64, bool, error) {
	b.mu.Lock()
	f := b.farUnacked
	b.mu.Unlock()
	if f == nil || group == 0 {
		return nil, true, nil
	}
	return f(group, ref, tags)
}

func (b *fakeBroker) Gets(_ context.Context, vhost, queue string, ref *proto.ChannelRef) (uint32, []uint64, error) {
	b.mu.Lock()
	f := b.gets
	b.mu.Unlock()
	if f == nil {
		return 0, nil, nil
	}
	return f(vhost, queue, ref)
}

// ConsumerLoad reports no consumer: the fake applies no log.
func (b *fakeBroker) ConsumerLoad(*proto.ConsumerRef) (fsm.ConsumerLoad, bool) {
	return fsm.ConsumerLoad{}, false
}

func (b *fakeBroker) VhostExists(name string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.vhosts[name]
}

// commands returns the recorded commands of one kind.
func commandsOf[T any](b *fakeBroker, get func(*proto.Command) T) []T {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []T
	var zero T
	for _, c := range b.cmds {
		if v := get(c); any(v) != any(zero) {
			out = append(out, v)
		}
	}
	return out
}

// eventually polls cond until it holds or the timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

type testServer struct {
	srv    *Server
	broker *fakeBroker
	addr   string
	url    string
}

func startServer(t testing.TB, cfg Config) *testServer {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.CloseTimeout == 0 {
		cfg.CloseTimeout = time.Second
	}
	b := newFakeBroker()
	srv := NewServer(cfg)
	srv.SetBroker(b)
	addr := serveLoopback(t, srv)
	return &testServer{srv: srv, broker: b, addr: addr, url: "amqp://guest:guest@" + addr + "/"}
}

// serveLoopback serves srv on a loopback port until the test ends and
// returns the address.
func serveLoopback(t testing.TB, srv *Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = srv.Close()
		if err := <-served; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve returned %v", err)
		}
	})
	return ln.Addr().String()
}

// rawClient speaks AMQP frame by frame.
type rawClient struct {
	t  *testing.T
	nc net.Conn
	r  *bufio.Reader
}

func dialRaw(t *testing.T, addr string) *rawClient {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	return &rawClient{t: t, nc: nc, r: bufio.NewReader(nc)}
}

func (c *rawClient) write(p []byte) {
	c.t.Helper()
	if _, err := c.nc.Write(p); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

func (c *rawClient) send(channel uint16, m wire.Method) {
	c.t.Helper()
	c.write(wire.AppendMethodFrame(nil, channel, m))
}

// next reads the next non-heartbeat frame.
func (c *rawClient) next() (wire.Frame, error) {
	_ = c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		f, err := wire.ReadFrame(c.r, 1<<20)
		if err != nil || f.Type != wire.FrameHeartbeat {
			return f, err
		}
	}
}

func (c *rawClient) method() wire.Method {
	c.t.Helper()
	f, err := c.next()
	if err != nil {
		c.t.Fatalf("read: %v", err)
	}
	if f.Type != wire.FrameMethod {
		c.t.Fatalf("got %v, want a method frame", f)
	}
	m, err := wire.DecodeMethod(f.Payload)
	if err != nil {
		c.t.Fatalf("decode: %v", err)
	}
	return m
}

// handshake opens the connection with the given heartbeat (seconds) and
// frame-max.
func (c *rawClient) handshake(heartbeat uint16, frameMax uint32) {
	c.t.Helper()
	c.write(wire.ProtocolHeader)
	if _, ok := c.method().(*wire.ConnectionStart); !ok {
		c.t.Fatal("no connection.start")
	}
	c.send(0, &wire.ConnectionStartOk{Mechanism: "PLAIN", Response: "\x00guest\x00guest", Locale: "en_US"})
	tune, ok := c.method().(*wire.ConnectionTune)
	if !ok {
		c.t.Fatal("no connection.tune")
	}
	c.send(0, &wire.ConnectionTuneOk{ChannelMax: tune.ChannelMax, FrameMax: frameMax, Heartbeat: heartbeat})
	c.send(0, &wire.ConnectionOpen{VirtualHost: "/"})
	if _, ok := c.method().(*wire.ConnectionOpenOk); !ok {
		c.t.Fatal("no connection.open-ok")
	}
}

// expectClosed reads until the server closes the socket.
func (c *rawClient) expectClosed() {
	c.t.Helper()
	_ = c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.Copy(io.Discard, c.r); err != nil {
		c.t.Fatalf("socket not closed by the server: %v", err)
	}
}

// expectConnectionClose reads connection.close with code, answers
// close-ok and waits for the socket to close.
func (c *rawClient) expectConnectionClose(code uint16) *wire.ConnectionClose {
	c.t.Helper()
	m := c.method()
	cl, ok := m.(*wire.ConnectionClose)
	if !ok || cl.ReplyCode != code {
		c.t.Fatalf("got %#v, want connection.close %d", m, code)
	}
	c.send(0, &wire.ConnectionCloseOk{})
	c.expectClosed()
	return cl
}

// consumeLogTags starts a consumer of queue on ch, has the log assign it
// deliveries with the given log tags, and returns what the client got.
func consumeLogTags(t *testing.T, ts *testServer, ch *amqp091.Channel, queue string, logTags ...uint64) []amqp091.Delivery {
	t.Helper()
	ds, err := ch.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	cons := commandsOf(ts.broker, (*proto.Command).GetConsume)
	ref := cons[len(cons)-1].Consumer
	for _, tag := range logTags {
		ts.srv.Deliver(&fsm.Delivery{Consumer: ref, DeliveryTag: tag, RoutingKey: queue, Body: []byte("x")})
	}
	var got []amqp091.Delivery
	for len(got) < len(logTags) {
		select {
		case d := <-ds:
			got = append(got, d)
		case <-time.After(5 * time.Second):
			t.Fatalf("%d of %d deliveries", len(got), len(logTags))
		}
	}
	return got
}
