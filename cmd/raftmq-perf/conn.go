package main

import (
	"net"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// dial connects to uri with the AMQP client, over a connection that
// coalesces writes (see batchingConn).
func dial(uri string) (*amqp.Connection, error) {
	return amqp.DialConfig(uri, amqp.Config{
		Heartbeat: 10 * time.Second,
		Locale:    "en_US",
		Dial: func(network, addr string) (net.Conn, error) {
			c, err := net.DialTimeout(network, addr, 30*time.Second)
			if err != nil {
				return nil, err
			}
			return newBatchingConn(c), nil
		},
	})
}

// maxPending bounds what a batchingConn holds before writers wait.
const maxPending = 1 << 20

// batchingConn hands what the client writes to a goroutine of its own that
// sends it, so that the frames written while a send is in progress leave
// together in the next system call. The AMQP client flushes after every
// publish and every ack; on a machine whose cores the brokers share with
// the tool, one system call per message costs the tool a third of a core.
// A write when nothing is pending leaves as soon as the sending goroutine
// runs, so a paced run sends each message on its own as before. A send
// error is returned by the next Write.
type batchingConn struct {
	net.Conn
	mu      sync.Mutex
	space   sync.Cond // signalled when pending shrinks or err is set
	pending []byte
	err     error
	closed  bool
	wake    chan struct{}
	done    chan struct{}
}

func newBatchingConn(c net.Conn) *batchingConn {
	b := &batchingConn{Conn: c, wake: make(chan struct{}, 1), done: make(chan struct{})}
	b.space.L = &b.mu
	go b.send()
	return b
}

func (b *batchingConn) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for b.err == nil && !b.closed && len(b.pending) >= maxPending {
		b.space.Wait()
	}
	switch {
	case b.err != nil:
		return 0, b.err
	case b.closed:
		return 0, net.ErrClosed
	}
	b.pending = append(b.pending, p...)
	select {
	case b.wake <- struct{}{}:
	default:
	}
	return len(p), nil
}

func (b *batchingConn) send() {
	defer close(b.done)
	var out []byte
	for range b.wake {
		for {
			b.mu.Lock()
			out, b.pending = b.pending, out[:0]
			b.space.Broadcast()
			b.mu.Unlock()
			if len(out) == 0 {
				break
			}
			if _, err := b.Conn.Write(out); err != nil {
				b.mu.Lock()
				b.err = err
				b.space.Broadcast()
				b.mu.Unlock()
				return
			}
		}
	}
}

// Close sends what is pending (for at most a second, in case the peer
// reads nothing more), then closes the connection.
func (b *batchingConn) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return net.ErrClosed
	}
	b.closed = true
	close(b.wake)
	b.space.Broadcast()
	b.mu.Unlock()
	t := time.NewTimer(time.Second)
	defer t.Stop()
	select {
	case <-b.done:
	case <-t.C:
	}
	err := b.Conn.Close()
	<-b.done
	return err
}

// openConsumer dials uri and consumes o.Queue with o's prefetch and ack
// mode; the caller closes the connection.
func openConsumer(uri string, o *options) (*amqp.Connection, <-chan amqp.Delivery, error) {
	conn, err := dial(uri)
	if err != nil {
		return nil, nil, err
	}
	ch, err := conn.Channel()
	if err == nil {
		err = ch.Qos(o.Prefetch, 0, false)
	}
	var ds <-chan amqp.Delivery
	if err == nil {
		ds, err = ch.Consume(o.Queue, "", o.AutoAck, false, false, false, nil)
	}
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	return conn, ds, nil
}
