package fsm

import (
	"bytes"
	"fmt"
	"io"
	"math/rand"
	"slices"
	"strconv"
	"testing"

	"github.com/raftmq/raftmq/proto"
)

// gateWriter holds the first write until open is closed: the snapshot's
// messages are then read while the machine goes on applying.
type gateWriter struct {
	buf   bytes.Buffer
	first chan<- struct{}
	open  <-chan struct{}
	began bool // the writer's own
}

func (g *gateWriter) Write(p []byte) (int, error) {
	if !g.began {
		g.began = true
		close(g.first)
		<-g.open
	}
	return g.buf.Write(p)
}

// A snapshot is written while the machine it was taken of goes on
// applying random commands (publishes, deliveries, acks, requeues,
// expiries, purges, deletes, delayed messages), over a backlog of several
// record blocks a queue (a priority queue among them, messages with
// deadlines, delayed ones): its bytes and the bodies it lists are those
// of a replica stopped at the snapshot's index, and a machine restored
// from it and given the rest of the log reaches the same digest. Under
// -race, the writing goroutine reads beside the applying one.
func TestSnapshot_WrittenWhileApplying(t *testing.T) {
	seeds := 6
	if testing.Short() {
		seeds = 2
	}
	for seed := 0; seed < seeds; seed++ {
		r := rand.New(rand.NewSource(int64(seed)))
		a, b := New(), New()
		var log []Entry
		now := int64(1000)
		add := func(cmds ...*proto.Command) Entry {
			e := Entry{Index: uint64(len(log) + 1), Envelope: &proto.Envelope{StampMs: now, Commands: cmds}}
			log = append(log, e)
			return e
		}
		both := func(e Entry) {
			a.Apply(e, DiscardSink{})
			b.Apply(e, DiscardSink{})
		}
		both(add(
			&proto.Command{Cmd: &proto.Command_SetProtocol{SetProtocol: &proto.SetProtocol{Level: Protocol}}},
			&proto.Command{Cmd: &proto.Command_VhostPut{VhostPut: &proto.VhostPut{Name: "/"}}},
			&proto.Command{Cmd: &proto.Command_ExchangeDeclare{ExchangeDeclare: &proto.ExchangeDeclare{Vhost: "/", Name: "dlx", Type: "fanout"}}},
			&proto.Command{Cmd: &proto.Command_QueueDeclare{QueueDeclare: &proto.QueueDeclare{Vhost: "/", Name: "q0"}}},
			&proto.Command{Cmd: &proto.Command_QueueDeclare{QueueDeclare: &proto.QueueDeclare{Vhost: "/", Name: "q1", Arguments: &proto.Table{Fields: []*proto.Field{
				{Key: "x-max-priority", Value: i64v(5)}}}}}},
			&proto.Command{Cmd: &proto.Command_ExchangeDeclare{ExchangeDeclare: &proto.ExchangeDeclare{Vhost: "/", Name: "dx", Type: DelayedExchangeType,
				Arguments: &proto.Table{Fields: []*proto.Field{{Key: "x-delayed-type", Value: &proto.Value{Kind: &proto.Value_LongString{LongString: []byte("direct")}}}}}}}},
			&proto.Command{Cmd: &proto.Command_Bind{Bind: &proto.Bind{Vhost: "/", Source: "dx", Destination: "q0", RoutingKey: "q0"}}},
		))
		// The backlog: 3,000 messages a queue, a fifth with a deadline,
		// priorities in q1, and 2,000 delayed.
		for i := 0; i < 9; i++ {
			var cmds []*proto.Command
			for j := 0; j < 1000; j++ {
				props := &proto.Properties{Priority: ptrU32(uint32(r.Intn(7)))}
				if r.Intn(5) == 0 {
					e := strconv.Itoa(1000 + r.Intn(100000))
					props.Expiration = &e
				}
				pub := &proto.Publish{Vhost: "/", RoutingKey: "q" + strconv.Itoa(i%3), Properties: props, Body: []byte("m" + strconv.Itoa(j))}
				if i%3 == 2 {
					pub.Exchange, pub.RoutingKey = "dx", "q0"
					props.Headers = &proto.Table{Fields: []*proto.Field{{Key: "x-delay", Value: i64v(int64(1000 + r.Intn(1000000)))}}}
				}
				cmds = append(cmds, &proto.Command{Cmd: &proto.Command_Publish{Publish: pub}})
			}
			both(add(cmds...))
		}
		next := func(m *Machine) Entry {
			now += int64(r.Intn(40))
			var cmds []*proto.Command
			if r.Intn(10) == 0 {
				cmds = append(cmds, &proto.Command{Cmd: &proto.Command_Expire{Expire: &proto.Expire{Queues: m.DueExpiries(m.Clock())}}})
			}
			for n := 1 + r.Intn(3); n > 0; n-- {
				if r.Intn(3) == 0 {
					cmds = append(cmds, randomDelayedCommand(r, m))
				} else {
					cmds = append(cmds, randomCommand(r))
				}
			}
			return add(cmds...)
		}
		for i := 0; i < 100+r.Intn(100); i++ {
			both(next(a))
		}
		w, err := a.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		at := len(log)
		first, open := make(chan struct{}), make(chan struct{})
		gw := &gateWriter{first: first, open: open}
		type written struct {
			bodies []string
			err    error
		}
		done := make(chan written, 1)
		go func() {
			var out written
			out.bodies = bodyNames(w)
			_, out.err = w.WriteTo(gw)
			done <- out
		}()
		<-first
		// Half the applies are done before the snapshot's messages are
		// read, the rest beside the reading.
		for i := 0; i < 300; i++ {
			if i == 150 {
				close(open)
			}
			a.Apply(next(a), DiscardSink{})
		}
		got := <-done
		if got.err != nil {
			t.Fatal(got.err)
		}
		wb, err := b.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		var want bytes.Buffer
		if _, err := wb.WriteTo(&want); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(gw.buf.Bytes(), want.Bytes()) {
			t.Fatalf("seed %d: the snapshot written while applying (%d bytes) differs from the stopped replica's (%d bytes)", seed, gw.buf.Len(), want.Len())
		}
		if wantBodies := bodyNames(wb); !slices.Equal(got.bodies, wantBodies) {
			t.Fatalf("seed %d: the snapshot lists %d bodies, the stopped replica's %d", seed, len(got.bodies), len(wantBodies))
		}
		if b.Digest() == a.Digest() {
			t.Fatalf("seed %d: the applies beside the writing changed nothing", seed)
		}
		w.(Releaser).Release()
		wb.(Releaser).Release()
		c := New()
		if err := c.Restore(&gw.buf); err != nil {
			t.Fatal(err)
		}
		for _, e := range log[at:] {
			c.Apply(e, DiscardSink{})
		}
		if c.Digest() != a.Digest() {
			t.Fatalf("seed %d: restored and given the rest of the log, the digest differs", seed)
		}
	}
}

func bodyNames(w io.WriterTo) []string {
	var out []string
	for _, b := range Bodies(w.(BodyLister)) {
		out = append(out, fmt.Sprint(b))
	}
	return out
}

func ptrU32(v uint32) *uint32 { return &v }
