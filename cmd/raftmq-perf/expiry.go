package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// runExpiry publishes o.Count messages with a TTL of o.TTL into o.Queue,
// whose dead-letter exchange routes to <queue>-dead, consumes that queue
// and measures each death's lateness: receive time minus (send time + TTL).
// Send time is taken before the publish, so lateness includes the time the
// publish took to reach the queue: it is an upper bound. With -head-ttl,
// one message with that (longer) TTL is published first and sits at the
// head of the queue.
func runExpiry(ctx context.Context, o *options, out io.Writer) (*report, error) {
	conn, err := dial(o.URIs[0])
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return nil, err
	}
	dlx, dead := o.Queue+"-dlx", o.Queue+"-dead"
	if err := ch.ExchangeDeclare(dlx, "fanout", true, false, false, false, nil); err != nil {
		return nil, err
	}
	if _, err := ch.QueueDeclare(dead, true, false, false, false, nil); err != nil {
		return nil, err
	}
	if err := ch.QueueBind(dead, "", dlx, false, nil); err != nil {
		return nil, err
	}
	args := amqp.Table{"x-dead-letter-exchange": dlx}
	for k, v := range o.QueueArgs {
		args[k] = v
	}
	if _, err := ch.QueueDeclare(o.Queue, true, false, false, false, args); err != nil {
		return nil, fmt.Errorf("declare %s: %w", o.Queue, err)
	}
	for _, q := range []string{o.Queue, dead} {
		if _, err := ch.QueuePurge(q, false); err != nil {
			return nil, err
		}
	}

	// The dead-letter consumer, on the last URL given.
	cconn, err := dial(o.URIs[len(o.URIs)-1])
	if err != nil {
		return nil, err
	}
	defer cconn.Close()
	cch, err := cconn.Channel()
	if err != nil {
		return nil, err
	}
	deaths, err := cch.Consume(dead, "", true, false, false, false, nil)
	if err != nil {
		return nil, err
	}

	// Deaths are read from the start, concurrently with publishing: a
	// delivery read only after the publishers finish would count the
	// tool's own wait as lateness.
	// The receiver stops once it has every message published (wantc
	// tells it how many, when publishing is over) or when told to.
	lateness := newLatencies(1 << 20)
	var got int64 // the receiver's until recvDone
	wantc := make(chan int64, 1)
	recvDone := make(chan error, 1)
	recvCtx, stopRecv := context.WithCancel(ctx)
	defer stopRecv()
	go func() {
		want := int64(-1)
		for want < 0 || got < want {
			select {
			case d, ok := <-deaths:
				if !ok {
					recvDone <- fmt.Errorf("dead-letter consumer closed")
					return
				}
				now := time.Now()
				if len(d.Body) > 8 && d.Body[8] == 1 {
					continue
				}
				if sent, ok := bodyTime(d.Body); ok {
					lateness.add(now.Sub(sent.Add(o.TTL)))
					got++
				}
			case want = <-wantc:
			case <-recvCtx.Done():
				recvDone <- nil
				return
			}
		}
		recvDone <- nil
	}()

	ttlMs := strconv.FormatInt(o.TTL.Milliseconds(), 10)
	body := make([]byte, o.Size)
	if o.HeadTTL > 0 {
		body[8] = 1 // the head message: not measured
		if err := ch.PublishWithContext(ctx, "", o.Queue, false, false, amqp.Publishing{
			Body: body, Expiration: strconv.FormatInt(o.HeadTTL.Milliseconds(), 10), DeliveryMode: amqp.Persistent,
		}); err != nil {
			return nil, err
		}
		body[8] = 0
	}
	var c counters
	confirmLat := newLatencies(1 << 20)
	po := *o
	po.Expiration = ttlMs
	start := time.Now()
	if err := produce(ctx, o.URIs[0], &po, &c, confirmLat, nil); err != nil {
		return nil, err
	}
	pubEnd := time.Now()
	fmt.Fprintf(out, "published %d messages with a %v TTL in %.2fs; waiting for their deaths\n", c.published.Load(), o.TTL, pubEnd.Sub(start).Seconds())

	wantc <- c.published.Load()
	timeout := time.NewTimer(o.TTL + 30*time.Second)
	defer timeout.Stop()
	var recvErr error
	select {
	case recvErr = <-recvDone:
	case <-timeout.C:
		stopRecv()
		recvErr = <-recvDone
		fmt.Fprintf(out, "only %d of %d dead-lettered within TTL+30s\n", got, c.published.Load())
	case <-ctx.Done():
		stopRecv()
		<-recvDone
		return nil, ctx.Err()
	}
	if recvErr != nil {
		return nil, recvErr
	}
	secs := pubEnd.Sub(start).Seconds()
	l := lateness.summary()
	return &report{
		Mode: o.Mode, Seconds: secs, Published: c.published.Load(), Confirmed: c.confirmed.Load(), Nacked: c.nacked.Load(),
		PublishRate: float64(c.published.Load()) / secs, ConfirmRate: float64(c.confirmed.Load()) / secs,
		ConfirmLatency: confirmLat.summary(), DeathLateness: &l, DeadLettered: got, DeadLetteredLost: c.published.Load() - got,
	}, nil
}
