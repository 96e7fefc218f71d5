package linksec

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftmq/raftmq/internal/procstat"
)

// countedConn counts the writes to a socket.
type countedConn struct {
	net.Conn
	writes atomic.Int64
}

func (c *countedConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// secretEnds are the TLS of two nodes of one cluster secret, n1 to serve
// on ln and n2 to dial it.
func secretEnds(t testing.TB) (srv, cli *TLS, ln net.Listener) {
	t.Helper()
	srv, err := SecretTLS(testSecret, "n1")
	if err != nil {
		t.Fatal(err)
	}
	cli, err = SecretTLS(testSecret, "n2")
	if err != nil {
		t.Fatal(err)
	}
	ln, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	return srv, cli, ln
}

// recordPair dials a recordConn to a TLS server of the cluster secret on
// loopback, handshaken; serve runs on the server's side of it.
func recordPair(t testing.TB, serve func(s *tls.Conn)) (*recordConn, *countedConn) {
	t.Helper()
	srv, cli, ln := secretEnds(t)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		s := tls.Server(c, srv.ServerConfig())
		if s.Handshake() != nil {
			_ = s.Close()
			return
		}
		serve(s)
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	counted := &countedConn{Conn: raw}
	c, tc := recordClient(counted, cli.clientConfig(nil))
	t.Cleanup(func() { _ = c.Close() })
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	return c, counted
}

func TestRecordConn_AWritesRecordsGoToTheSocketTogether(t *testing.T) {
	got := make(chan []byte, 1)
	const size = 1 << 20
	c, counted := recordPair(t, func(s *tls.Conn) {
		b := make([]byte, size+10)
		_, err := io.ReadFull(s, b)
		if err != nil {
			b = nil
		}
		got <- b
	})
	want := make([]byte, size)
	_, _ = rand.Read(want)
	before := counted.writes.Load()
	if n, err := c.Write(want); n != size || err != nil {
		t.Fatalf("Write: %d, %v", n, err)
	}
	// 64 records of 16 KiB: a plain TLS connection writes each alone.
	if w, most := counted.writes.Load()-before, int64(size/recordFlushAt+1); w > most {
		t.Fatalf("1 MiB went to the socket in %d writes, want at most %d", w, most)
	}
	// Nothing waits after a Write returns: a small one follows at once.
	if _, err := c.Write([]byte("0123456789")); err != nil {
		t.Fatal(err)
	}
	b := <-got
	if b == nil || !bytes.Equal(b[:size], want) || string(b[size:]) != "0123456789" {
		t.Fatal("the server read other bytes than were written")
	}
}

// Writes from several goroutines at once: each arrives whole, and none is
// left waiting in the socket's buffer.
func TestRecordConn_WritesFromManyGoroutines(t *testing.T) {
	const writers, each, size = 8, 50, 10 << 10
	got := make(chan []byte, 1)
	c, _ := recordPair(t, func(s *tls.Conn) {
		b := make([]byte, writers*each*size)
		if _, err := io.ReadFull(s, b); err != nil {
			b = nil
		}
		got <- b
	})
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			chunk := bytes.Repeat([]byte{byte(w + 1)}, size)
			for range each {
				if _, err := c.Write(chunk); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b := <-got
	if b == nil {
		t.Fatal("the server did not read every write")
	}
	for off := 0; off < len(b); off += size {
		if w := b[off]; w == 0 || len(bytes.Trim(b[off:off+size], string([]byte{w}))) != 0 {
			t.Fatalf("the write at %d arrived mixed with another", off)
		}
	}
}

// stallConn is a socket whose writes, once stalled, block until it is
// closed, as a write to a peer that reads nothing does once the buffers
// are full; a deadline does not end them.
type stallConn struct {
	net.Conn
	stalled atomic.Bool
	blocked chan struct{} // closed by the first write that blocks
	once    sync.Once
	closed  chan struct{}
	close   sync.Once
}

func (c *stallConn) Write(p []byte) (int, error) {
	if !c.stalled.Load() {
		return c.Conn.Write(p)
	}
	c.once.Do(func() { close(c.blocked) })
	<-c.closed
	return 0, net.ErrClosed
}

func (c *stallConn) Close() error {
	c.close.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

func TestRecordConn_CloseEndsAWriteThePeerDoesNotRead(t *testing.T) {
	c, counted := recordPair(t, func(s *tls.Conn) { _, _ = io.Copy(io.Discard, s) })
	stall := &stallConn{Conn: counted.Conn, blocked: make(chan struct{}), closed: make(chan struct{})}
	counted.Conn = stall
	stall.stalled.Store(true)
	// A write below the flush size: its records are written once the
	// TLS connection's Write has returned, and that write blocks.
	done := make(chan error, 1)
	go func() {
		_, err := c.Write(make([]byte, 64<<10))
		done <- err
	}()
	<-stall.blocked
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	// crypto/tls's Close sends a close alert first, which would queue
	// behind the blocked write for ever.
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close waited on the blocked write")
	}
	if err := <-done; err == nil {
		t.Fatal("a write the peer never read returned no error")
	}
}

// BenchmarkTLSWrite writes 256 KiB at a time (raft's buffer) through TLS
// on loopback to a reader of 256 KiB at a time; cpu-us/op is the
// process's CPU, both ends and the kernel's included, per 256 KiB.
func BenchmarkTLSWrite(b *testing.B) {
	for _, name := range []string{"plain", "records-together"} {
		b.Run(name, func(b *testing.B) {
			c, _ := recordPair(b, func(s *tls.Conn) {
				buf := make([]byte, 256<<10)
				for {
					if _, err := s.Read(buf); err != nil {
						return
					}
				}
			})
			var w io.Writer = c
			if name == "plain" {
				w = c.Conn
			}
			chunk := make([]byte, 256<<10)
			b.SetBytes(int64(len(chunk)))
			before := procstat.CPU()
			b.ResetTimer()
			for range b.N {
				if _, err := w.Write(chunk); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64((procstat.CPU()-before).Microseconds())/float64(b.N), "cpu-us/op")
		})
	}
}

// The internal service's credentials, both ends: what each writes goes to
// its socket in a few writes, and arrives whole.
func TestRecordCredentials_BothEndsWriteRecordsTogether(t *testing.T) {
	srv, cli, ln := secretEnds(t)
	const size = 1 << 20
	type end struct {
		conn    net.Conn
		counted *countedConn
	}
	served := make(chan end, 1)
	go func() {
		raw, err := ln.Accept()
		if err != nil {
			served <- end{}
			return
		}
		counted := &countedConn{Conn: raw}
		conn, _, err := srv.GRPCCredentials().ServerHandshake(counted)
		if err != nil {
			_ = raw.Close()
			served <- end{}
			return
		}
		served <- end{conn, counted}
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	counted := &countedConn{Conn: raw}
	checker := NewChecker(cli, View{Self: "n2"}, nil)
	conn, _, err := checker.InternalCredentials("n1").ClientHandshake(context.Background(), "n1", counted)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	s := <-served
	if s.conn == nil {
		t.Fatal("the server's handshake failed")
	}
	defer s.conn.Close()
	for _, dir := range []struct {
		name     string
		from, to net.Conn
		counted  *countedConn
	}{{"client to server", conn, s.conn, counted}, {"server to client", s.conn, conn, s.counted}} {
		want := make([]byte, size)
		_, _ = rand.Read(want)
		got := make(chan []byte, 1)
		go func() {
			b := make([]byte, size)
			if _, err := io.ReadFull(dir.to, b); err != nil {
				b = nil
			}
			got <- b
		}()
		before := dir.counted.writes.Load()
		if n, err := dir.from.Write(want); n != size || err != nil {
			t.Fatalf("%s: Write: %d, %v", dir.name, n, err)
		}
		if w, most := dir.counted.writes.Load()-before, int64(size/recordFlushAt+1); w > most {
			t.Fatalf("%s: 1 MiB went to the socket in %d writes, want at most %d", dir.name, w, most)
		}
		if b := <-got; !bytes.Equal(b, want) {
			t.Fatalf("%s: other bytes arrived than were written", dir.name)
		}
	}
}
