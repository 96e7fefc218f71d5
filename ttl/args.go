package ttl

import (
	"math"
	"strconv"
	"time"

	"github.com/raftmq/raftmq/internal/replycode"
)

// MaxTTL is the largest TTL or expiry RabbitMQ accepts, in milliseconds:
// ten years, inclusive. RabbitMQ 3.10.8 accepts x-message-ttl, x-expires
// and expiration of exactly 315360000000 and refuses 315360000001 with
// {value_too_large,315360000001} (seeds/004's 2^32-1 is an older limit).
// The message-ttl and expires policy keys are held to it too, although
// RabbitMQ does not check them: above it, enqueue stamp plus TTL could
// overflow log time, and no TTL of more than ten years means anything.
const MaxTTL int64 = 10 * 365 * 24 * 60 * 60 * 1000

// Queue argument and policy keys handled by this package.
const (
	ArgMessageTTL    = "x-message-ttl"
	ArgExpires       = "x-expires"
	PolicyKeyTTL     = "message-ttl"
	PolicyKeyExpires = "expires"
)

// Unsupported stands for a queue argument value of an AMQP type that has no
// Go counterpart here (decimal, for instance): the string is RabbitMQ's name
// for the type, used in the refusal text.
type Unsupported string

// intArg reports the integer an argument value holds. ok is false for a
// value of a non-integer type; then typ is RabbitMQ's name of that type.
// big holds the decimal text of an unsigned value above math.MaxInt64.
func intArg(v any) (n int64, big string, typ string, ok bool) {
	switch x := v.(type) {
	case int64:
		return x, "", "", true
	case int:
		return int64(x), "", "", true
	case int8:
		return int64(x), "", "", true
	case int16:
		return int64(x), "", "", true
	case int32:
		return int64(x), "", "", true
	case uint8:
		return int64(x), "", "", true
	case uint16:
		return int64(x), "", "", true
	case uint32:
		return int64(x), "", "", true
	case uint:
		return uintArg(uint64(x))
	case uint64:
		return uintArg(x)
	case float32:
		return 0, "", "float", false
	case float64:
		return 0, "", "double", false
	case string:
		return 0, "", "longstr", false
	case []byte:
		return 0, "", "binary", false
	case bool:
		return 0, "", "bool", false
	case nil:
		return 0, "", "void", false
	case time.Time:
		return 0, "", "timestamp", false
	case []any:
		return 0, "", "array", false
	case map[string]any:
		return 0, "", "table", false
	case Unsupported:
		return 0, "", string(x), false
	default:
		return 0, "", "unknown", false
	}
}

func uintArg(u uint64) (int64, string, string, bool) {
	if u > math.MaxInt64 {
		return math.MaxInt64, strconv.FormatUint(u, 10), "", true
	}
	return int64(u), "", "", true
}

// NotInteger is the reason RabbitMQ gives for refusing an integer
// argument given another AMQP type typ (its integer check's, quoted
// because it is a string rather than a term): "expected integer, got
// longstr".
func NotInteger(typ string) string { return `"expected integer, got ` + typ + `"` }

// checkExpiry is rabbit_misc:check_expiry/1: the Erlang term of the refusal,
// or "" when n is within 0..MaxTTL. big, when set, is n's exact text.
func checkExpiry(n int64, big string) string {
	switch {
	case big != "":
		return "{value_too_large," + big + "}"
	case n < 0:
		return "{value_negative," + strconv.FormatInt(n, 10) + "}"
	case n > MaxTTL:
		return "{value_too_large," + strconv.FormatInt(n, 10) + "}"
	}
	return ""
}

// MessageTTLArg validates the x-message-ttl argument of queue.declare on
// queue in vhost and returns the TTL in milliseconds. RabbitMQ accepts an
// integer of any AMQP width (short-short-int to long-long-int, signed or
// unsigned) in 0..MaxTTL; anything else is refused with 406 and the text
// "PRECONDITION_FAILED - invalid arg 'x-message-ttl' for queue 'q' in vhost
// '/': {value_negative,-1}" (or {value_too_large,N}, "expected integer, got T").
//
// v is the argument converted to Go: int64 (or any Go integer type) for the
// AMQP integers, float32/float64, string, []byte, bool, nil (void),
// time.Time (timestamp), []any (array), map[string]any (table), or
// Unsupported naming the AMQP type.
func MessageTTLArg(v any, vhost, queue string) (int64, error) {
	n, big, typ, ok := intArg(v)
	if !ok {
		return 0, argError(ArgMessageTTL, vhost, queue, NotInteger(typ))
	}
	if bad := checkExpiry(n, big); bad != "" {
		return 0, argError(ArgMessageTTL, vhost, queue, bad)
	}
	return n, nil
}

// ExpiresArg validates the x-expires argument of queue.declare on queue in
// vhost and returns the lease in milliseconds: an integer of any AMQP width in
// 1..MaxTTL. Zero is refused ({value_zero,0}), unlike a message TTL; the
// other refusals are those of MessageTTLArg, with 'x-expires' in the text.
func ExpiresArg(v any, vhost, queue string) (int64, error) {
	n, big, typ, ok := intArg(v)
	if !ok {
		return 0, argError(ArgExpires, vhost, queue, NotInteger(typ))
	}
	if n == 0 && big == "" {
		return 0, argError(ArgExpires, vhost, queue, "{value_zero,0}")
	}
	if bad := checkExpiry(n, big); bad != "" {
		return 0, argError(ArgExpires, vhost, queue, bad)
	}
	return n, nil
}

// ParseExpiration parses the expiration property of a published message:
// the decimal text of a TTL in milliseconds, 0..MaxTTL, with an optional
// sign as Erlang's string:to_integer/1 reads it ("+5" is 5, "-0" is 0).
// Anything else is refused like RabbitMQ refuses it, with 406 on the
// publishing channel: "PRECONDITION_FAILED - invalid expiration 'abc':
// no_integer", "... '1.5': {leftover_string,\".5\"}", "... '-1':
// {value_negative,-1}", "... '315360000001': {value_too_large,315360000001}".
// A message without the property has no per-message TTL: do not call this.
func ParseExpiration(s string) (int64, error) {
	i := 0
	neg := false
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		neg = s[i] == '-'
		i++
	}
	start := i
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	if i == start {
		return 0, expirationError(s, "no_integer")
	}
	if i < len(s) {
		return 0, expirationError(s, "{leftover_string,"+erlangList(s[i:])+"}")
	}
	digits := s[start:i]
	for len(digits) > 1 && digits[0] == '0' {
		digits = digits[1:]
	}
	if digits == "0" {
		return 0, nil
	}
	if neg {
		return 0, expirationError(s, "{value_negative,-"+digits+"}")
	}
	if len(digits) > 18 {
		return 0, expirationError(s, "{value_too_large,"+digits+"}")
	}
	n, _ := strconv.ParseInt(digits, 10, 64) // at most 18 digits: fits
	if n > MaxTTL {
		return 0, expirationError(s, "{value_too_large,"+digits+"}")
	}
	return n, nil
}

func expirationError(s, detail string) *Error {
	return precondition("invalid expiration '" + s + "': " + detail)
}

// PolicyMessageTTL validates the message-ttl key of a policy definition:
// 0..MaxTTL. The refusal text is RabbitMQ's policy validation sentence
// ("-1 is not a valid message TTL"); rabbitmqctl prints it after
// "Validation failed".
func PolicyMessageTTL(v int64) error {
	if v < 0 || v > MaxTTL {
		return &Error{Code: replycode.PreconditionFailed, Text: strconv.FormatInt(v, 10) + " is not a valid message TTL"}
	}
	return nil
}

// PolicyExpires validates the expires key of a policy definition: 1..MaxTTL
// ("0 is not a valid queue expiry" otherwise).
func PolicyExpires(v int64) error {
	if v < 1 || v > MaxTTL {
		return &Error{Code: replycode.PreconditionFailed, Text: strconv.FormatInt(v, 10) + " is not a valid queue expiry"}
	}
	return nil
}
