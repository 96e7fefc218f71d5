package amqp

import (
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/raftmq/raftmq/proto"
)

// The log's ChannelTimedOut closes the channel with RabbitMQ's 406 and
// text; the connection and its other channels stay, and the close-ok
// records the channel's end in the log.
func TestConsumerTimeout_ClosesTheChannelWithRabbitMQsError(t *testing.T) {
	ts := startServer(t, Config{})
	conn, ch := openChannel(t, ts)
	closed := ch.NotifyClose(make(chan *amqp091.Error, 1))
	connClosed := conn.NotifyClose(make(chan *amqp091.Error, 1))
	other, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	consumeLogTags(t, ts, ch, "q", 1)
	ref := commandsOf(ts.broker, (*proto.Command).GetConsume)[0].Consumer.GetChannel()
	ts.srv.ChannelTimedOut(&proto.ChannelRef{Node: ref.GetNode(), Connection: ref.GetConnection(), Channel: ref.GetChannel() + 10}, 500)
	ts.srv.ChannelTimedOut(&proto.ChannelRef{Node: "another-node", Connection: ref.GetConnection(), Channel: ref.GetChannel()}, 500)
	ts.srv.ChannelTimedOut(ref, 500)
	e := mustClosedWith(t, closed, 406)
	want := "PRECONDITION_FAILED - delivery acknowledgement on channel 1 timed out. Timeout value used: 500 ms. " +
		"This timeout value can be configured, see consumers doc guide to learn more"
	if e.Reason != want || e.Server != true {
		t.Fatalf("closed with %q (server %v), want %q", e.Reason, e.Server, want)
	}
	if _, err := other.QueueDeclare("still-open", false, false, false, false, nil); err != nil {
		t.Fatalf("another channel of the connection: %v", err)
	}
	eventually(t, 5*time.Second, "the channel's end in the log", func() bool {
		return len(commandsOf(ts.broker, (*proto.Command).GetChannelClosed)) == 1
	})
	select {
	case err := <-connClosed:
		t.Fatalf("the connection closed: %v", err)
	default:
	}
}
