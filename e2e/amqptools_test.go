package e2e

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// TestCluster_AMQPTools drives three placing nodes with amqp-tools
// (Debian's amqp-tools, on rabbitmq-c: a third framing implementation
// beside amqp091-go and pika), as a shell script would: declare on one
// node, publish on another, get and consume on the third, delete with
// if-empty, and a missing queue refused with RabbitMQ's words.
func TestCluster_AMQPTools(t *testing.T) {
	skipShort(t)
	for _, tool := range []string{"amqp-declare-queue", "amqp-publish", "amqp-get", "amqp-consume", "amqp-delete-queue"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s (Debian package amqp-tools)", tool)
		}
	}
	c := placed3.start(t)
	url := func(i int) string { return "--url=" + c.Nodes[i].AMQPSpecURL() }
	run := func(stdin string, args ...string) string {
		t.Helper()
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}

	if got := strings.TrimSpace(run("", "amqp-declare-queue", url(0), "-d", "-q", "tools-q")); got != "tools-q" {
		t.Fatalf("amqp-declare-queue printed %q, want the queue's name", got)
	}
	run("", "amqp-publish", url(1), "-r", "tools-q", "-p", "-C", "text/plain", "-E", "identity",
		"-H", "x-origin: amqp-tools", "-t", "tools-replies", "-b", "first")
	const lines = 50
	var in strings.Builder
	for i := range lines {
		fmt.Fprintf(&in, "line-%d\n", i)
	}
	run(in.String(), "amqp-publish", url(1), "-r", "tools-q", "-p", "-l")

	// amqp-get prints the body of one message and acknowledges it.
	if got := run("", "amqp-get", url(2), "-q", "tools-q"); got != "first" {
		t.Fatalf("amqp-get printed %q, want %q", got, "first")
	}
	// amqp-consume pipes each body into the command; cat writes them out
	// in order (amqp-publish -l keeps each line's newline in its body).
	var want strings.Builder
	for i := range lines {
		fmt.Fprintf(&want, "line-%d\n", i)
	}
	if got := run("", "amqp-consume", url(2), "-q", "tools-q", "-c", fmt.Sprint(lines), "-p", "10", "cat"); got != want.String() {
		t.Fatalf("amqp-consume wrote %q, want %q", got, want.String())
	}

	// What amqp-publish set reaches a client of another framing through
	// another node.
	run("", "amqp-publish", url(1), "-r", "tools-q", "-p", "-C", "text/plain", "-E", "identity",
		"-H", "x-origin: amqp-tools", "-t", "tools-replies", "-b", "props")
	conn, err := amqp.Dial(c.Nodes[0].AMQPURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	var d amqp.Delivery
	if err := Eventually(15*time.Second, func() error {
		var ok bool
		d, ok, err = ch.Get("tools-q", true)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return fmt.Errorf("tools-q is empty")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if string(d.Body) != "props" || d.ContentType != "text/plain" || d.ContentEncoding != "identity" ||
		d.ReplyTo != "tools-replies" || d.DeliveryMode != amqp.Persistent || d.Headers["x-origin"] != "amqp-tools" {
		t.Fatalf("amqp-publish's message arrived as body %q, content type %q, encoding %q, reply-to %q, mode %d, headers %v",
			d.Body, d.ContentType, d.ContentEncoding, d.ReplyTo, d.DeliveryMode, d.Headers)
	}

	// An empty queue: amqp-get says so and fails; the queue is deleted
	// with if-empty.
	if out, err := exec.Command("amqp-get", url(2), "-q", "tools-q").CombinedOutput(); err == nil {
		t.Fatalf("amqp-get of an empty queue succeeded: %s", out)
	}
	run("", "amqp-delete-queue", url(0), "-q", "tools-q", "-e")

	// A queue that does not exist is refused as RabbitMQ refuses it, and
	// the tool says so.
	out, err := exec.Command("amqp-get", url(1), "-q", "tools-q").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "NOT_FOUND - no queue 'tools-q' in vhost '/'") {
		t.Fatalf("amqp-get of a deleted queue: %v\n%s", err, out)
	}
}
