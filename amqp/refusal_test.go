package amqp

import (
	"context"
	"errors"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/raftmq/raftmq/proto"
)

// The leader refuses invalid commands with a result: a limit exceeded
// (406) closes the publisher's channel, a malformed command (541) its
// connection, and the server goes on serving.
func TestRefusedByLeader_ChannelOrConnectionError(t *testing.T) {
	ts := startServer(t, Config{})
	ts.broker.answer = func(c *proto.Command) *proto.Result {
		switch {
		case c.GetPublish() != nil && len(c.GetPublish().GetBody()) > 4:
			return &proto.Result{Code: 406, Text: "PRECONDITION_FAILED - message size 5 is larger than configured max size 4"}
		case c.GetQueueDeclare().GetName() == "malformed":
			return &proto.Result{Code: 541, Text: "INTERNAL_ERROR - invalid command: queue name is empty"}
		}
		return nil
	}
	conn, err := amqp091.Dial(ts.url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	closed := ch.NotifyClose(make(chan *amqp091.Error, 1))
	if err := ch.PublishWithContext(context.Background(), "", "q", false, false, amqp091.Publishing{Body: []byte("12345")}); err != nil {
		t.Fatal(err)
	}
	if e := <-closed; e == nil || e.Code != amqp091.PreconditionFailed || !e.Server {
		t.Fatalf("channel closed with %v, want 406 from the server", e)
	}
	ch2, err := conn.Channel()
	if err != nil {
		t.Fatalf("the connection did not survive a channel error: %v", err)
	}
	connClosed := conn.NotifyClose(make(chan *amqp091.Error, 1))
	_, err = ch2.QueueDeclare("malformed", false, false, false, false, nil)
	var ae *amqp091.Error
	if !errors.As(err, &ae) || ae.Code != amqp091.InternalError {
		t.Fatalf("declare refused as malformed: %v, want 541", err)
	}
	if e := <-connClosed; e == nil || e.Code != amqp091.InternalError {
		t.Fatalf("connection closed with %v, want 541", e)
	}
	// Another client is served.
	conn2, err := amqp091.Dial(ts.url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn2.Close()
	ch3, err := conn2.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch3.QueueDeclare("fine", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
}
