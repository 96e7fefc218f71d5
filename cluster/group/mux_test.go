package group

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/raftmq/raftmq/internal/testpki"
)

// tcpLayer is a plain TCP raft.StreamLayer, standing for the node's
// authenticated one.
type tcpLayer struct{ net.Listener }

func (l tcpLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return net.DialTimeout("tcp", string(addr), timeout)
}

func listenTCP(t testing.TB, addr string) tcpLayer {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return tcpLayer{ln}
}

func newTestMux(t testing.TB, timeout time.Duration) *Mux {
	t.Helper()
	return newMuxOn(t, listenTCP(t, "127.0.0.1:0"), timeout)
}

// newMuxOn is a mux on base, closed when the test ends.
func newMuxOn(t testing.TB, base raft.StreamLayer, timeout time.Duration) *Mux {
	t.Helper()
	m := NewMux(base, MuxConfig{HeaderTimeout: timeout, Logger: discardLogger()})
	t.Cleanup(func() { _ = m.Close() })
	return m
}

func layer(t testing.TB, m *Mux, id string) raft.StreamLayer {
	t.Helper()
	l, err := m.Layer(id)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// acceptOne accepts one connection on l, failing after wait.
func acceptOne(t *testing.T, l raft.StreamLayer, wait time.Duration) net.Conn {
	t.Helper()
	got := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err == nil {
			got <- c
		}
	}()
	select {
	case c := <-got:
		return c
	case <-time.After(wait):
		t.Fatal("no connection reached the layer")
		return nil
	}
}

// send dials addr through dialer (a group's layer) and writes b.
func send(t *testing.T, dialer raft.StreamLayer, addr net.Addr, b string) net.Conn {
	t.Helper()
	c, err := dialer.Dial(raft.ServerAddress(addr.String()), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte(b)); err != nil {
		t.Fatal(err)
	}
	return c
}

// awaitRead accepts connections on l until one reads want (skipping
// those that read skip), failing on anything else.
func awaitRead(t *testing.T, l raft.StreamLayer, want, skip string) {
	t.Helper()
	for {
		in := acceptOne(t, l, 10*time.Second)
		got := make([]byte, len(want))
		_, err := io.ReadFull(in, got)
		_ = in.Close()
		if err == nil && string(got) == want {
			return
		}
		if skip == "" || !strings.HasPrefix(skip, string(got[:1])) {
			t.Fatalf("the group's layer read %q, %v; want %q", got, err, want)
		}
	}
}

// awaitClosed fails unless the peer closes c (reads end) within wait,
// having sent nothing.
func awaitClosed(t *testing.T, c net.Conn, wait time.Duration) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(wait))
	n, err := c.Read(make([]byte, 16))
	if n != 0 || err == nil || errors.Is(err, net.ErrClosed) {
		t.Fatalf("read %d bytes, %v: want the mux to close the connection", n, err)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the mux did not close the connection within %s", wait)
	}
}

// Each group's dial reaches the same group's layer on the peer, through
// one listener, with the bytes raft writes intact; the default group's
// bytes arrive with no header.
func TestMux_RoutesEachConnectionToItsGroup(t *testing.T) {
	server, client := newTestMux(t, 5*time.Second), newTestMux(t, 5*time.Second)
	layers := map[string]raft.StreamLayer{}
	for _, id := range []string{DefaultID, "q1", "q2"} {
		layers[id] = layer(t, server, id)
	}
	for id, l := range layers {
		dialer := layer(t, client, id)
		for range 2 {
			out, err := dialer.Dial(raft.ServerAddress(server.base.Addr().String()), time.Second)
			if err != nil {
				t.Fatal(err)
			}
			msg := []byte("rpc of " + id + "|")
			if _, err := out.Write(msg); err != nil {
				t.Fatal(err)
			}
			in := acceptOne(t, l, 10*time.Second)
			_ = in.SetReadDeadline(time.Now().Add(10 * time.Second))
			got := make([]byte, len(msg))
			if _, err := io.ReadFull(in, got); err != nil || !bytes.Equal(got, msg) {
				t.Fatalf("group %q read %q, %v; want %q", id, got, err, msg)
			}
			_ = out.Close()
			_ = in.Close()
		}
	}
}

// What a stale or hostile peer sends instead of a header is refused:
// the connection is closed, no group's layer sees it, and the mux still
// routes the next good connection.
func TestMux_RefusesBadHeaders(t *testing.T) {
	// The header timeout is long: each refusal must come from what the
	// peer sent, not from its silence.
	m, noDefault := newTestMux(t, time.Hour), newTestMux(t, time.Hour)
	layers := map[string]raft.StreamLayer{DefaultID: layer(t, m, DefaultID), "q1": layer(t, m, "q1")}
	layer(t, noDefault, "q1")
	long := strings.Repeat("a", MaxIDLen+1)
	cases := []struct {
		name string
		m    *Mux
		b    []byte
	}{
		{"unknown group", m, append([]byte{muxMagic, muxVersion, 4}, "nope"...)},
		// Announces 255 bytes and sends none: refused on the length.
		{"oversized id", m, []byte{muxMagic, muxVersion, 255}},
		{"id one byte too long", m, append([]byte{muxMagic, muxVersion, byte(len(long))}, long...)},
		{"empty id", m, []byte{muxMagic, muxVersion, 0}},
		{"newer header version", m, append([]byte{muxMagic, muxVersion + 1, 2}, "q1"...)},
		{"id not a name", m, append([]byte{muxMagic, muxVersion, 5}, "../q1"...)},
		{"capitals", m, append([]byte{muxMagic, muxVersion, 2}, "Q1"...)},
		{"cut short", m, []byte{muxMagic, muxVersion, 2, 'q'}},
		// With no default group on the node, a connection without a
		// header (a release before the mux, or garbage) has nowhere to go.
		{"no header, no default group", noDefault, []byte("GET / HTTP/1.1\r\n\r\n")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", tc.m.base.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := c.Write(tc.b); err != nil {
				t.Fatal(err)
			}
			if tc.name == "cut short" {
				_ = c.(*net.TCPConn).CloseWrite()
			}
			awaitClosed(t, c, 10*time.Second)
		})
	}
	// No refused connection reached a group: the first each takes is a
	// good one.
	client := newTestMux(t, time.Hour)
	for id, l := range layers {
		defer send(t, layer(t, client, id), m.base.Addr(), "x").Close()
		awaitRead(t, l, "x", "")
	}
}

// A connection that names a group this node opens a moment later waits
// for the group's layer and is handed to it: a node named in a queue
// group opens it only as its metadata log applies the entry, and the
// group's leader may send to it first. One whose group does not come
// within OpenWait is refused.
func TestMux_AConnectionWaitsForItsGroupToOpen(t *testing.T) {
	m := NewMux(listenTCP(t, "127.0.0.1:0"), MuxConfig{HeaderTimeout: time.Hour, OpenWait: time.Hour, Logger: discardLogger()})
	t.Cleanup(func() { _ = m.Close() })
	client := newTestMux(t, time.Hour)
	defer send(t, layer(t, client, "q1"), m.base.Addr(), "x").Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		m.mu.Lock()
		waiting := m.awaiting
		m.mu.Unlock()
		if waiting == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the connection is not waiting for its group's layer")
		}
		time.Sleep(5 * time.Millisecond)
	}
	awaitRead(t, layer(t, m, "q1"), "x", "")

	short := NewMux(listenTCP(t, "127.0.0.1:0"), MuxConfig{HeaderTimeout: time.Hour, OpenWait: 100 * time.Millisecond, Logger: discardLogger()})
	t.Cleanup(func() { _ = short.Close() })
	c := send(t, layer(t, client, "q2"), short.base.Addr(), "x")
	defer c.Close()
	awaitClosed(t, c, 10*time.Second)
}

// A peer that connects and sends nothing is closed once the header
// timeout passes, and while it waits it holds up no one else.
func TestMux_SilentPeerIsClosedAndBlocksNoOne(t *testing.T) {
	t.Run("closed after the timeout", func(t *testing.T) {
		m := newTestMux(t, 200*time.Millisecond)
		layer(t, m, DefaultID)
		c, err := net.Dial("tcp", m.base.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		awaitClosed(t, c, 10*time.Second)
	})
	t.Run("others get through meanwhile", func(t *testing.T) {
		m := newTestMux(t, time.Hour)
		q1 := layer(t, m, "q1")
		for range 16 {
			c, err := net.Dial("tcp", m.base.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
		}
		defer send(t, q1, m.base.Addr(), "x").Close()
		awaitRead(t, q1, "x", "")
		m.mu.Lock()
		silent := len(m.pending)
		m.mu.Unlock()
		if silent != 16 {
			t.Fatalf("%d silent connections pending, want 16", silent)
		}
		// Close ends them rather than waiting an hour.
		done := make(chan struct{})
		go func() { _ = m.Close(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("the mux's Close waited on silent connections")
		}
	})
}

// A group's layer that closes while connections for it arrive refuses
// them (none is left open or held), takes no more, and its id can be
// taken again, as a restarted group does.
func TestMux_GroupClosedWhileConnectionsArrive(t *testing.T) {
	// The header timeout is long: the layer's close must end what waits
	// for it, not the timeout.
	m := newTestMux(t, time.Hour)
	q1 := layer(t, m, "q1")
	client := newTestMux(t, time.Hour)
	dialer := layer(t, client, "q1")
	// One connection the group took and holds: its close ends it too.
	held := send(t, dialer, m.base.Addr(), "a")
	defer held.Close()
	in := acceptOne(t, q1, 10*time.Second)
	defer in.Close() // reachable to the end: the collector must not close it
	if _, err := io.ReadFull(in, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	// Then nobody accepts on q1 (as before its raft starts): the next
	// connections wait for the layer, which then closes.
	conns := []net.Conn{held}
	for range 8 {
		conns = append(conns, send(t, dialer, m.base.Addr(), "x"))
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() { // and more keep arriving while it closes
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			c, err := dialer.Dial(raft.ServerAddress(m.base.Addr().String()), time.Second)
			if err != nil {
				continue
			}
			_, _ = c.Write([]byte("x"))
			_ = c.Close()
		}
	}()
	_ = q1.Close()
	if _, err := q1.Accept(); err == nil {
		t.Fatal("a closed layer accepted a connection")
	}
	for _, c := range conns {
		awaitClosed(t, c, 10*time.Second)
		_ = c.Close()
	}
	close(stop)
	wg.Wait()
	// Connections of the burst may still be naming their group: the new
	// layer may take them before the new one.
	again := layer(t, m, "q1")
	defer send(t, dialer, m.base.Addr(), "y").Close()
	awaitRead(t, again, "y", "x")
}

// Layer takes only ids that are names, and each once.
func TestMux_LayerIDs(t *testing.T) {
	m := newTestMux(t, time.Second)
	layer(t, m, DefaultID)
	layer(t, m, "q1")
	for _, id := range []string{DefaultID, "q1", "a/b", "..", strings.Repeat("a", MaxIDLen+1)} {
		if _, err := m.Layer(id); err == nil {
			t.Errorf("Layer(%q) accepted", id)
		}
	}
	_ = m.Close()
	if _, err := m.Layer("q2"); err == nil {
		t.Error("a closed mux gave a layer")
	}
}

// rpcServer answers every RPC that reaches trans with a fixed response,
// and the snapshot's bytes for InstallSnapshot.
func rpcServer(t *testing.T, trans raft.Transport, done <-chan struct{}) <-chan string {
	seen := make(chan string, 16)
	go func() {
		for {
			select {
			case rpc := <-trans.Consumer():
				var resp any
				switch req := rpc.Command.(type) {
				case *raft.AppendEntriesRequest:
					resp = &raft.AppendEntriesResponse{Term: req.Term, Success: true, LastLog: 7}
				case *raft.RequestVoteRequest:
					resp = &raft.RequestVoteResponse{Term: req.Term, Granted: true}
				case *raft.RequestPreVoteRequest:
					resp = &raft.RequestPreVoteResponse{Term: req.Term, Granted: true}
				case *raft.TimeoutNowRequest:
					resp = &raft.TimeoutNowResponse{}
				case *raft.InstallSnapshotRequest:
					b, _ := io.ReadAll(rpc.Reader)
					seen <- "snapshot:" + string(b)
					resp = &raft.InstallSnapshotResponse{Term: req.Term, Success: true}
				}
				seen <- fmt.Sprintf("%T", rpc.Command)
				rpc.Respond(resp, nil)
			case <-done:
				return
			}
		}
	}()
	return seen
}

// callAll sends each kind of raft RPC from trans to target and checks
// the answers rpcServer gives.
func callAll(t *testing.T, trans raft.Transport, target raft.ServerAddress, seen <-chan string) {
	t.Helper()
	want := func(kind string) {
		t.Helper()
		select {
		case got := <-seen:
			if got != kind {
				t.Fatalf("the peer saw %s, want %s", got, kind)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("the peer never saw %s", kind)
		}
	}
	var ae raft.AppendEntriesResponse
	if err := trans.AppendEntries("peer", target, &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax},
		Term: 3, Entries: []*raft.Log{{Index: 7, Term: 3, Data: []byte("entry")}}}, &ae); err != nil || !ae.Success || ae.LastLog != 7 {
		t.Fatalf("AppendEntries: %+v, %v", ae, err)
	}
	want("*raft.AppendEntriesRequest")
	var rv raft.RequestVoteResponse
	if err := trans.RequestVote("peer", target, &raft.RequestVoteRequest{Term: 4}, &rv); err != nil || !rv.Granted {
		t.Fatalf("RequestVote: %+v, %v", rv, err)
	}
	want("*raft.RequestVoteRequest")
	var pv raft.RequestPreVoteResponse
	if err := trans.(raft.WithPreVote).RequestPreVote("peer", target, &raft.RequestPreVoteRequest{Term: 5}, &pv); err != nil || !pv.Granted {
		t.Fatalf("RequestPreVote: %+v, %v", pv, err)
	}
	want("*raft.RequestPreVoteRequest")
	var tn raft.TimeoutNowResponse
	if err := trans.TimeoutNow("peer", target, &raft.TimeoutNowRequest{}, &tn); err != nil {
		t.Fatalf("TimeoutNow: %v", err)
	}
	want("*raft.TimeoutNowRequest")
	var is raft.InstallSnapshotResponse
	snap := "the snapshot's bytes"
	if err := trans.InstallSnapshot("peer", target, &raft.InstallSnapshotRequest{Term: 6, Size: int64(len(snap))}, &is, strings.NewReader(snap)); err != nil || !is.Success {
		t.Fatalf("InstallSnapshot: %+v, %v", is, err)
	}
	want("snapshot:" + snap)
	want("*raft.InstallSnapshotRequest")
}

// The default group on the mux and a node of the landed release (raft's
// network transport on its own listener, no mux) exchange every kind of
// raft RPC both ways: a rolling upgrade keeps the default group talking.
func TestMux_DefaultGroupTalksToTheLandedRelease(t *testing.T) {
	done := make(chan struct{})
	defer close(done)
	landed, err := raft.NewTCPTransportWithLogger("127.0.0.1:0", nil, 3, 10*time.Second, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer landed.Close()
	m := newTestMux(t, 5*time.Second)
	muxed := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{Stream: layer(t, m, DefaultID), MaxPool: 3,
		Timeout: 10 * time.Second, Logger: hclog.NewNullLogger()})
	defer muxed.Close()
	// Another group on the same mux must not take the default group's RPCs.
	other := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{Stream: layer(t, m, "q1"), MaxPool: 3,
		Timeout: 10 * time.Second, Logger: hclog.NewNullLogger()})
	defer other.Close()
	otherSeen := rpcServer(t, other, done)

	t.Run("landed to muxed", func(t *testing.T) {
		callAll(t, landed, muxed.LocalAddr(), rpcServer(t, muxed, done))
	})
	t.Run("muxed to landed", func(t *testing.T) {
		callAll(t, muxed, landed.LocalAddr(), rpcServer(t, landed, done))
	})
	select {
	case got := <-otherSeen:
		t.Fatalf("group q1 received the default group's %s", got)
	default:
	}
}

// The first byte of every RPC raft's network transport sends is its rpc
// type, which the default group's connections start with: none may be
// the mux's magic, or an RPC of a landed-release peer would be read as a
// header. A raft upgrade that adds an rpc type is checked here.
func TestMux_RaftRPCsNeverStartWithTheMagic(t *testing.T) {
	ln := listenTCP(t, "127.0.0.1:0")
	defer ln.Close()
	first := make(chan byte, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				b := make([]byte, 1)
				if _, err := io.ReadFull(c, b); err == nil {
					first <- b[0]
				}
			}()
		}
	}()
	own := listenTCP(t, "127.0.0.1:0")
	trans := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{Stream: own, MaxPool: 0,
		Timeout: 200 * time.Millisecond, Logger: hclog.NewNullLogger()})
	defer trans.Close()
	target := raft.ServerAddress(ln.Addr().String())
	// Each call fails (the listener answers nothing); what matters is its
	// first byte.
	_ = trans.AppendEntries("p", target, &raft.AppendEntriesRequest{}, &raft.AppendEntriesResponse{})
	_ = trans.RequestVote("p", target, &raft.RequestVoteRequest{}, &raft.RequestVoteResponse{})
	_ = trans.RequestPreVote("p", target, &raft.RequestPreVoteRequest{}, &raft.RequestPreVoteResponse{})
	_ = trans.TimeoutNow("p", target, &raft.TimeoutNowRequest{}, &raft.TimeoutNowResponse{})
	_ = trans.InstallSnapshot("p", target, &raft.InstallSnapshotRequest{Size: 1}, &raft.InstallSnapshotResponse{}, strings.NewReader("s"))
	for range 5 {
		select {
		case b := <-first:
			if b == muxMagic {
				t.Fatalf("a raft RPC starts with %#x, the mux's magic", b)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("an RPC never reached the listener")
		}
	}
}

// The header's first byte tells a named group's connection from the
// default group's, and the byte read to tell it is read again.
func TestMux_HeaderConnAndPrefixConn(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	hc := &headerConn{Conn: a, header: append([]byte{muxMagic, muxVersion, 2}, "q7"...)}
	go func() {
		_, _ = hc.Write([]byte("AB"))
		_, _ = hc.Write([]byte("C"))
	}()
	id, first, err := readHeader(b)
	if err != nil || id != "q7" || first != nil {
		t.Fatalf("header read as %q %q %v", id, first, err)
	}
	rest := make([]byte, 3)
	if _, err := io.ReadFull(b, rest); err != nil || string(rest) != "ABC" {
		t.Fatalf("after the header: %q %v", rest, err)
	}
	go func() { _, _ = a.Write([]byte{0, 'x'}) }()
	id, first, err = readHeader(b)
	if err != nil || id != DefaultID || !bytes.Equal(first, []byte{0}) {
		t.Fatalf("headerless read as %q %q %v", id, first, err)
	}
	pc := &prefixConn{Conn: b, prefix: first}
	got := make([]byte, 2)
	if _, err := io.ReadFull(pc, got); err != nil || !bytes.Equal(got, []byte{0, 'x'}) {
		t.Fatalf("the default group's connection read %q %v", got, err)
	}
}

// tlsLayer is a stream layer of mutual TLS as the node's is: accepted
// connections handshake on their first read (in the mux's goroutine, not
// in Accept), dials handshake at once.
type tlsLayer struct {
	net.Listener
	server, client *tls.Config
}

func (l tlsLayer) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return tls.Server(c, l.server), nil
}

func (l tlsLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return tls.DialWithDialer(&net.Dialer{Timeout: timeout}, "tcp", string(addr), l.client)
}

// The mux works above the links' authentication: groups' RPCs pass over
// mutual TLS, the header inside it; a peer without a certificate of the
// cluster's CA is closed in its handshake, under the header's deadline,
// and reaches no group.
func TestMux_OverMutualTLS(t *testing.T) {
	ca := testpki.New(t, "cluster CA")
	newTLSMux := func(name string) *Mux {
		cert := ca.Issue(t, testpki.Server|testpki.Client, name, "127.0.0.1")
		server := &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: ca.Pool(), ClientAuth: tls.RequireAndVerifyClientCert}
		client := &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: ca.Pool()}
		return newMuxOn(t, tlsLayer{Listener: listenTCP(t, "127.0.0.1:0"), server: server, client: client}, 2*time.Second)
	}
	a, b := newTLSMux("a"), newTLSMux("b")
	done := make(chan struct{})
	defer close(done)
	for _, id := range []string{DefaultID, "q1"} {
		from := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{Stream: layer(t, a, id), MaxPool: 3,
			Timeout: 10 * time.Second, Logger: hclog.NewNullLogger()})
		defer from.Close()
		to := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{Stream: layer(t, b, id), MaxPool: 3,
			Timeout: 10 * time.Second, Logger: hclog.NewNullLogger()})
		defer to.Close()
		callAll(t, from, raft.ServerAddress(b.base.Addr().String()), rpcServer(t, to, done))
	}
	// Plain TCP speaking the header without TLS, and TLS without a
	// client certificate, are both closed.
	plain, err := net.Dial("tcp", b.base.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, err := plain.Write(append([]byte{muxMagic, muxVersion, 2}, "q1"...)); err != nil {
		t.Fatal(err)
	}
	awaitClosed(t, plain, 10*time.Second)
	anon, err := tls.Dial("tcp", b.base.Addr().String(), &tls.Config{RootCAs: ca.Pool()})
	if err == nil {
		defer anon.Close()
		_, _ = anon.Write(append([]byte{muxMagic, muxVersion, 2}, "q1"...))
		_ = anon.SetReadDeadline(time.Now().Add(10 * time.Second))
		if n, err := anon.Read(make([]byte, 1)); err == nil || n != 0 {
			t.Fatalf("a peer without a certificate read %d bytes, %v", n, err)
		} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatal("a peer without a certificate was not closed")
		}
	}
}
