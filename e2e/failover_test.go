package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// leaderIndex returns the position of the current leader, from
// cluster_status on node from.
func leaderIndex(t *testing.T, c *Cluster, from int) int {
	t.Helper()
	idx := -1
	err := Eventually(20*time.Second, func() error {
		var st struct {
			LeaderID string `json:"leader_id"`
		}
		if err := json.Unmarshal([]byte(ctl(t, c.Nodes[from], "--json", "cluster_status")), &st); err != nil {
			return err
		}
		for i, n := range c.Nodes {
			if n.ID == st.LeaderID {
				idx = i
				return nil
			}
		}
		return errors.New("no leader yet")
	})
	if err != nil {
		t.Fatal(err)
	}
	return idx
}

// A leader frozen for five seconds (SIGSTOP, as a stalled VM or a long
// pause) must not stop publishers on the other nodes for longer than an
// election, and must not cost the consumers their connections: acks of
// unknown outcome are resolved from the log, not answered with 541.
func TestCluster_FrozenLeaderKeepsPublishersAndConsumers(t *testing.T) {
	skipShort(t)
	c := StartCluster(t, 3)
	li := leaderIndex(t, c, 0)
	var fs []int
	for i := range c.Nodes {
		if i != li {
			fs = append(fs, i)
		}
	}
	setup := channel(t, dial(t, c.Nodes[fs[0]]))
	mustDeclare(t, setup, "frozen", nil)

	// A consumer on one follower acks everything it gets.
	cconn := dial(t, c.Nodes[fs[0]])
	consumerClosed := cconn.NotifyClose(make(chan *amqp.Error, 1))
	cch := channel(t, cconn)
	if err := cch.Qos(50, 0, false); err != nil {
		t.Fatal(err)
	}
	deliveries, err := cch.Consume("frozen", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	got := map[string]bool{}
	go func() {
		for d := range deliveries {
			mu.Lock()
			got[string(d.Body)] = true
			mu.Unlock()
			_ = d.Ack(false)
		}
	}()

	// A confirming publisher on the other follower, about 250 msg/s.
	pconn := dial(t, c.Nodes[fs[1]])
	publisherClosed := pconn.NotifyClose(make(chan *amqp.Error, 1))
	pch := channel(t, pconn)
	if err := pch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confirms := pch.NotifyPublish(make(chan amqp.Confirmation, 1<<16))
	var (
		sent      []string // by delivery tag - 1
		acked     []string
		lastConf  = time.Now()
		longest   time.Duration
		frozenAt  time.Time
		thawedAt  time.Time
		confirmed = make(chan struct{})
	)
	go func() {
		defer close(confirmed)
		for cf := range confirms {
			mu.Lock()
			now := time.Now()
			if gap := now.Sub(lastConf); gap > longest && !frozenAt.IsZero() {
				longest = gap
			}
			lastConf = now
			if cf.Ack && int(cf.DeliveryTag) <= len(sent) {
				acked = append(acked, sent[cf.DeliveryTag-1])
			}
			mu.Unlock()
		}
	}()
	stop := make(chan struct{})
	published := make(chan struct{})
	go func() {
		defer close(published)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(4 * time.Millisecond):
			}
			body := fmt.Sprint("m", i)
			mu.Lock()
			sent = append(sent, body)
			mu.Unlock()
			if err := pch.Publish("", "frozen", false, false, amqp.Publishing{Body: []byte(body)}); err != nil {
				return
			}
		}
	}()

	time.Sleep(time.Second) // load before the fault
	leader := c.Nodes[li]
	mu.Lock()
	frozenAt = time.Now()
	mu.Unlock()
	if err := leader.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = leader.cmd.Process.Signal(syscall.SIGCONT) })
	time.Sleep(5 * time.Second) // the fault itself
	if err := leader.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	thawedAt = time.Now()
	time.Sleep(2 * time.Second) // load after the fault
	close(stop)
	<-published

	// Every confirmed message reaches the consumer.
	err = Eventually(30*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(acked) == 0 {
			return errors.New("nothing confirmed")
		}
		for _, b := range acked {
			if !got[b] {
				return fmt.Errorf("confirmed %s not delivered (%d confirmed, %d delivered)", b, len(acked), len(got))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-consumerClosed:
		t.Fatalf("the consumer's connection closed across the leader change: %v", e)
	case e := <-publisherClosed:
		t.Fatalf("the publisher's connection closed across the leader change: %v", e)
	default:
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("leader %s frozen for %v; longest time without a confirm %v; %d sent, %d confirmed, %d delivered",
		leader.ID, thawedAt.Sub(frozenAt).Round(time.Millisecond), longest.Round(time.Millisecond), len(sent), len(acked), len(got))
	if longest > 3*time.Second {
		t.Fatalf("no confirm for %v while the leader was frozen, want about an election (<= 3 s)", longest)
	}
}

// What a killed node's consumer held goes to a consumer on another node
// about two seconds after the kill: the leader's raft sees the dead node's
// port refuse its heartbeats, and --node-down-after defaults to 1.5 s.
func TestCluster_KilledNodesHeldMessagesMoveInAboutTwoSeconds(t *testing.T) {
	skipShort(t)
	c := StartCluster(t, 3)
	li := leaderIndex(t, c, 0)
	victim, other := (li+1)%3, (li+2)%3
	pub := channel(t, dial(t, c.Nodes[li]))
	mustDeclare(t, pub, "held", nil)
	vch := channel(t, dial(t, c.Nodes[victim]))
	if err := vch.Qos(100, 0, false); err != nil {
		t.Fatal(err)
	}
	vd, err := vch.Consume("held", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	msgs := make([]amqp.Publishing, 20)
	for i := range msgs {
		msgs[i] = amqp.Publishing{Body: []byte(fmt.Sprint(i))}
	}
	publishConfirmed(t, pub, "", "held", msgs)
	receive(t, vd, len(msgs), 20*time.Second) // held, never acked
	och := channel(t, dial(t, c.Nodes[other]))
	od, err := och.Consume("held", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	c.Kill(victim)
	got := receive(t, od, len(msgs), 30*time.Second)
	took := time.Since(killed)
	for _, d := range got {
		_ = d.Ack(false)
	}
	t.Logf("%d held messages reached another node's consumer %v after kill -9 of %s", len(got), took.Round(time.Millisecond), c.Nodes[victim].ID)
	if took > 4*time.Second {
		t.Fatalf("held messages moved only %v after the kill, want about 2 s", took)
	}
}
