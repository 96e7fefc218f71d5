package proto

import "encoding/base64"

// The JSON forms below are how raftmq's operator surfaces show these
// messages: the management API (as RabbitMQ's does) and raftmqctl's JSON
// output. They sit beside the messages so that a client shows them the
// same way without linking the server.

// TableJSON is a field table as a JSON object (never null: RabbitMQ shows
// {}), as the management API and raftmqctl's JSON output show arguments.
func TableJSON(t *Table) map[string]any {
	out := make(map[string]any, len(t.GetFields()))
	for _, f := range t.GetFields() {
		out[f.GetKey()] = ValueJSON(f.GetValue())
	}
	return out
}

// ValueJSON is one field value as JSON: byte arrays in base64, decimals as
// numbers.
func ValueJSON(v *Value) any {
	switch k := v.GetKind().(type) {
	case *Value_Bool:
		return k.Bool
	case *Value_Int8:
		return k.Int8
	case *Value_Uint8:
		return k.Uint8
	case *Value_Int16:
		return k.Int16
	case *Value_Uint16:
		return k.Uint16
	case *Value_Int32:
		return k.Int32
	case *Value_Uint32:
		return k.Uint32
	case *Value_Int64:
		return k.Int64
	case *Value_Float32:
		return k.Float32
	case *Value_Float64:
		return k.Float64
	case *Value_Decimal:
		f := float64(k.Decimal.GetValue())
		for range k.Decimal.GetScale() {
			f /= 10
		}
		return f
	case *Value_LongString:
		return string(k.LongString)
	case *Value_ShortString:
		return k.ShortString
	case *Value_ByteArray:
		return base64.StdEncoding.EncodeToString(k.ByteArray)
	case *Value_Timestamp:
		return k.Timestamp
	case *Value_Table:
		return TableJSON(k.Table)
	case *Value_Array:
		a := make([]any, 0, len(k.Array.GetValues()))
		for _, e := range k.Array.GetValues() {
			a = append(a, ValueJSON(e))
		}
		return a
	}
	return nil
}

// PolicyDefinitionJSON is a policy definition with RabbitMQ's keys, as the
// management API and raftmqctl show it.
func PolicyDefinitionJSON(d *PolicyDefinition) map[string]any {
	out := map[string]any{}
	if d.MessageTtl != nil {
		out["message-ttl"] = d.GetMessageTtl()
	}
	if d.Expires != nil {
		out["expires"] = d.GetExpires()
	}
	if d.DeadLetterExchange != nil {
		out["dead-letter-exchange"] = d.GetDeadLetterExchange()
	}
	if d.DeadLetterRoutingKey != nil {
		out["dead-letter-routing-key"] = d.GetDeadLetterRoutingKey()
	}
	if d.MaxLength != nil {
		out["max-length"] = d.GetMaxLength()
	}
	if d.MaxLengthBytes != nil {
		out["max-length-bytes"] = d.GetMaxLengthBytes()
	}
	if d.Overflow != nil {
		out["overflow"] = d.GetOverflow()
	}
	if d.DeliveryLimit != nil {
		out["delivery-limit"] = d.GetDeliveryLimit()
	}
	if d.ConsumerTimeout != nil {
		out["consumer-timeout"] = d.GetConsumerTimeout()
	}
	if d.DelayedRetryType != nil {
		out["delayed-retry-type"] = d.GetDelayedRetryType()
	}
	if d.DelayedRetryMin != nil {
		out["delayed-retry-min"] = d.GetDelayedRetryMin()
	}
	if d.DelayedRetryMax != nil {
		out["delayed-retry-max"] = d.GetDelayedRetryMax()
	}
	if d.DelayedRetryMultiplier != nil {
		out["delayed-retry-multiplier"] = d.GetDelayedRetryMultiplier()
	}
	if d.QueueLeaderLocator != nil {
		out["queue-leader-locator"] = d.GetQueueLeaderLocator()
	}
	return out
}
