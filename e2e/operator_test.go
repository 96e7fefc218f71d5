package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// A consumer with prefetch 30 on a queue of 200: the node's look-ahead
// has the log assign it more than 30, but the client holds 30, so every
// surface an operator reads says 170 ready and 30 unacknowledged, as
// RabbitMQ does: declare-ok, the management API and Prometheus. The AMQP
// server properties name the version raftmq --version prints, and a queue
// declared quorum shows as such.
func TestOperatorNumbers_QueueDepthWithAPrefetchingConsumer(t *testing.T) {
	skipShort(t)
	c := StartCluster(t, 1)
	n := c.Nodes[0]
	conn, err := amqp091.Dial(n.AMQPURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	out, err := exec.Command(c.bin, "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if v := strings.TrimSpace(string(out)); conn.Properties["version"] != v {
		t.Fatalf("server property version %v, raftmq --version %q", conn.Properties["version"], v)
	}
	pub, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pub.QueueDeclare("depth", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := pub.Confirm(false); err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		dc, err := pub.PublishWithDeferredConfirm("", "depth", false, false, amqp091.Publishing{Body: []byte(fmt.Sprint(i))})
		if err != nil {
			t.Fatal(err)
		}
		if i == 199 && !dc.Wait() {
			t.Fatal("publish not confirmed")
		}
	}
	sub, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Qos(30, 0, false); err != nil {
		t.Fatal(err)
	}
	ds, err := sub.Consume("depth", "c", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for got := 0; got < 30; got++ {
		select {
		case <-ds:
		case <-time.After(30 * time.Second):
			t.Fatalf("%d of 30 deliveries", got)
		}
	}
	if err := Eventually(30*time.Second, func() error {
		q, err := pub.QueueDeclarePassive("depth", true, false, false, false, nil)
		if err != nil {
			return err
		}
		if q.Messages != 170 || q.Consumers != 1 {
			return fmt.Errorf("declare-ok: %d messages, %d consumers; want 170 and 1", q.Messages, q.Consumers)
		}
		req, _ := http.NewRequest("GET", "http://"+n.ManagementAddr+"/api/queues/%2F/depth", nil)
		req.SetBasicAuth("guest", "guest")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var mq struct {
			Ready   int `json:"messages_ready"`
			Unacked int `json:"messages_unacknowledged"`
		}
		if err := json.Unmarshal(body, &mq); err != nil {
			return fmt.Errorf("%v: %s", err, body)
		}
		if mq.Ready != 170 || mq.Unacked != 30 {
			return fmt.Errorf("management API: %d ready, %d unacknowledged", mq.Ready, mq.Unacked)
		}
		if r, u := scrape(t, n, "rabbitmq_queue_messages_ready"), scrape(t, n, "rabbitmq_queue_messages_unacked"); r != 170 || u != 30 {
			return fmt.Errorf("Prometheus: %v ready, %v unacked", r, u)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	// A queue shows the type it was declared with (docs/management.md).
	if _, err := pub.QueueDeclare("typed", true, false, false, false, amqp091.Table{"x-queue-type": "quorum"}); err != nil {
		t.Fatal(err)
	}
	for q, want := range map[string]string{"typed": "quorum", "depth": "classic"} {
		req, _ := http.NewRequest("GET", "http://"+n.ManagementAddr+"/api/queues/%2F/"+q, nil)
		req.SetBasicAuth("guest", "guest")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var mq struct {
			Type string `json:"type"`
		}
		err = json.NewDecoder(resp.Body).Decode(&mq)
		resp.Body.Close()
		if err != nil || mq.Type != want {
			t.Fatalf("queue %s: type %q (%v), want %s", q, mq.Type, err, want)
		}
	}
}
