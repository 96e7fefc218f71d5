package e2e

import (
	"context"
	"errors"

	amqp "github.com/rabbitmq/amqp091-go"
)

// ConsumeAcking consumes queue on ch with manual acks and the given
// prefetch, calling got with each delivery as it arrives, until ctx ends
// (nil) or the deliveries stop (an error: the channel or its node went
// away). Acks go out from their own goroutine: an ack's write can block on
// a node that stopped reading, and the receive time of the next deliveries
// must not wait for it.
func ConsumeAcking(ctx context.Context, ch *amqp.Channel, queue string, prefetch int, got func(amqp.Delivery)) error {
	if err := ch.Qos(prefetch, 0, false); err != nil {
		return err
	}
	ds, err := ch.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		return err
	}
	acks := make(chan amqp.Delivery, prefetch)
	defer close(acks)
	go func() {
		for d := range acks {
			_ = d.Ack(false)
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case d, ok := <-ds:
			if !ok {
				return errors.New("deliveries closed")
			}
			got(d)
			acks <- d
		}
	}
}

// HeaderInt reads an integer header whatever width the broker chose.
func HeaderInt(h amqp.Table, key string) (int64, bool) {
	switch v := h[key].(type) {
	case int64:
		return v, true
	case int32:
		return int64(v), true
	case int16:
		return int64(v), true
	case int8:
		return int64(v), true
	case uint8:
		return int64(v), true
	case uint16:
		return int64(v), true
	case uint32:
		return int64(v), true
	}
	return 0, false
}
