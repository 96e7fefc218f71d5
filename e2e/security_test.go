package e2e

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/raftmq/raftmq/internal/testpki"
)

// startTLSNode starts one node that also serves AMQPS with a certificate
// from pki; it returns the node, its AMQPS address and the files the node
// reads its certificate from.
func startTLSNode(t *testing.T, pki *testpki.CA, extra ...string) (*Cluster, string, testpki.Files) {
	t.Helper()
	var amqps string
	var files testpki.Files
	c := StartClusterWith(t, 1, func(_ int, n *Node) {
		amqps = FreeAddr(t)
		files, _ = writeServerFiles(t, pki, t.TempDir())
		n.ExtraArgs = append(amqpsArgs(files, amqps), extra...)
	})
	return c, amqps, files
}

// dialTLS dials the AMQPS address until the node serves it.
func dialTLS(t *testing.T, url string, cfg *tls.Config, external bool) *amqp.Connection {
	t.Helper()
	var conn *amqp.Connection
	err := Eventually(20*time.Second, func() error {
		var err error
		if external {
			conn, err = amqp.DialTLS_ExternalAuth(url, cfg)
		} else {
			conn, err = amqp.DialTLS(url, cfg)
		}
		return err
	})
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// roundTrip publishes body to a fresh exclusive queue on conn and waits
// for it to come back.
func roundTrip(t *testing.T, conn *amqp.Connection, body string) {
	t.Helper()
	ch := channel(t, conn)
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	deliveries, err := ch.Consume(q.Name, "", true, true, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	publishConfirmed(t, ch, "", q.Name, []amqp.Publishing{{Body: []byte(body)}})
	if got := receive(t, deliveries, 1, 10*time.Second); string(got[0].Body) != body {
		t.Fatalf("got %q, want %q", got[0].Body, body)
	}
	_ = ch.Close()
}

func TestSecurity_AMQPSPublishConsumeAndPlainRefused(t *testing.T) {
	skipShort(t)
	pki := testpki.New(t, "raftmq e2e CA")
	c, amqps, _ := startTLSNode(t, pki)
	conn := dialTLS(t, "amqps://guest:guest@"+amqps+"/", clientTLS(pki), false)
	if !conn.ConnectionState().HandshakeComplete || conn.ConnectionState().Version < tls.VersionTLS12 {
		t.Fatalf("TLS state %+v", conn.ConnectionState())
	}
	roundTrip(t, conn, "over TLS")

	// Plain AMQP on the AMQPS port: the TLS handshake fails, no AMQP
	// connection is made, and the node keeps serving both ports.
	if pc, err := amqp.DialConfig("amqp://guest:guest@"+amqps+"/", amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)}); err == nil {
		_ = pc.Close()
		t.Fatal("plain AMQP connected on the AMQPS port")
	}
	roundTrip(t, dialTLS(t, "amqps://guest:guest@"+amqps+"/", clientTLS(pki), false), "TLS after a plain client")
	roundTrip(t, dial(t, c.Nodes[0]), "plain port still plain")
	// TLS below 1.2 is refused.
	old := clientTLS(pki)
	old.MinVersion, old.MaxVersion = tls.VersionTLS10, tls.VersionTLS11
	if tc, err := tls.Dial("tcp", amqps, old); err == nil {
		tc.Close()
		t.Fatal("a TLS 1.1 client was accepted")
	}
}

func TestSecurity_ExternalAuthWithAClientCertificate(t *testing.T) {
	skipShort(t)
	pki := testpki.New(t, "raftmq e2e CA")
	c, amqps, _ := startTLSNode(t, pki)
	ctl(t, c.Nodes[0], "add_user", "carol", "an-unused-password")
	ctl(t, c.Nodes[0], "set_permissions", "carol", ".*", ".*", ".*")
	url := "amqps://" + amqps + "/"

	conn := dialTLS(t, url, clientTLS(pki, pki.Issue(t, testpki.Client, "carol")), true)
	roundTrip(t, conn, "as carol")
	out := ctl(t, c.Nodes[0], "list_connections", "user")
	if !slices.Contains(strings.Fields(out), "carol") {
		t.Fatalf("list_connections user:\n%s", out)
	}

	// A certificate for a user that does not exist: 403 like a bad password.
	_, err := amqp.DialTLS_ExternalAuth(url, clientTLS(pki, pki.Issue(t, testpki.Client, "nobody")))
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Code != amqp.AccessRefused {
		t.Fatalf("EXTERNAL as an unknown user: %v, want 403 ACCESS_REFUSED", err)
	}
	// Without a client certificate EXTERNAL is not offered at all.
	if _, err := amqp.DialTLS_ExternalAuth(url, clientTLS(pki)); !errors.Is(err, amqp.ErrSASL) {
		t.Fatalf("EXTERNAL without a certificate: %v, want no common mechanism", err)
	}
	// A certificate from another CA fails the TLS handshake.
	stranger := testpki.New(t, "raftmq e2e CA")
	if _, err := amqp.DialTLS_ExternalAuth(url, clientTLS(pki, stranger.Issue(t, testpki.Client, "carol"))); err == nil {
		t.Fatal("a certificate from an unknown CA was accepted")
	}
	// PLAIN still works on the same port.
	roundTrip(t, dialTLS(t, "amqps://carol:an-unused-password@"+amqps+"/", clientTLS(pki), false), "PLAIN over TLS")
}

// serverSerial is the serial of the certificate the AMQPS port presents
// to a new handshake.
func serverSerial(pki *testpki.CA, addr string) (string, error) {
	tc, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, clientTLS(pki))
	if err != nil {
		return "", err
	}
	defer tc.Close()
	return tc.ConnectionState().PeerCertificates[0].SerialNumber.String(), nil
}

func TestSecurity_CertificateReloadOnSIGHUP(t *testing.T) {
	skipShort(t)
	pki := testpki.New(t, "raftmq e2e CA")
	var amqps string
	var files testpki.Files
	var first tls.Certificate
	dir := t.TempDir()
	c := StartClusterWith(t, 1, func(_ int, n *Node) {
		amqps = FreeAddr(t)
		files, first = writeServerFiles(t, pki, dir)
		n.ExtraArgs = amqpsArgs(files, amqps)
	})
	before := dialTLS(t, "amqps://guest:guest@"+amqps+"/", clientTLS(pki), false)
	if got, err := serverSerial(pki, amqps); err != nil || got != first.Leaf.SerialNumber.String() {
		t.Fatalf("serial %s (%v), want the first certificate's %s", got, err, first.Leaf.SerialNumber)
	}

	_, second := writeServerFiles(t, pki, dir)
	c.Nodes[0].hup(t)
	want := second.Leaf.SerialNumber.String()
	if err := Eventually(20*time.Second, func() error {
		got, err := serverSerial(pki, amqps)
		if err != nil {
			return err
		}
		if got != want {
			return fmt.Errorf("serial %s, want the reloaded certificate's %s", got, want)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !c.Nodes[0].Running() {
		t.Fatal("SIGHUP stopped the node")
	}
	// The connection made before the reload is still served, and new ones
	// work with the new certificate.
	roundTrip(t, before, "made before the reload")
	roundTrip(t, dialTLS(t, "amqps://guest:guest@"+amqps+"/", clientTLS(pki), false), "made after the reload")
}

// latency measures n publish-to-consume round trips of one message on ch
// (a channel consuming q with auto-ack) and returns their median.
func latency(t *testing.T, ch *amqp.Channel, q string, deliveries <-chan amqp.Delivery, n int) time.Duration {
	t.Helper()
	samples := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		body := fmt.Sprintf("probe-%d", i)
		start := time.Now()
		if err := ch.PublishWithContext(context.Background(), "", q, false, false, amqp.Publishing{Body: []byte(body)}); err != nil {
			t.Fatal(err)
		}
		select {
		case d := <-deliveries:
			if string(d.Body) != body {
				t.Fatalf("got %q, want %q", d.Body, body)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("probe %d not delivered within 10s", i)
		}
		samples = append(samples, time.Since(start))
	}
	slices.Sort(samples)
	return samples[len(samples)/2]
}

// steadyLatency is the lowest median of several short windows of probes.
// The machine is shared (other test packages, containers): a burst of
// outside work inflates a window or two, while a slow node inflates them
// all, so the least median measures the node and not its neighbours.
func steadyLatency(t *testing.T, ch *amqp.Channel, q string, deliveries <-chan amqp.Delivery) time.Duration {
	t.Helper()
	const windows, samples = 5, 41
	best := time.Duration(1<<63 - 1)
	for range windows {
		best = min(best, latency(t, ch, q, deliveries, samples))
	}
	return best
}

var errNeverDropped = errors.New("the node never dropped the client that does not read")

func TestSecurity_ThousandConnectionsAndADeafClientDoNotSlowOthers(t *testing.T) {
	skipShort(t)
	c := StartClusterWith(t, 1, func(_ int, n *Node) {
		// A small bound so the deaf client overflows it quickly.
		n.ExtraArgs = []string{"--max-connection-buffer", "1048576"}
	})
	node := c.Nodes[0]
	probeConn := dial(t, node)
	probe := channel(t, probeConn)
	q, err := probe.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	deliveries, err := probe.Consume(q.Name, "", true, true, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	latency(t, probe, q.Name, deliveries, 10) // warm up
	unloaded := steadyLatency(t, probe, q.Name, deliveries)
	t.Logf("unloaded median publish-to-consume latency: %v", unloaded)

	// 1,000 connections opened at once, kept open.
	const conns = 1000
	var (
		mu     sync.Mutex
		opened []*amqp.Connection
		wg     sync.WaitGroup
		errs   = make(chan error, conns)
	)
	t.Cleanup(func() {
		for _, cn := range opened {
			_ = cn.Close()
		}
	})
	for i := 0; i < conns; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cn, err := amqp.DialConfig(node.AMQPURL(), amqp.Config{Heartbeat: 60 * time.Second, Dial: amqp.DefaultDial(30 * time.Second)})
			if err != nil {
				errs <- err
				return
			}
			mu.Lock()
			opened = append(opened, cn)
			mu.Unlock()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("opening %d connections at once: %v", conns, err)
	}

	withConns := steadyLatency(t, probe, q.Name, deliveries)
	t.Logf("median with %d connections open: %v", conns, withConns)

	// A client that publishes to a queue it consumes with no-ack and never
	// reads a byte: its deliveries back up into the node.
	deaf := dialDeaf(t, node.AMQPAddr)
	const deafQueue = "deaf-self"
	if _, err := deaf.Write(deafClientPreamble(deafQueue)); err != nil {
		t.Fatal(err)
	}
	// It publishes 64 KiB every 40 ms (a steady load, not a flood of the
	// log) for at most 60 s, and counts what the node accepted.
	var written atomic.Int64
	deafDone := make(chan error, 1)
	go func() {
		msg := deafPublish(deafQueue, make([]byte, 64<<10))
		tick := time.NewTicker(40 * time.Millisecond)
		defer tick.Stop()
		deadline := time.Now().Add(60 * time.Second)
		for i := 0; i < 3000 && time.Now().Before(deadline); i++ {
			_ = deaf.SetWriteDeadline(time.Now().Add(20 * time.Second))
			n, err := deaf.Write(msg)
			written.Add(int64(n))
			if err != nil {
				deafDone <- err
				return
			}
			<-tick.C
		}
		deafDone <- errNeverDropped
	}()
	// Once more has been sent to it than the socket buffers hold, its
	// deliveries wait in the node: measure from then on, while it still
	// publishes.
	if err := Eventually(30*time.Second, func() error {
		if n := written.Load(); n < 2<<20 {
			return fmt.Errorf("the deaf client wrote %d bytes", n)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	loaded := steadyLatency(t, probe, q.Name, deliveries)
	t.Logf("loaded median publish-to-consume latency (%d connections and a deaf client): %v", conns, loaded)

	// The node dropped the deaf client (its buffer bound), rather than
	// holding its deliveries without limit.
	select {
	case err := <-deafDone:
		t.Logf("the deaf client was dropped after writing %d bytes: %v", written.Load(), err)
		var ne net.Error
		if err == nil || (errors.As(err, &ne) && ne.Timeout()) || errors.Is(err, errNeverDropped) {
			t.Fatalf("deaf client: %v, want the node to close its connection", err)
		}
	case <-time.After(90 * time.Second):
		t.Fatal("the deaf client is still writing")
	}
	if loaded > 2*unloaded {
		t.Fatalf("loaded median %v is more than twice the unloaded %v", loaded, unloaded)
	}
	// Every one of the 1,000 connections is still served.
	mu.Lock()
	defer mu.Unlock()
	for i, cn := range []*amqp.Connection{opened[0], opened[len(opened)/2], opened[len(opened)-1]} {
		if cn.IsClosed() {
			t.Fatalf("connection %d was closed", i)
		}
	}
}

func TestSecurity_LimitsFromFlags(t *testing.T) {
	skipShort(t)
	c := StartClusterWith(t, 1, func(_ int, n *Node) {
		n.ExtraArgs = []string{"--max-connections", "3", "--channel-max", "4", "--frame-max", "8192",
			"--max-queues-per-vhost", "2", "--max-message-size", "1000"}
	})
	node := c.Nodes[0]
	first := dial(t, node)
	if first.Config.ChannelMax != 4 || first.Config.FrameSize != 8192 {
		t.Fatalf("negotiated channel_max %d, frame_max %d; want 4 and 8192", first.Config.ChannelMax, first.Config.FrameSize)
	}
	dial(t, node)
	third := dial(t, node)
	_, err := amqp.Dial(node.AMQPURL())
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Code != amqp.NotAllowed {
		t.Fatalf("fourth connection: %v, want 530 NOT_ALLOWED", err)
	}
	if err := third.Close(); err != nil {
		t.Fatal(err)
	}
	// The slot frees once the node has closed the connection.
	fourth := dial(t, node)

	ch := channel(t, fourth)
	mustDeclare(t, ch, "lim-1", nil)
	mustDeclare(t, ch, "lim-2", nil)
	mustDeclare(t, ch, "lim-1", nil) // a redeclare is not a new queue
	_, err = ch.QueueDeclare("lim-3", true, false, false, false, nil)
	if !errors.As(err, &ae) || ae.Code != amqp.PreconditionFailed {
		t.Fatalf("third queue: %v, want 406 PRECONDITION_FAILED", err)
	}

	ch = channel(t, fourth)
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	if err := ch.PublishWithContext(context.Background(), "", "lim-1", false, false, amqp.Publishing{Body: make([]byte, 1001)}); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-closed:
		if e == nil || e.Code != amqp.PreconditionFailed {
			t.Fatalf("message over --max-message-size closed the channel with %v, want 406", e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("message over --max-message-size was not refused")
	}
	if fourth.IsClosed() {
		t.Fatal("the connection closed; only the channel should")
	}
}

func TestSecurity_MemoryAlarmBlocksPublishers(t *testing.T) {
	skipShort(t)
	// A one-byte high-water mark: the alarm is raised at the first check.
	c := StartClusterWith(t, 1, func(_ int, n *Node) {
		n.ExtraArgs = []string{"--vm-memory-high-watermark", "1"}
	})
	// A client that announced the connection.blocked capability is told
	// right after connection.open-ok.
	nc := dialDeaf(t, c.Nodes[0].AMQPAddr)
	if _, err := nc.Write(blockedCapableOpen()); err != nil {
		t.Fatal(err)
	}
	_ = nc.SetReadDeadline(time.Now().Add(20 * time.Second))
	var got [][2]uint16
	for {
		class, id, err := readMethod(nc)
		if err != nil {
			t.Fatalf("after methods %v: %v", got, err)
		}
		got = append(got, [2]uint16{class, id})
		if class == 10 && id == 60 { // connection.blocked
			break
		}
		if len(got) > 4 {
			t.Fatalf("methods %v, want connection.blocked after open-ok", got)
		}
	}
	if !slices.Equal(got, [][2]uint16{{10, 10}, {10, 30}, {10, 41}, {10, 60}}) {
		t.Fatalf("methods %v, want start, tune, open-ok, blocked", got)
	}
	// A connection that does not publish keeps working.
	mustDeclare(t, channel(t, dial(t, c.Nodes[0])), "still-declarable", nil)
}
