package fault

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/raftmq/raftmq/e2e"
)

// The deep-backlog scenario: backlogQueue holds backlogDepth confirmed
// 1 KiB messages (bodies on disk, not in snapshots) when the leader is
// killed; once it is back, every one of them is consumed with the bytes it
// was published with, in publish order, while the usual workload runs
// beside it. RAFTMQ_FAULT_BACKLOG sets another depth.
const (
	backlogQueue = "fault.backlog"
	backlogBody  = 1024
)

func backlogDepth() int {
	if n, err := strconv.Atoi(os.Getenv("RAFTMQ_FAULT_BACKLOG")); err == nil && n > 0 {
		return n
	}
	return 200_000
}

func backlogScenario(t *testing.T, c *cluster) {
	depth := backlogDepth()
	start := time.Now()
	if err := fillBacklog(c, depth); err != nil {
		t.Fatalf("fill the backlog: %v", err)
	}
	t.Logf("backlog: %d messages confirmed in %s", depth, time.Since(start).Round(time.Millisecond))
	outage(true, cutFor, (*cluster).kill, (*cluster).start)(t, c)
	start = time.Now()
	if err := drainBacklog(c, depth); err != nil {
		t.Error(err)
	}
	t.Logf("backlog: drained in %s", time.Since(start).Round(time.Millisecond))
}

// backlogMessage is message seq's body: its number, then bytes derived
// from it, so a body served for another message or damaged shows.
func backlogMessage(seq int) []byte {
	b := make([]byte, backlogBody)
	binary.BigEndian.PutUint64(b, uint64(seq))
	for i := 8; i < len(b); i++ {
		b[i] = byte(seq*31 + i)
	}
	return b
}

// fillBacklog publishes depth persistent messages with confirms, in
// batches; a batch that is not wholly confirmed is published again, so
// the queue may hold a message twice but never lacks a confirmed one.
func fillBacklog(c *cluster, depth int) error {
	if err := c.withChannel(30*time.Second, func(ch *amqp.Channel) error {
		_, err := ch.QueueDeclare(backlogQueue, true, false, false, false, nil)
		return err
	}); err != nil {
		return err
	}
	const batch = 500
	for next := 0; next < depth; {
		n := min(batch, depth-next)
		err := c.withChannel(60*time.Second, func(ch *amqp.Channel) error {
			if err := ch.Confirm(false); err != nil {
				return err
			}
			confs := make([]*amqp.DeferredConfirmation, 0, n)
			for i := range n {
				dc, err := ch.PublishWithDeferredConfirm("", backlogQueue, false, false, amqp.Publishing{
					DeliveryMode: amqp.Persistent, Body: backlogMessage(next + i)})
				if err != nil {
					return err
				}
				confs = append(confs, dc)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			for _, dc := range confs {
				ok, err := dc.WaitContext(ctx)
				if err != nil {
					return err
				}
				if !ok {
					return fmt.Errorf("message %d nacked", next)
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		next += n
	}
	return nil
}

// violation is a drain error that no retry can mend: a message lost,
// damaged or out of order. Other errors (a connection to a node that
// restarts) are retried through the next node.
type violation struct{ error }

// drainBacklog consumes the backlog through each node in turn and checks
// that messages 0..depth-1 all arrive intact and in order (a batch that
// was published again repeats a run of numbers, which is allowed).
func drainBacklog(c *cluster, depth int) error {
	want := 0
	deadline := time.Now().Add(3 * time.Minute)
	for i := 0; want < depth; i++ {
		if time.Now().After(deadline) {
			return fmt.Errorf("backlog: %d of %d messages received when the time ran out", want, depth)
		}
		conn, ch, err := open(c.nodes[i%len(c.nodes)])
		if err != nil {
			if i%len(c.nodes) == len(c.nodes)-1 {
				// No node took a connection: a retry spell, not a spin.
				pause(context.Background(), 200*time.Millisecond)
			}
			continue
		}
		err = func() error {
			defer conn.Close()
			if err := ch.Qos(500, 0, false); err != nil {
				return err
			}
			ds, err := ch.Consume(backlogQueue, "", false, false, false, false, nil)
			if err != nil {
				return err
			}
			idle := time.NewTimer(10 * time.Second)
			defer idle.Stop()
			for want < depth {
				select {
				case d, ok := <-ds:
					if !ok {
						return fmt.Errorf("consumer closed")
					}
					if len(d.Body) != backlogBody {
						return violation{fmt.Errorf("backlog: a body of %d bytes, want %d", len(d.Body), backlogBody)}
					}
					seq := int(binary.BigEndian.Uint64(d.Body))
					if string(d.Body) != string(backlogMessage(seq)) {
						return violation{fmt.Errorf("backlog: message %d arrived damaged", seq)}
					}
					switch {
					case seq == want:
						want++
					case seq < want: // a batch published again
					default:
						return violation{fmt.Errorf("backlog: message %d arrived while %d was expected: lost or out of order", seq, want)}
					}
					if err := d.Ack(false); err != nil {
						return err
					}
					idle.Reset(10 * time.Second)
				case <-idle.C:
					return fmt.Errorf("backlog: nothing for 10 s at message %d", want)
				}
			}
			return nil
		}()
		var v violation
		if errors.As(err, &v) {
			return err
		}
	}
	return e2e.Eventually(30*time.Second, func() error {
		return c.withChannel(10*time.Second, func(ch *amqp.Channel) error {
			q, err := ch.QueueDeclarePassive(backlogQueue, true, false, false, false, nil)
			if err != nil {
				return err
			}
			if q.Messages != 0 {
				return fmt.Errorf("backlog: %d messages left after the drain", q.Messages)
			}
			return nil
		})
	})
}
