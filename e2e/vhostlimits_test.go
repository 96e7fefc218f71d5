package e2e

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// TestVhostLimits_AcrossTheCluster sets a vhost's limits with raftmqctl
// on a follower and checks them with amqp091-go on every node: a queue
// declared past max-queues gets RabbitMQ's 406 whichever node the client
// is on, and a connection past max-connections is refused at
// connection.open with its 530, counting the vhost's connections on the
// other nodes; a closed connection makes room again, and cleared limits
// refuse nothing.
func TestVhostLimits_AcrossTheCluster(t *testing.T) {
	skipShort(t)
	c := StartCluster(t, 3)
	f := follower(t, c)
	ctl(t, f, "add_vhost", "limited")
	ctl(t, f, "set_permissions", "-p", "limited", "guest", ".*", ".*", ".*")
	ctl(t, f, "set_vhost_limits", "-p", "limited", `{"max-connections": 2, "max-queues": 2}`)
	if out := ctl(t, f, "--quiet", "--consistent", "list_vhost_limits", "-p", "limited"); out != "limit            value\nmax-connections  2\nmax-queues       2\n" {
		t.Fatalf("list_vhost_limits: %q", out)
	}
	url := func(n *Node) string { return "amqp://guest:guest@" + n.AMQPAddr + "/limited" }

	// Two connections, on two nodes, once every node applied the limits
	// and the vhost's permissions.
	var conns [2]*amqp.Connection
	for i := range conns {
		if err := Eventually(20*time.Second, func() error {
			cn, err := amqp.Dial(url(c.Nodes[i]))
			conns[i] = cn
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer func(i int) { _ = conns[i].Close() }(i)
	}
	refused := func() error {
		cn, err := amqp.Dial(url(c.Nodes[2]))
		if err == nil {
			cn.Close()
			return errors.New("a third connection to a vhost of max-connections 2 was taken")
		}
		var ae *amqp.Error
		if !errors.As(err, &ae) || ae.Code != amqp.NotAllowed || ae.Reason != "NOT_ALLOWED - access to vhost 'limited' refused for user 'guest': connection limit (2) is reached" {
			return fmt.Errorf("a third connection: %w, want 530 NOT_ALLOWED", err)
		}
		return nil
	}
	if err := Eventually(20*time.Second, refused); err != nil {
		t.Fatal(err)
	}

	// max-queues: whatever node the client declares on.
	ch0, err := conns[0].Channel()
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"q1", "q2"} {
		if _, err := ch0.QueueDeclare(q, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ch0.QueueDeclare("q1", true, false, false, false, nil); err != nil {
		t.Fatalf("redeclaring a queue at the limit: %v", err)
	}
	ch1, err := conns[1].Channel()
	if err != nil {
		t.Fatal(err)
	}
	_, err = ch1.QueueDeclare("q3", true, false, false, false, nil)
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Code != amqp.PreconditionFailed || ae.Reason != "PRECONDITION_FAILED - cannot declare queue 'q3': queue limit in vhost 'limited' (2) is reached" {
		t.Fatalf("declaring past max-queues: %v", err)
	}

	// A connection closed on node 0 makes room on node 2.
	if err := conns[0].Close(); err != nil {
		t.Fatal(err)
	}
	var third *amqp.Connection
	if err := Eventually(20*time.Second, func() error {
		third, err = amqp.Dial(url(c.Nodes[2]))
		return err
	}); err != nil {
		t.Fatalf("a connection once another closed: %v", err)
	}
	defer third.Close()
	if err := refused(); err != nil {
		t.Fatal(err)
	}

	ctl(t, f, "clear_vhost_limits", "-p", "limited")
	if out := ctl(t, f, "--quiet", "--consistent", "list_vhost_limits", "--global"); strings.Contains(out, "limited") {
		t.Fatalf("limits left after clear_vhost_limits: %q", out)
	}
	if err := Eventually(20*time.Second, func() error {
		cn, err := amqp.Dial(url(c.Nodes[2]))
		if err != nil {
			return err
		}
		defer cn.Close()
		ch, err := cn.Channel()
		if err != nil {
			return err
		}
		_, err = ch.QueueDeclare("q3", true, false, false, false, nil)
		return err
	}); err != nil {
		t.Fatalf("after clear_vhost_limits: %v", err)
	}
	assertSameDigest(t, c)
}
