package fault

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/raftmq/raftmq/e2e"
)

// TestFaultFreezeLeaderAsItsDeadLettersFallDue freezes the leader (docker
// pause, 6 s) at the moment the messages its own node's consumer is being
// handed fall due: a burst published to the 1 s TTL queue dies into the
// dead-letter queue, consumed on the leader's node and on one other node
// (prefetch 50, so the leader's node also holds look-ahead deliveries it
// writes as its client acks). The cluster declares the frozen node down
// and gives what its consumer held to the other one, flagged redelivered;
// the thawed node must write none of what it had decided before the
// freeze (issue #36: a frozen leader sent two such dead letters,
// unflagged, four seconds after another node's consumer got them). Nothing
// confirmed may be lost, and every repeat of a message must carry the
// redelivered flag.
//
// It runs on 3 and on 5 nodes, RAFTMQ_FAULT_ROUNDS rounds on each (2 by
// default, to keep CI affordable; a new leader is frozen each round).
func TestFaultFreezeLeaderAsItsDeadLettersFallDue(t *testing.T) {
	skipWithoutDocker(t)
	rounds := faultRounds()
	var reps []report
	for _, size := range []int{3, 5} {
		t.Run(fmt.Sprintf("%d-nodes", size), func(t *testing.T) {
			reps = append(reps, dueFreeze(t, size, rounds))
		})
	}
	var b strings.Builder
	writeTable(&b, reps)
	t.Logf("leader frozen as its dead letters fall due:\n%s", b.String())
	appendReport(t, b.String())
}

// faultRounds is RAFTMQ_FAULT_ROUNDS, 2 when unset.
func faultRounds() int {
	if n, err := strconv.Atoi(os.Getenv("RAFTMQ_FAULT_ROUNDS")); err == nil && n > 0 {
		return n
	}
	return 2
}

// A round's burst: how many messages it publishes to the TTL queue, and
// how many may wait for their confirm (a burst, so that its messages die
// close together).
const (
	dueBurst  = 1500
	dueWindow = 256
)

// dueFreeze runs the rounds on a cluster of size nodes and returns its row.
func dueFreeze(t *testing.T, size, rounds int) report {
	c := startClusterOf(t, fmt.Sprintf("duefreeze%d", size), size, nil)
	c.declareTopology()
	rec := newRecorder()
	name := fmt.Sprintf("due-freeze-%dn", size)
	start := time.Now()
	for r := 1; r <= rounds; r++ {
		if !dueRound(t, c, rec, r) {
			break
		}
	}
	rep, bad := rec.check(name, limits{deliveryGrace: deliveryGrace}, start, time.Now())
	if err := c.digestsAgree(60 * time.Second); err != nil {
		t.Errorf("state digests differ: %v", err)
	}
	for _, b := range bad {
		t.Error(b)
	}
	return rep
}

// dueRound is one round: consumers of the dead-letter queue on the
// leader's node and the next, a burst to the TTL queue, the leader frozen
// halfway through the burst's deaths and thawed freezeFor later, and a
// drain. It reports whether the cluster came back whole.
func dueRound(t *testing.T, c *cluster, rec *recorder, round int) bool {
	leader := c.leader()
	other := (leader + 1) % len(c.nodes)
	ctx, stop := context.WithCancel(context.Background())
	var consumers sync.WaitGroup
	var mu sync.Mutex
	onLeader := 0 // dead letters the leader's node's consumer received
	for _, i := range []int{leader, other} {
		n := c.nodes[i]
		// A heartbeat longer than the freeze: the client is still there
		// when the node resumes, as the were.
		conn, err := amqp.DialConfig(n.amqpURL(), amqp.Config{Heartbeat: 10 * time.Second, Dial: amqp.DefaultDial(3 * time.Second)})
		if err != nil {
			t.Fatalf("round %d: consumer on %s: %v", round, n.id, err)
		}
		ch, err := conn.Channel()
		if err != nil {
			t.Fatalf("round %d: consumer on %s: %v", round, n.id, err)
		}
		consumers.Add(1)
		go func() {
			defer consumers.Done()
			defer conn.Close()
			// It ends when the node closes the connection (the frozen
			// leader's, after its own NodeDown) or the round ends.
			_ = e2e.ConsumeAcking(ctx, ch, deadQueue, prefetch, func(d amqp.Delivery) {
				rec.delivered(delivery{id: d.MessageId, queue: deadQueue, redelivered: d.Redelivered, at: time.Now(), reason: deathReason(d.Headers), node: n.id})
				if i == leader {
					mu.Lock()
					onLeader++
					mu.Unlock()
				}
			})
		}()
	}
	defer func() { stop(); consumers.Wait() }()

	burstStart := time.Now()
	if err := publishBurst(c.nodes[other], rec, round); err != nil {
		t.Fatalf("round %d: burst: %v", round, err)
	}
	burst := time.Since(burstStart)
	// The burst's messages die from burstStart+delayTTL to about
	// burstStart+burst+delayTTL: freeze in the middle of that.
	time.Sleep(time.Until(burstStart.Add(delayTTL + burst/2)))
	mu.Lock()
	before := onLeader
	mu.Unlock()
	frozenAt := time.Now()
	c.freeze(leader)
	time.Sleep(freezeFor)
	c.thaw(leader)
	c.comeBack(leader)
	if len(c.notBack) > 0 {
		for _, b := range c.notBack {
			t.Error(b)
		}
		return false
	}
	c.waitMembers()
	if err := e2e.Eventually(90*time.Second, func() error {
		if n := rec.missing(); n > 0 {
			return fmt.Errorf("%d confirmed messages not yet received", n)
		}
		return nil
	}); err != nil {
		t.Errorf("round %d: drain: %v", round, err)
	}
	rep, _ := rec.check("", limits{deliveryGrace: deliveryGrace}, frozenAt, time.Now())
	t.Logf("round %d: %s (leader) frozen at %v into the burst's deaths (burst of %d took %v); its consumer had %d dead letters by then; so far %d repeats, %d unflagged, %d lost",
		round, c.nodes[leader].id, frozenAt.Sub(burstStart.Add(delayTTL)).Round(time.Millisecond), dueBurst, burst.Round(time.Millisecond),
		before, rep.duplicated, rep.unflaggedDups, rep.lost)
	return true
}

// publishBurst publishes dueBurst messages to the TTL queue through n as
// fast as a window of dueWindow unconfirmed publishes allows.
func publishBurst(n *node, rec *recorder, round int) error {
	conn, ch, confirms, err := openConfirming(n, dueBurst)
	if err != nil {
		return err
	}
	defer conn.Close()
	ids := make([]string, 0, dueBurst)
	answered := 0 // confirms and nacks come in publish order
	await := func() error {
		select {
		case cf, ok := <-confirms:
			if !ok {
				return errors.New("channel closed")
			}
			if cf.Ack {
				rec.confirmed(ids[cf.DeliveryTag-1], time.Now())
			}
			answered++
			return nil
		case <-time.After(confirmTimeout):
			return fmt.Errorf("no confirm for %v", confirmTimeout)
		}
	}
	for seq := range dueBurst {
		for len(ids)-answered >= dueWindow {
			if err := await(); err != nil {
				return err
			}
		}
		s := &sent{id: fmt.Sprintf("due-r%d-%05d", round, seq), queue: delayQueue, ttl: delayTTL, at: time.Now()}
		rec.published(s)
		ctx, cancel := context.WithTimeout(context.Background(), confirmTimeout)
		err := ch.PublishWithContext(ctx, "", delayQueue, false, false, amqp.Publishing{MessageId: s.id, Body: []byte(s.id)})
		cancel()
		if err != nil {
			return err
		}
		ids = append(ids, s.id)
	}
	for answered < len(ids) {
		if err := await(); err != nil {
			return err
		}
	}
	return nil
}
