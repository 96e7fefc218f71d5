package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/raftmq/raftmq/e2e"
)

func TestOptions_ParseAndRefuse(t *testing.T) {
	o, err := parseOptions([]string{"-uri", "amqp://a/, amqp://b/", "-queue-args", `{"x-message-ttl":2000,"x-queue-mode":"lazy"}`}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(o.URIs) != 2 || o.QueueArgs["x-message-ttl"] != int64(2000) || o.QueueArgs["x-queue-mode"] != "lazy" {
		t.Fatalf("options = %+v", o)
	}
	for _, bad := range [][]string{{"-size", "8"}, {"-mode", "nope"}, {"-queue-args", "{"}, {"-uri", ","}, {"-rate", "-1"}, {"-pids", "1,x"}} {
		if _, err := parseOptions(bad, io.Discard); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
	if o, _ := parseOptions([]string{"-mode", "expiry"}, io.Discard); o.Count == 0 {
		t.Error("expiry mode without -count publishes nothing")
	}
	if o, _ := parseOptions([]string{"-mode", "queues"}, io.Discard); o.Count != 1000 {
		t.Error("queues mode without -count does not declare 1,000")
	}
}

func TestRun_AgainstARealNode(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a raftmq process; skipped with -short")
	}
	c := e2e.StartCluster(t, 1)
	uri := c.Nodes[0].AMQPURL()
	var out bytes.Buffer
	if code := run(context.Background(), []string{"-uri", uri, "-count", "300", "-duration", "30s", "-size", "256", "-interval", "100ms"}, &out, &out); code != 0 {
		t.Fatalf("exit %d:\n%s", code, out.String())
	}
	var r report
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &r); err != nil {
		t.Fatalf("last line is not the JSON report: %v\n%s", err, out.String())
	}
	if r.Published != 300 || r.Confirmed != 300 || r.Consumed != 300 || r.ConfirmLatency.Count != 300 || r.EndToEndLatency.P99 <= 0 {
		t.Fatalf("report = %+v", r)
	}

	out.Reset()
	start := time.Now()
	if code := run(context.Background(), []string{"-uri", uri, "-mode", "expiry", "-count", "200", "-ttl", "300ms", "-head-ttl", "60s", "-queue", "exp", "-size", "64"}, &out, &out); code != 0 {
		t.Fatalf("expiry exit %d:\n%s", code, out.String())
	}
	lines = strings.Split(strings.TrimSpace(out.String()), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &r); err != nil {
		t.Fatal(err)
	}
	if r.DeathLateness == nil || r.DeadLettered != 200 || r.DeadLetteredLost != 0 || r.DeathLateness.Max < 0 {
		t.Fatalf("expiry report = %+v\n%s", r, out.String())
	}
	if el := time.Since(start); el > 20*time.Second {
		t.Fatalf("the 300 ms messages behind a 60 s head took %v to die", el)
	}

	// Queues mode: every queue declared, and the node's idle CPU read
	// after the settle.
	out.Reset()
	pid := fmt.Sprint(c.Nodes[0].PID())
	if code := run(context.Background(), []string{"-uri", uri, "-mode", "queues", "-count", "60", "-producers", "3", "-queue", "many", "-duration", "300ms", "-settle", "200ms", "-pids", pid}, &out, &out); code != 0 {
		t.Fatalf("queues exit %d:\n%s", code, out.String())
	}
	lines = strings.Split(strings.TrimSpace(out.String()), "\n")
	r = report{}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &r); err != nil {
		t.Fatal(err)
	}
	if q := r.Queues; q == nil || q.Declared != 60 || q.DeclareRate <= 0 || len(q.IdleCPUShare) != 1 || len(q.IdleSwitchesPerS) != 1 || q.IdleSwitchesPerS[0] <= 0 || q.IdleSeconds < 0.3 || q.SettleSeconds < 0.2 {
		t.Fatalf("queues report = %+v\n%s", r.Queues, out.String())
	}
	ch := channelOn(t, uri)
	for _, name := range []string{"many-1", "many-60"} {
		if _, err := ch.QueueDeclarePassive(name, true, false, false, false, nil); err != nil {
			t.Fatalf("%s after the queues mode: %v", name, err)
		}
	}
}

func channelOn(t *testing.T, uri string) *amqp.Channel {
	t.Helper()
	conn, err := amqp.Dial(uri)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return ch
}
