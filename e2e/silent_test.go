package e2e

import (
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// seen is one delivery as a consumer got it.
type seen struct {
	consumer    string
	tag         uint64
	redelivered bool
	at          time.Time
}

// A follower frozen (SIGSTOP) for four seconds under a steady publisher,
// with a consumer on it and one on another follower, both acking
// everything:
//   - what the frozen node's consumer was assigned goes to the other
//     consumer about NodeDownAfter after the freeze, not when the frozen
//     node's heartbeats finally time out;
//   - once thawed, the node carries out none of the assignments its own
//     NodeDown superseded: no message reaches a client a second time
//     without the redelivered flag;
//   - its client's connection is closed (320), and no delivery tag
//     repeats on either channel.
func TestCluster_FrozenFollowerStrandsLittleAndDeliversNothingStale(t *testing.T) {
	skipShort(t)
	c := StartCluster(t, 3)
	li := leaderIndex(t, c, 0)
	victim, other := (li+1)%3, (li+2)%3
	pconn := dial(t, c.Nodes[li])
	pch := channel(t, pconn)
	mustDeclare(t, pch, "silent", nil)

	var mu sync.Mutex
	got := map[string][]seen{}
	consume := func(name string, n *Node) *amqp.Connection {
		conn := dial(t, n)
		ch := channel(t, conn)
		if err := ch.Qos(10, 0, false); err != nil {
			t.Fatal(err)
		}
		ds, err := ch.Consume("silent", name, false, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			for d := range ds {
				mu.Lock()
				got[string(d.Body)] = append(got[string(d.Body)], seen{name, d.DeliveryTag, d.Redelivered, time.Now()})
				mu.Unlock()
				_ = d.Ack(false)
			}
		}()
		return conn
	}
	vconn := consume("victim", c.Nodes[victim])
	vclosed := vconn.NotifyClose(make(chan *amqp.Error, 1))
	consume("other", c.Nodes[other])

	if err := pch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confirms := pch.NotifyPublish(make(chan amqp.Confirmation, 1<<14))
	var sent []string
	publish := func(d time.Duration) {
		for end := time.Now().Add(d); time.Now().Before(end); {
			body := fmt.Sprint("m", len(sent))
			sent = append(sent, body)
			if err := pch.Publish("", "silent", false, false, amqp.Publishing{Body: []byte(body)}); err != nil {
				t.Fatalf("publish: %v", err)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	publish(time.Second)
	proc := c.Nodes[victim].cmd.Process
	frozen := time.Now()
	if err := proc.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proc.Signal(syscall.SIGCONT) })
	publish(4 * time.Second)
	if err := proc.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	thawed := time.Now()
	publish(time.Second)

	confirmed := map[string]bool{}
	for range sent {
		select {
		case cf := <-confirms:
			if cf.Ack {
				confirmed[sent[cf.DeliveryTag-1]] = true
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%d of %d publishes confirmed", len(confirmed), len(sent))
		}
	}
	if err := Eventually(30*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		for b := range confirmed {
			if len(got[b]) == 0 {
				return fmt.Errorf("confirmed %s never delivered", b)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-vclosed:
		if e == nil || e.Code != amqp.ConnectionForced {
			t.Fatalf("the frozen node's client connection closed with %v, want 320", e)
		}
		t.Logf("the frozen node's client: %s", e.Reason)
	case <-time.After(20 * time.Second):
		t.Fatal("the frozen node's client connection stayed open")
	}

	mu.Lock()
	defer mu.Unlock()
	var stale []string
	var slowest time.Duration
	moved := 0
	tags := map[string]map[uint64]bool{}
	for b, ss := range got {
		for i, s := range ss {
			if tags[s.consumer] == nil {
				tags[s.consumer] = map[uint64]bool{}
			}
			if tags[s.consumer][s.tag] {
				t.Errorf("delivery tag %d repeated on the %s consumer's channel", s.tag, s.consumer)
			}
			tags[s.consumer][s.tag] = true
			if i > 0 && !s.redelivered {
				stale = append(stale, fmt.Sprintf("%s to %s after %s", b, s.consumer, ss[0].consumer))
			}
			// What the log had assigned to the frozen node's consumer
			// comes to the other one requeued, flagged redelivered.
			if s.consumer == "other" && s.redelivered && s.at.After(frozen) && s.at.Before(thawed) {
				moved++
				if d := s.at.Sub(frozen); d > slowest {
					slowest = d
				}
			}
		}
	}
	t.Logf("%d published, %d confirmed; %d moved off the frozen node, the last %v after the freeze",
		len(sent), len(confirmed), moved, slowest.Round(time.Millisecond))
	if len(stale) > 0 {
		t.Fatalf("%d messages reached a client again without redelivered: %v", len(stale), stale[:min(5, len(stale))])
	}
	if slowest > 3*time.Second {
		t.Fatalf("the frozen node's messages moved only %v after the freeze, want about NodeDownAfter (1.5 s)", slowest)
	}
}
