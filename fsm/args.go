package fsm

import (
	"errors"
	"math"
	"strconv"

	"github.com/raftmq/raftmq/proto"
)

// How argument and header values are read where the rule is RabbitMQ's
// or a plugin's rather than a queue feature's (features.go) or a TTL's
// (package ttl).

func tableGet(t *proto.Table, key string) (*proto.Value, bool) {
	for _, f := range t.GetFields() {
		if f.GetKey() == key {
			return f.GetValue(), true
		}
	}
	return nil, false
}

func valueString(v *proto.Value) (string, bool) {
	switch k := v.GetKind().(type) {
	case *proto.Value_LongString:
		return string(k.LongString), true
	case *proto.Value_ShortString:
		return k.ShortString, true
	}
	return "", false
}

// DelayOf reads a message's x-delay header as the delayed-message plugin
// does: any AMQP integer as it is, a string as a decimal integer, a float
// truncated. Anything else, or a string that is no integer (on which the
// plugin's channel crashes), is no delay.
func DelayOf(h *proto.Table) (int64, bool) {
	v, ok := tableGet(h, "x-delay")
	if !ok {
		return 0, false
	}
	switch k := v.GetKind().(type) {
	case *proto.Value_Int8:
		return int64(k.Int8), true
	case *proto.Value_Uint8:
		return int64(k.Uint8), true
	case *proto.Value_Int16:
		return int64(k.Int16), true
	case *proto.Value_Uint16:
		return int64(k.Uint16), true
	case *proto.Value_Int32:
		return int64(k.Int32), true
	case *proto.Value_Uint32:
		return int64(k.Uint32), true
	case *proto.Value_Int64:
		return k.Int64, true
	case *proto.Value_Float32:
		return truncFloat(float64(k.Float32))
	case *proto.Value_Float64:
		return truncFloat(k.Float64)
	case *proto.Value_LongString:
		return parseDelay(string(k.LongString))
	case *proto.Value_ShortString:
		return parseDelay(k.ShortString)
	case *proto.Value_ByteArray:
		return parseDelay(string(k.ByteArray))
	}
	return 0, false
}

func truncFloat(f float64) (int64, bool) {
	if math.IsNaN(f) || f >= math.MaxInt64 || f <= math.MinInt64 {
		return 0, false
	}
	return int64(f), true
}

// parseDelay reads a decimal integer with an optional sign, as Erlang's
// binary_to_integer does; one beyond int64 (clamped) is beyond any delay.
func parseDelay(s string) (int64, bool) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, false
	}
	return n, true
}
