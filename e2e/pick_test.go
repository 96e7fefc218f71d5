package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// The picking exchanges (x-consistent-hash, x-modulus-hash,
// x-local-random) on three nodes, declared through AMQP, the management
// API and a definitions import: a message published on any node reaches
// the same queue, before and after every node restarts.

// apiSend sends body to the management API of n as guest and returns
// the status and the answer.
func apiSend(t *testing.T, n *Node, method, path, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+n.ManagementAddr+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.SetBasicAuth("guest", "guest")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// mgmtCall sends body as JSON and fails the test unless the status is
// want.
func mgmtCall(t *testing.T, n *Node, method, path string, body any, want int) {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	if code, out := apiSend(t, n, method, path, string(b)); code != want {
		t.Fatalf("%s %s: %d %s, want %d", method, path, code, out, want)
	}
}

// pickExchange is one picking exchange of the test, its queues, and the
// properties a message for key k is published with.
type pickExchange struct {
	name   string
	queues []string
	props  func(k string) amqp.Publishing
}

func byKey(string) amqp.Publishing { return amqp.Publishing{} }

// drainWhere empties each queue with basic.get and maps every body to the
// queue it was in.
func drainWhere(t *testing.T, ch *amqp.Channel, queues []string) map[string]string {
	t.Helper()
	where := map[string]string{}
	for _, q := range queues {
		for {
			d, ok, err := ch.Get(q, true)
			if err != nil {
				t.Fatalf("get %s: %v", q, err)
			}
			if !ok {
				break
			}
			if prev, dup := where[string(d.Body)]; dup {
				t.Fatalf("%q in %s and in %s", d.Body, prev, q)
			}
			where[string(d.Body)] = q
		}
	}
	return where
}

func TestPickingExchanges_AMQP091(t *testing.T) {
	skipShort(t)
	c := StartCluster(t, 3)
	setup := channel(t, dial(t, c.Nodes[0]))

	declareQueues := func(prefix string, n int) []string {
		var qs []string
		for i := range n {
			q := fmt.Sprintf("%s%d", prefix, i)
			mustDeclare(t, setup, q, nil)
			qs = append(qs, q)
		}
		return qs
	}

	// Through AMQP on node 0: a consistent-hash exchange, weights 1..4.
	ch := pickExchange{name: "orders-amqp", queues: declareQueues("ca", 4), props: byKey}
	if err := setup.ExchangeDeclare(ch.name, "x-consistent-hash", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	for i, q := range ch.queues {
		if err := setup.QueueBind(q, fmt.Sprint(i+1), ch.name, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	// A weight that is no integer closes the channel with RabbitMQ's 406.
	bad := channel(t, dial(t, c.Nodes[1]))
	err := bad.QueueBind(ch.queues[0], "heavy", ch.name, false, nil)
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Code != 406 || ae.Reason != `PRECONDITION_FAILED - The binding key must be an integer: <<"heavy">>` {
		t.Fatalf("bind with weight heavy: %v", err)
	}

	// Through the management API on node 1: a modulus-hash exchange.
	mh := pickExchange{name: "orders-api", queues: declareQueues("ma", 3), props: byKey}
	mgmtCall(t, c.Nodes[1], "PUT", "/api/exchanges/%2F/"+mh.name, map[string]any{"type": "x-modulus-hash", "durable": true}, http.StatusCreated)
	for _, q := range mh.queues {
		mgmtCall(t, c.Nodes[1], "POST", "/api/bindings/%2F/e/"+mh.name+"/q/"+q, map[string]any{"routing_key": ""}, http.StatusCreated)
	}

	// Through a definitions import on node 2: a consistent-hash exchange
	// hashing a header, and a local-random exchange.
	hh := pickExchange{name: "orders-defs", queues: []string{"da0", "da1", "da2"}, props: func(k string) amqp.Publishing {
		return amqp.Publishing{Headers: amqp.Table{"customer": k}}
	}}
	lr := pickExchange{name: "rpc-defs", queues: []string{"la0", "la1", "la2"}}
	defs := map[string]any{
		"exchanges": []any{
			map[string]any{"name": hh.name, "vhost": "/", "type": "x-consistent-hash", "durable": true, "arguments": map[string]any{"hash-header": "customer"}},
			map[string]any{"name": lr.name, "vhost": "/", "type": "x-local-random", "durable": true, "arguments": map[string]any{}},
		},
	}
	var queues, bindings []any
	for i, q := range hh.queues {
		queues = append(queues, map[string]any{"name": q, "vhost": "/", "durable": true})
		bindings = append(bindings, map[string]any{"source": hh.name, "vhost": "/", "destination": q, "destination_type": "queue", "routing_key": fmt.Sprint(10 * (i + 1))})
	}
	for _, q := range lr.queues {
		queues = append(queues, map[string]any{"name": q, "vhost": "/", "durable": true})
		bindings = append(bindings, map[string]any{"source": lr.name, "vhost": "/", "destination": q, "destination_type": "queue", "routing_key": ""})
	}
	defs["queues"], defs["bindings"] = queues, bindings
	mgmtCall(t, c.Nodes[2], "POST", "/api/definitions", defs, http.StatusOK)

	const keys = 60
	publishAll := func(round string) {
		t.Helper()
		for i, n := range c.Nodes {
			pub := confirming(t, dial(t, n))
			for _, x := range []pickExchange{ch, mh, hh} {
				for k := range keys {
					key := fmt.Sprintf("customer-%d", k)
					m := x.props(key)
					m.Body = []byte(fmt.Sprintf("%s/%s/%d/%s", round, key, i, x.name))
					confirmOne(t, pub, x.name, key, false, m)
				}
			}
			for k := range 20 {
				confirmOne(t, pub, lr.name, "", false, amqp.Publishing{Body: []byte(fmt.Sprintf("%s/rpc-%d/%d", round, k, i))})
			}
		}
	}
	// where maps exchange and key to the queue every node's copy reached.
	type target struct{ x, key string }
	collect := func(round string) map[target]string {
		t.Helper()
		got := map[target]string{}
		reader := channel(t, dial(t, c.Nodes[1]))
		for _, x := range []pickExchange{ch, mh, hh} {
			where := drainWhere(t, reader, x.queues)
			if len(where) != keys*len(c.Nodes) {
				t.Fatalf("%s: %d messages in its queues, want %d", x.name, len(where), keys*len(c.Nodes))
			}
			used := map[string]bool{}
			for body, q := range where {
				f := strings.Split(body, "/")
				if f[0] != round {
					t.Fatalf("%q left from another round", body)
				}
				tg := target{x.name, f[1]}
				if prev, ok := got[tg]; ok && prev != q {
					t.Fatalf("%s key %s: %s from one node, %s from another", x.name, f[1], prev, q)
				}
				got[tg] = q
				used[q] = true
			}
			if len(used) < 2 {
				t.Fatalf("%s: %d keys all reached %v", x.name, keys, used)
			}
		}
		if where := drainWhere(t, reader, lr.queues); len(where) != 20*len(c.Nodes) {
			t.Fatalf("local random: %d messages in its queues, want %d", len(where), 20*len(c.Nodes))
		}
		return got
	}
	publishAll("before")
	before := collect("before")

	c.RestartAll(60 * time.Second)
	publishAll("after")
	after := collect("after")
	for tg, q := range before {
		if after[tg] != q {
			t.Fatalf("%s key %s: %s before the restart, %s after", tg.x, tg.key, q, after[tg])
		}
	}
}
