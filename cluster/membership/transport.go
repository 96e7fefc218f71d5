package membership

import (
	"errors"
	"fmt"
	"log"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-sockaddr"
	"github.com/hashicorp/memberlist"
)

// transport carries memberlist's packets (UDP) and streams (TCP) on one
// address, as memberlist's own NetTransport does, but reads every packet
// into one buffer it keeps and hands memberlist a copy of the packet's
// length. NetTransport reads each packet into a fresh 64 KiB buffer, the
// largest a datagram can be, so a probe's ping or ack of a few dozen
// bytes cost a 64 KiB allocation, zeroed, and the collections that
// garbage brought on: about a twentieth of an idle node's CPU.
type transport struct {
	logger *log.Logger
	tcp    *net.TCPListener
	udp    *net.UDPConn

	packets chan *memberlist.Packet
	streams chan net.Conn

	closing atomic.Bool
	done    chan struct{} // closed by Shutdown: nobody may read the channels
	wg      sync.WaitGroup
}

// maxPacket is the largest datagram there is: what a packet is read
// into, so that none is cut short.
const maxPacket = 64 << 10

// packetBuffer is the socket receive buffer asked for first, halved
// until the kernel takes it: room for the bursts a join or a push-pull
// brings while the reader is descheduled.
const packetBuffer = 2 << 20

// newTransport listens on host:port for streams and packets; port 0 takes
// a free port, the same for both.
func newTransport(host string, port int, logger *log.Logger) (*transport, error) {
	ip := net.ParseIP(host)
	if ip == nil {
		a, err := net.ResolveIPAddr("ip", host)
		if err != nil {
			return nil, fmt.Errorf("gossip bind address: %w", err)
		}
		ip = a.IP
	}
	tcp, udp, err := listen(ip, port)
	// A free TCP port may be a taken UDP one: with port 0, other ports
	// are tried, as memberlist's own transport does.
	for try := 1; err != nil && port == 0 && try < 10; try++ {
		tcp, udp, err = listen(ip, port)
	}
	if err != nil {
		return nil, err
	}
	for size := packetBuffer; size > 0; size /= 2 {
		if udp.SetReadBuffer(size) == nil {
			break
		}
	}
	t := &transport{
		logger:  logger,
		tcp:     tcp,
		udp:     udp,
		packets: make(chan *memberlist.Packet),
		streams: make(chan net.Conn),
		done:    make(chan struct{}),
	}
	t.wg.Add(2)
	go t.acceptStreams()
	go t.readPackets()
	return t, nil
}

// listen opens the TCP listener on ip:port and the UDP socket on the
// same port (the TCP one's, when port is 0).
func listen(ip net.IP, port int) (*net.TCPListener, *net.UDPConn, error) {
	tcp, err := net.ListenTCP("tcp", &net.TCPAddr{IP: ip, Port: port})
	if err != nil {
		return nil, nil, err
	}
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: ip, Port: tcp.Addr().(*net.TCPAddr).Port})
	if err != nil {
		_ = tcp.Close()
		return nil, nil, err
	}
	return tcp, udp, nil
}

// Port is the port the transport listens on.
func (t *transport) Port() int { return t.tcp.Addr().(*net.TCPAddr).Port }

// FinalAdvertiseAddr is the address given, or else the one listened on;
// bound to every interface, a private address of this host.
func (t *transport) FinalAdvertiseAddr(ip string, port int) (net.IP, int, error) {
	if ip != "" {
		a := net.ParseIP(ip)
		if a == nil {
			return nil, 0, fmt.Errorf("gossip advertise address %q is not an IP address", ip)
		}
		if a4 := a.To4(); a4 != nil {
			a = a4
		}
		return a, port, nil
	}
	a := t.tcp.Addr().(*net.TCPAddr).IP
	if a.IsUnspecified() {
		private, err := sockaddr.GetPrivateIP()
		if err != nil {
			return nil, 0, fmt.Errorf("gossip advertise address: %w", err)
		}
		if a = net.ParseIP(private); a == nil {
			return nil, 0, errors.New("gossip advertise address: this host has no private IP address; give one")
		}
	}
	return a, t.Port(), nil
}

// WriteTo sends b as one packet to addr (host:port).
func (t *transport) WriteTo(b []byte, addr string) (time.Time, error) {
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return time.Time{}, err
	}
	_, err = t.udp.WriteTo(b, ua)
	return time.Now(), err
}

// PacketCh carries the packets received.
func (t *transport) PacketCh() <-chan *memberlist.Packet { return t.packets }

// DialTimeout opens a stream to addr.
func (t *transport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout}
	return d.Dial("tcp", addr)
}

// StreamCh carries the streams accepted.
func (t *transport) StreamCh() <-chan net.Conn { return t.streams }

// Shutdown stops listening and waits for the readers to end. memberlist
// calls it before it stops reading the channels; a start that failed
// calls it with nobody reading them.
func (t *transport) Shutdown() error {
	if t.closing.Swap(true) {
		return nil
	}
	close(t.done)
	_ = t.tcp.Close()
	_ = t.udp.Close()
	t.wg.Wait()
	return nil
}

func (t *transport) acceptStreams() {
	defer t.wg.Done()
	const maxPause = time.Second
	var pause time.Duration
	for {
		c, err := t.tcp.AcceptTCP()
		if err != nil {
			if t.closing.Load() {
				return
			}
			// Out of descriptors, say: wait, longer each time, rather
			// than spin.
			pause = min(max(2*pause, 5*time.Millisecond), maxPause)
			t.logger.Printf("[ERR] memberlist: accepting a stream: %v", err)
			time.Sleep(pause)
			continue
		}
		pause = 0
		select {
		case t.streams <- c:
		case <-t.done:
			_ = c.Close()
			return
		}
	}
}

func (t *transport) readPackets() {
	defer t.wg.Done()
	buf := make([]byte, maxPacket)
	for {
		n, from, err := t.udp.ReadFrom(buf)
		at := time.Now()
		if err != nil {
			if t.closing.Load() {
				return
			}
			t.logger.Printf("[ERR] memberlist: reading a packet: %v", err)
			continue
		}
		if n == 0 {
			continue // nothing memberlist could read a message type from
		}
		// memberlist may keep parts of a packet (a user message, a
		// broadcast it relays), so each gets its own copy.
		p := &memberlist.Packet{Buf: append([]byte(nil), buf[:n]...), From: from, Timestamp: at}
		select {
		case t.packets <- p:
		case <-t.done:
			return
		}
	}
}
