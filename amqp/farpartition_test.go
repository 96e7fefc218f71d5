package amqp

import (
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/clustertest"
)

// A consumer on a node outside its queue's group acks every delivery
// while the group's leader, leading the metadata group too, is cut off
// from the cluster, again and again,
// and publishers on other nodes go on: the fault suite's five-node
// partition, in one process. Every confirmed message is delivered; one
// delivered again comes flagged redelivered; the consumer's channel stays
// open (an ack forwarded to the leader as it was cut off is resolved
// from a member of the group, not answered with 406).
func TestPlacement_AFarConsumerThroughPartitionsOfItsGroupsLeader(t *testing.T) {
	if testing.Short() {
		t.Skip("starts five nodes")
	}
	c, urls := placedClusterOf(t, 5)
	const q = "far-cut"
	_, decl := dialT(t, urls[0])
	if _, err := decl.QueueDeclare(q, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	id := c.Nodes[0].Node().QueueGroup("/", q)
	var outside []int
	for i, nd := range c.Nodes {
		if !slices.Contains(nd.Node().RunningQueueGroups(), id) {
			outside = append(outside, i)
		}
	}
	if len(outside) < 2 {
		t.Fatalf("group %s runs on all but %v", id, outside)
	}
	leaderOf := func() (int, error) {
		for _, nd := range c.Nodes {
			for _, g := range nd.Node().Groups() {
				if g.ID == id && g.Leader != "" {
					if l := c.Index(g.Leader); l >= 0 {
						return l, nil
					}
				}
			}
		}
		return -1, fmt.Errorf("group %s has no leader", id)
	}

	// The consumer, on the first node outside the group.
	_, cch := dialT(t, urls[outside[0]])
	closed := cch.NotifyClose(make(chan *amqp091.Error, 1))
	if err := cch.Qos(50, 0, false); err != nil {
		t.Fatal(err)
	}
	ds, err := cch.Consume(q, "far", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string]int{}
	var unflagged []string
	go func() {
		for d := range ds {
			mu.Lock()
			seen[string(d.Body)]++
			if seen[string(d.Body)] > 1 && !d.Redelivered {
				unflagged = append(unflagged, string(d.Body))
			}
			mu.Unlock()
			_ = d.Ack(false)
		}
	}()

	// Publishers, on the other nodes outside the group, until stopped;
	// a publish whose confirm does not come is published again under a
	// new body.
	stop := make(chan struct{})
	var confirmed sync.Map
	var count atomic.Int64
	var pubs sync.WaitGroup
	for p := range 3 {
		node := outside[1]
		pubs.Add(1)
		go func() {
			defer pubs.Done()
			n := 0
			for attempt := 0; ; attempt++ {
				// A node that refuses clients (no quorum) is asked again
				// after a pause, not in a loop.
				pause := time.Duration(min(attempt, 1)) * 50 * time.Millisecond
				select {
				case <-stop:
					return
				case <-time.After(pause):
				}
				conn, err := amqp091.Dial(urls[node])
				if err != nil {
					continue
				}
				ch, err := conn.Channel()
				if err == nil {
					err = ch.Confirm(false)
				}
				if err != nil {
					_ = conn.Close()
					continue
				}
				for err == nil {
					select {
					case <-stop:
						_ = conn.Close()
						return
					default:
					}
					body := strconv.Itoa(p) + "-" + strconv.Itoa(n)
					n++
					var dc *amqp091.DeferredConfirmation
					dc, err = ch.PublishWithDeferredConfirm("", q, false, false, amqp091.Publishing{DeliveryMode: 2, Body: []byte(body)})
					if err == nil {
						var ok bool
						if ok, err = dc.WaitContext(t.Context()); err == nil && ok {
							confirmed.Store(body, true)
							count.Add(1)
						}
					}
				}
				_ = conn.Close()
			}
		}()
	}

	for range 4 {
		var l int
		clustertest.Eventually(t, clustertest.Timeout, func() error {
			l, err = leaderOf()
			return err
		})
		cut := c.Nodes[l].ID
		// The cut node leads the metadata group too, as in the fault
		// suite, where the one node cut off led both.
		clustertest.Eventually(t, clustertest.Timeout, func() error {
			m := c.WaitForLeader(clustertest.Timeout)
			if m.NodeID() == cut {
				return nil
			}
			if err := m.TransferLeadership(cut); err != nil {
				return err
			}
			return fmt.Errorf("metadata leadership handed to %s", cut)
		})
		c.Partition(cut)
		clustertest.Eventually(t, clustertest.Timeout, func() error {
			n, err := leaderOf()
			if err == nil && c.Nodes[n].ID == cut {
				return fmt.Errorf("group %s still led by %s, cut off", id, cut)
			}
			return err
		})
		// Traffic goes on through the new leader while the old one is
		// cut off, until the consumer's node has it dead (the cluster
		// declares it down meanwhile).
		from := count.Load()
		clustertest.Eventually(t, 2*clustertest.Timeout, func() error {
			if n := count.Load() - from; n < 200 {
				return fmt.Errorf("%d confirmed since the cut", n)
			}
			for _, m := range c.Nodes[outside[0]].Node().Members() {
				if m.ID == cut && m.Health != cluster.HealthDead {
					return fmt.Errorf("%s is %s to the consumer's node", cut, m.Health)
				}
			}
			return nil
		})
		c.Heal()
	}
	close(stop)
	pubs.Wait()

	var want []string
	confirmed.Range(func(k, _ any) bool { want = append(want, k.(string)); return true })
	if len(want) == 0 {
		t.Fatal("nothing was confirmed")
	}
	stillOpen := func() {
		select {
		case e := <-closed:
			t.Fatalf("the consumer's channel closed: %v", e)
		default:
		}
	}
	clustertest.Eventually(t, 2*clustertest.Timeout, func() error {
		stillOpen()
		mu.Lock()
		defer mu.Unlock()
		missing := 0
		for _, b := range want {
			if seen[b] == 0 {
				missing++
			}
		}
		if missing > 0 {
			return fmt.Errorf("%d of %d confirmed messages not delivered", missing, len(want))
		}
		return nil
	})
	stillOpen()
	mu.Lock()
	defer mu.Unlock()
	if len(unflagged) > 0 {
		t.Fatalf("%d deliveries repeated without the redelivered flag, e.g. %v", len(unflagged), unflagged[:min(5, len(unflagged))])
	}
	t.Logf("%d confirmed, %d delivered", len(want), len(seen))
}
