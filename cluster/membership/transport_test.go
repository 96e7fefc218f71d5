package membership

import (
	"bytes"
	"errors"
	"io"
	"log"
	"net"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

// packetTap is a memberlist transport that copies, for the test, every
// packet its node receives on the way to memberlist.
type packetTap struct {
	memberlist.Transport
	once sync.Once
	out  chan *memberlist.Packet
	got  chan *memberlist.Packet
	done chan struct{} // closed when the test ends: the relay stops
}

func (p *packetTap) PacketCh() <-chan *memberlist.Packet {
	p.once.Do(func() {
		go func() {
			for {
				select {
				case pk := <-p.Transport.PacketCh():
					p.got <- pk
					select {
					case p.out <- pk:
					case <-p.done:
						return
					}
				case <-p.done:
					return
				}
			}
		}()
	})
	return p.out
}

// A packet a node receives costs about its own length, not the 64 KiB of
// the largest datagram; the largest is still read whole, an empty one is
// passed over, and each packet keeps its own bytes when the next arrives
// (memberlist may hold on to parts of one).
func TestGossip_AReceivedPacketCostsItsLength(t *testing.T) {
	tap := &packetTap{out: make(chan *memberlist.Packet), got: make(chan *memberlist.Packet, 1024), done: make(chan struct{})}
	t.Cleanup(func() { close(tap.done) })
	g := startGossip(t, "a", nil, nil, func(tr memberlist.Transport) memberlist.Transport { tap.Transport = tr; return tap })
	to, err := net.ResolveUDPAddr("udp", g.Addr())
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.DialUDP("udp", nil, to)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// 255 is no message type of memberlist's: it logs the packet and
	// drops it.
	packet := func(fill byte, n int) []byte {
		b := bytes.Repeat([]byte{fill}, n)
		b[0] = 255
		return b
	}
	receive := func() *memberlist.Packet {
		t.Helper()
		select {
		case pk := <-tap.got:
			return pk
		case <-time.After(10 * time.Second):
			t.Fatal("no packet received in 10 s")
			return nil
		}
	}

	// An empty datagram carries no message type: it is passed over.
	if _, err := c.Write(nil); err != nil {
		t.Fatal(err)
	}
	first := packet(1, 40)
	if _, err := c.Write(first); err != nil {
		t.Fatal(err)
	}
	p1 := receive()
	if !bytes.Equal(p1.Buf, first) {
		t.Fatalf("the first packet after an empty one arrived as %d bytes", len(p1.Buf))
	}
	const largest = 65507 // an IPv4 datagram's payload at most
	if _, err := c.Write(packet(2, largest)); err != nil {
		t.Fatal(err)
	}
	if p2 := receive(); len(p2.Buf) != largest || p2.Buf[largest-1] != 2 {
		t.Fatalf("the largest packet arrived as %d bytes", len(p2.Buf))
	}
	if !bytes.Equal(p1.Buf, first) {
		t.Fatal("the first packet's bytes changed when the next one was read")
	}

	const count = 256
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := range count {
		if _, err := c.Write(packet(byte(i), 40)); err != nil {
			t.Fatal(err)
		}
		receive()
	}
	runtime.ReadMemStats(&after)
	// The packet's copy, its envelope and memberlist's log line of the
	// unknown type are a few hundred bytes; a 64 KiB read buffer each
	// would be 16 MiB.
	if per := (after.TotalAlloc - before.TotalAlloc) / count; per > 8<<10 {
		t.Fatalf("a 40-byte packet cost %d bytes of allocation", per)
	}
}

// A port whose UDP side is taken is refused, and its TCP side is let go
// again.
func TestTransport_APortTakenForPacketsIsRefusedWhole(t *testing.T) {
	taken, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	port := taken.LocalAddr().(*net.UDPAddr).Port
	if tr, err := newTransport("127.0.0.1", port, log.New(io.Discard, "", 0)); err == nil {
		_ = tr.Shutdown()
		t.Fatalf("port %d, taken for UDP, was listened on", port)
	}
	// A dial, not a listen, tells whether the TCP side is still open:
	// while the packages' tests run side by side, any socket of another
	// test may be given the port as its ephemeral one, which a listen
	// would collide with, but only a listener takes a connection.
	c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), 5*time.Second)
	if err == nil {
		_ = c.Close()
		t.Fatalf("the TCP side of port %d was kept: it took a connection", port)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("a dial to port %d: %v, want the connection refused", port, err)
	}
}
