package amqp

import (
	"context"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"
	gproto "google.golang.org/protobuf/proto"

	"github.com/raftmq/raftmq/amqp/wire"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// BenchmarkServer_PublishConfirmed measures confirmed 1 KiB publishes
// through the server with a broker that commits at once.
func BenchmarkServer_PublishConfirmed(b *testing.B) {
	ts := startServer(b, Config{})
	ts.broker.script(func(*proto.Command) *proto.Result { return &proto.Result{Routed: true} }, nil)
	c, err := amqp091.Dial(ts.url)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ch, err := c.Channel()
	if err != nil {
		b.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		b.Fatal(err)
	}
	confirms := ch.NotifyPublish(make(chan amqp091.Confirmation, 1024))
	body := make([]byte, 1024)
	b.SetBytes(int64(len(body)))
	b.ResetTimer()
	n := b.N
	done := make(chan int)
	go func() {
		acked := 0
		for i := 0; i < n; i++ {
			if c := <-confirms; c.Ack {
				acked++
			}
		}
		done <- acked
	}()
	for i := 0; i < n; i++ {
		if err := ch.PublishWithContext(context.Background(), "", "q", false, false, amqp091.Publishing{Body: body}); err != nil {
			b.Fatal(err)
		}
	}
	if acked := <-done; acked != n {
		b.Fatalf("%d of %d acked", acked, n)
	}
}

// BenchmarkAckRun_LogCost measures what a run of 100 single acks costs on
// its way through the log: the leader validates and encodes each command,
// every follower decodes it. "each" is a Settle per ack, "merged" the one
// Settle mergeSettles makes of them; ns/op and allocs/op are per run.
func BenchmarkAckRun_LogCost(b *testing.B) {
	ref := &proto.ChannelRef{Node: "node-a", Connection: "127.0.0.1:50000-1", Channel: 1}
	run := make([]item, 100)
	for i := range run {
		run[i] = settleItem(ref, uint64(1000+i))
	}
	for _, merge := range []bool{false, true} {
		name := "each"
		if merge {
			name = "merged"
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var cmds []*proto.Command
				if merge {
					cmds, _, _ = mergeSettles(run)
				} else {
					cmds = make([]*proto.Command, len(run))
					for i, it := range run {
						cmds[i] = it.cmd
					}
				}
				for _, c := range cmds {
					if err := fsm.Validate(c, fsm.Limits{}); err != nil {
						b.Fatal(err)
					}
				}
				data, err := gproto.Marshal(&proto.Envelope{Version: 1, StampMs: 1, Commands: cmds})
				if err != nil {
					b.Fatal(err)
				}
				var env proto.Envelope
				if err := gproto.Unmarshal(data, &env); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkAuthorize_Publish is the write check of one basic.publish on a
// channel that keeps publishing to the same exchange, under RabbitMQ's
// default permission (.*) and under a prefix pattern.
func BenchmarkAuthorize_Publish(b *testing.B) {
	for _, write := range []string{".*", "^logs-"} {
		b.Run(write, func(b *testing.B) {
			fb := newFakeBroker()
			fb.perms = map[string][3]string{"alice": {".*", write, ".*"}}
			srv := NewServer(Config{})
			srv.SetBroker(fb)
			ch := &channel{c: &conn{srv: srv, user: "alice", vhost: "/"}}
			m := &wire.BasicPublish{Exchange: "logs-app", RoutingKey: "k"}
			b.ReportAllocs()
			for b.Loop() {
				if e := ch.authorize(m, accessWrite, "exchange", m.Exchange); e != nil {
					b.Fatal(e)
				}
			}
		})
	}
}

// BenchmarkMergeSettles is mergeSettles alone on a run of 100 single
// acks, what a consumer acking each message queues between two batches:
// B/op and allocs/op are what the merge itself costs a run.
func BenchmarkMergeSettles(b *testing.B) {
	ref := &proto.ChannelRef{Node: "node-a", Connection: "127.0.0.1:50000-1", Channel: 1}
	run := make([]item, 100)
	for i := range run {
		run[i] = settleItem(ref, uint64(1000+i))
	}
	b.ReportAllocs()
	for b.Loop() {
		cmds, _, _ := mergeSettles(run)
		if len(cmds) != 1 {
			b.Fatalf("%d commands", len(cmds))
		}
	}
}
