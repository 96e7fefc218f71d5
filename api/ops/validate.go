package ops

import (
	"fmt"
	"regexp"

	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// validatePolicy checks a policy before it goes into the log; the error text
// is what the operator sees.
func validatePolicy(name, pattern, applyTo string, def *proto.PolicyDefinition) error {
	if name == "" {
		return fmt.Errorf("policy name must not be empty")
	}
	if _, err := regexp.Compile(pattern); err != nil {
		return fmt.Errorf("pattern %q does not compile: %v", pattern, err)
	}
	switch applyTo {
	case "queues", "exchanges", "all":
	default:
		return fmt.Errorf("apply-to %q must be one of queues, exchanges, all", applyTo)
	}
	if def == nil {
		return fmt.Errorf("policy definition must not be empty")
	}
	empty := true
	if def.MessageTtl != nil {
		empty = false
		if def.GetMessageTtl() < 0 {
			return fmt.Errorf("message-ttl %d must be >= 0", def.GetMessageTtl())
		}
	}
	if def.Expires != nil {
		empty = false
		if def.GetExpires() < 1 {
			return fmt.Errorf("expires %d must be >= 1", def.GetExpires())
		}
	}
	if def.MaxLength != nil {
		empty = false
		if def.GetMaxLength() < 0 {
			return fmt.Errorf("max-length %d must be >= 0", def.GetMaxLength())
		}
	}
	if def.MaxLengthBytes != nil {
		empty = false
		if def.GetMaxLengthBytes() < 0 {
			return fmt.Errorf("max-length-bytes %d must be >= 0", def.GetMaxLengthBytes())
		}
	}
	if def.Overflow != nil {
		empty = false
		switch def.GetOverflow() {
		case "drop-head", "reject-publish", "reject-publish-dlx":
		default:
			return fmt.Errorf("overflow %q must be one of drop-head, reject-publish, reject-publish-dlx", def.GetOverflow())
		}
	}
	if def.DeliveryLimit != nil {
		empty = false
		if def.GetDeliveryLimit() < -1 {
			return fmt.Errorf("delivery-limit %d must be >= -1 (-1: no limit)", def.GetDeliveryLimit())
		}
	}
	if def.ConsumerTimeout != nil {
		empty = false
		if def.GetConsumerTimeout() < 0 {
			return fmt.Errorf("consumer-timeout %d must be >= 0", def.GetConsumerTimeout())
		}
	}
	if def.DelayedRetryType != nil {
		empty = false
		switch def.GetDelayedRetryType() {
		case "disabled", "all", "failed", "returned":
		default:
			return fmt.Errorf("delayed-retry-type %q must be one of disabled, all, failed, returned", def.GetDelayedRetryType())
		}
	}
	// The largest delay is the delayed exchange's (fsm.MaxDelay).
	for _, f := range []struct {
		key string
		v   *int64
		min int64
	}{{"delayed-retry-min", def.DelayedRetryMin, 0}, {"delayed-retry-max", def.DelayedRetryMax, 0}, {"delayed-retry-multiplier", def.DelayedRetryMultiplier, 1}} {
		if f.v != nil {
			empty = false
			if *f.v < f.min || *f.v > fsm.MaxDelay {
				return fmt.Errorf("%s %d must be within %d..%d", f.key, *f.v, f.min, int64(fsm.MaxDelay))
			}
		}
	}
	if def.QueueLeaderLocator != nil {
		empty = false
		if !fsm.KnownLeaderLocator(def.GetQueueLeaderLocator()) {
			return fmt.Errorf("queue-leader-locator %q must be one of client-local, balanced (random and least-leaders: balanced)", def.GetQueueLeaderLocator())
		}
	}
	if def.DeadLetterExchange != nil {
		empty = false
	}
	if def.DeadLetterRoutingKey != nil {
		empty = false
	}
	if empty {
		return fmt.Errorf("policy definition must not be empty")
	}
	return nil
}
