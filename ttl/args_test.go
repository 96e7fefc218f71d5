package ttl

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"
)

// refusal checks that err is a 406 *Error with exactly text.
func refusal(t *testing.T, err error, text string) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("got error %v (%T), want *Error", err, err)
	}
	if e.Code != 406 {
		t.Errorf("code %d, want 406", e.Code)
	}
	if e.Text != text {
		t.Errorf("text\n got %q\nwant %q", e.Text, text)
	}
	if e.Error() != text {
		t.Errorf("Error() %q, want the text", e.Error())
	}
}

func TestMessageTTLArg(t *testing.T) {
	const pre = "PRECONDITION_FAILED - invalid arg 'x-message-ttl' for queue 'q' in vhost '/': "
	cases := []struct {
		name string
		// seed is the sentence of the seeds the case checks.
		seed string
		v    any
		want int64
		err  string // "" when accepted
	}{
		{"long-long-int", `seeds/000: "The argument can be of AMQP type short-short-int, short-int, long-int, or long-long-int."`, int64(60000), 60000, ""},
		{"short-short-int", `seeds/000: "The argument can be of AMQP type short-short-int, ..."`, int8(100), 100, ""},
		{"short-short-uint", `seeds/000: "The argument can be of AMQP type short-short-int, ..."`, uint8(200), 200, ""},
		{"short-int", `seeds/000: "... short-int ..."`, int16(30000), 30000, ""},
		{"short-uint", `seeds/000: "... short-int ..."`, uint16(65535), 65535, ""},
		{"long-int", `seeds/000: "... long-int ..."`, int32(60000), 60000, ""},
		{"long-uint", `seeds/000: "... long-int ..."`, uint32(math.MaxUint32), math.MaxUint32, ""},
		{"go int", `seeds/002: "The argument can be of AMQP 0-9-1 type short-short-int, short-int, long-int, or long-long-int."`, int(1000), 1000, ""},
		{"go uint64", `seeds/002: same`, uint64(1000), 1000, ""},
		{"go uint", `seeds/002: same`, uint(7), 7, ""},
		{"zero", `seeds/000: "The value of the TTL argument or policy must be a non-negative integer (0 <= n)"`, int64(0), 0, ""},
		{"2^32-1", `seeds/004: "必须是非负 32 位整数 (0 <= n <= 2^32-1)"`, int64(4294967295), 4294967295, ""},
		{"2^32", `RabbitMQ 3.10.8 accepts x-message-ttl 4294967296 (seeds/004's bound is older)`, int64(4294967296), 4294967296, ""},
		{"max", `RabbitMQ 3.10.8 accepts x-message-ttl 315360000000, ten years`, int64(315360000000), 315360000000, ""},
		{"negative", `seeds/000: "must be a non-negative integer (0 <= n)"`, int64(-1), 0, pre + "{value_negative,-1}"},
		{"negative short", `seeds/000: "must be a non-negative integer (0 <= n)"`, int8(-5), 0, pre + "{value_negative,-5}"},
		{"over max", `RabbitMQ 3.10.8: "invalid arg 'x-message-ttl' ...: {value_too_large,315360000001}"`, int64(315360000001), 0, pre + "{value_too_large,315360000001}"},
		{"huge unsigned", `seeds/004: "(0 <= n <= 2^32-1)"`, uint64(math.MaxUint64), 0, pre + "{value_too_large,18446744073709551615}"},
		{"double", `seeds/000: "must be a non-negative integer"`, float64(1000), 0, pre + `"expected integer, got double"`},
		{"float", `seeds/000: "must be a non-negative integer"`, float32(1.5), 0, pre + `"expected integer, got float"`},
		{"string", `seeds/000: "must be a non-negative integer"`, "1000", 0, pre + `"expected integer, got longstr"`},
		{"bytes", `seeds/000: "must be a non-negative integer"`, []byte("1000"), 0, pre + `"expected integer, got binary"`},
		{"bool", `seeds/000: "must be a non-negative integer"`, true, 0, pre + `"expected integer, got bool"`},
		{"void", `seeds/000: "must be a non-negative integer"`, nil, 0, pre + `"expected integer, got void"`},
		{"timestamp", `seeds/000: "must be a non-negative integer"`, time.Unix(1000, 0), 0, pre + `"expected integer, got timestamp"`},
		{"array", `seeds/000: "must be a non-negative integer"`, []any{int64(1)}, 0, pre + `"expected integer, got array"`},
		{"table", `seeds/000: "must be a non-negative integer"`, map[string]any{}, 0, pre + `"expected integer, got table"`},
		{"decimal", `seeds/000: "must be a non-negative integer"`, Unsupported("decimal"), 0, pre + `"expected integer, got decimal"`},
		{"other Go type", `seeds/000: "must be a non-negative integer"`, struct{}{}, 0, pre + `"expected integer, got unknown"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := MessageTTLArg(c.v, "/", "q")
			if c.err != "" {
				refusal(t, err, c.err)
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("got %d, %v; want %d, nil", got, err, c.want)
			}
		})
	}
}

func TestMessageTTLArgNamesQueueAndVhost(t *testing.T) {
	// The text is RabbitMQ's "invalid arg '~ts' for ~ts: ~255p" with the
	// queue resource "queue 'Q' in vhost 'V'".
	_, err := MessageTTLArg(int64(-3), "prod", "orders")
	refusal(t, err, "PRECONDITION_FAILED - invalid arg 'x-message-ttl' for queue 'orders' in vhost 'prod': {value_negative,-3}")
}

func TestExpiresArg(t *testing.T) {
	const pre = "PRECONDITION_FAILED - invalid arg 'x-expires' for queue 'rpc' in vhost 'v': "
	cases := []struct {
		name, seed string
		v          any
		want       int64
		err        string
	}{
		{"30 minutes", `seeds/000: "args.put("x-expires", 1800000);"`, int64(1800000), 1800000, ""},
		{"one", `seeds/001: "set the x-expires argument (integer in milliseconds, minimum 1)"`, int8(1), 1, ""},
		{"short", `seeds/004: "服从和 x-message-ttl 一样的约束条件"`, int16(1000), 1000, ""},
		{"long", `seeds/004: same constraints as x-message-ttl`, int32(1000), 1000, ""},
		{"unsigned long", `seeds/004: same constraints as x-message-ttl`, uint32(1000), 1000, ""},
		{"max", `RabbitMQ 3.10.8 accepts x-expires 315360000000`, int64(315360000000), 315360000000, ""},
		{"over max", `RabbitMQ 3.10.8: "invalid arg 'x-expires' ...: {value_too_large,315360000001}"`, int64(315360000001), 0, pre + "{value_too_large,315360000001}"},
		{"zero", `seeds/000: "It must be a positive integer (unlike message TTL it cannot be 0)."`, int64(0), 0, pre + "{value_zero,0}"},
		{"zero short", `seeds/002: "它必须是正整数（与消息 TTL 不同，它不能为 0）"`, uint8(0), 0, pre + "{value_zero,0}"},
		{"negative", `seeds/000: "It must be a positive integer"`, int64(-1000), 0, pre + "{value_negative,-1000}"},
		{"too large", `RabbitMQ 3.10.8 refuses x-expires above 315360000000`, int64(1) << 40, 0, pre + "{value_too_large,1099511627776}"},
		{"string", `seeds/000: "It must be a positive integer"`, "1000", 0, pre + `"expected integer, got longstr"`},
		{"double", `seeds/000: "It must be a positive integer"`, 1000.0, 0, pre + `"expected integer, got double"`},
		{"zero double", `seeds/000: "It must be a positive integer" (type is checked first)`, 0.0, 0, pre + `"expected integer, got double"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ExpiresArg(c.v, "v", "rpc")
			if c.err != "" {
				refusal(t, err, c.err)
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("got %d, %v; want %d, nil", got, err, c.want)
			}
		})
	}
}

func TestParseExpiration(t *testing.T) {
	const pre = "PRECONDITION_FAILED - invalid expiration '"
	cases := []struct {
		seed, in string
		want     int64
		err      string
	}{
		{`seeds/000: "properties.setExpiration("60000");"`, "60000", 60000, ""},
		{`seeds/000: "The value of the expiration field describes the TTL period in milliseconds."`, "1000", 1000, ""},
		{`seeds/000: "The same constraints as for x-message-ttl apply." (0 <= n)`, "0", 0, ""},
		{`seeds/000: "The same constraints as for x-message-ttl apply." (n <= 2^32-1)`, "4294967295", 4294967295, ""},
		{`seeds/000: same constraints; Erlang string:to_integer reads leading zeros`, "007", 7, ""},
		{`seeds/000: same constraints; Erlang string:to_integer reads a plus sign`, "+5", 5, ""},
		{`seeds/000: same constraints; minus zero is zero`, "-0", 0, ""},
		{`seeds/000: "The same constraints as for x-message-ttl apply." (0 <= n)`, "-1", 0, pre + "-1': {value_negative,-1}"},
		{`seeds/000: same constraints (0 <= n)`, "-0010", 0, pre + "-0010': {value_negative,-10}"},
		{`RabbitMQ 3.10.8 accepts expiration 4294967296 (seeds/004's bound is older)`, "4294967296", 4294967296, ""},
		{`RabbitMQ 3.10.8 accepts expiration 315360000000`, "315360000000", 315360000000, ""},
		{`RabbitMQ 3.10.8: "invalid expiration '315360000001': {value_too_large,315360000001}"`, "315360000001", 0, pre + "315360000001': {value_too_large,315360000001}"},
		{`seeds/004: "(0 <= n <= 2^32-1)"`, "000099999999999999999999", 0, pre + "000099999999999999999999': {value_too_large,99999999999999999999}"},
		{`seeds/004: "(0 <= n <= 2^32-1)", negative bignum`, "-99999999999999999999", 0, pre + "-99999999999999999999': {value_negative,-99999999999999999999}"},
		{`seeds/000: "the broker will (only) accept the string representation of the number."`, "1.5", 0, pre + "1.5': {leftover_string,\".5\"}"},
		{`seeds/000: "(only) accept the string representation of the number."`, "abc", 0, pre + "abc': no_integer"},
		{`seeds/000: "(only) accept the string representation of the number."`, "", 0, pre + "': no_integer"},
		{`seeds/000: "(only) accept the string representation of the number."`, "-", 0, pre + "-': no_integer"},
		{`seeds/000: "(only) accept the string representation of the number."`, " 5", 0, pre + " 5': no_integer"},
		{`seeds/000: "(only) accept the string representation of the number."`, "5 ", 0, pre + "5 ': {leftover_string,\" \"}"},
		{`seeds/000: "(only) accept the string representation of the number."`, "1e3", 0, pre + "1e3': {leftover_string,\"e3\"}"},
		{`seeds/000: "(only) accept the string representation of the number."`, "5\"x", 0, pre + "5\"x': {leftover_string,\"\\\"x\"}"},
		{`seeds/000: "(only) accept the string representation of the number."`, "5\x01", 0, pre + "5\x01': {leftover_string,[1]}"},
		{`seeds/000: "(only) accept the string representation of the number."`, "5\n\t", 0, pre + "5\n\t': {leftover_string,\"\\n\\t\"}"},
		{`seeds/000: "(only) accept the string representation of the number."`, "5\\", 0, pre + "5\\': {leftover_string,\"\\\\\"}"},
		{`seeds/000: "(only) accept the string representation of the number."`, "5\xe9", 0, pre + "5\xe9': {leftover_string,\"\xe9\"}"},
		{`seeds/000: "(only) accept the string representation of the number."`, "5\x80a", 0, pre + "5\x80a': {leftover_string,[128,97]}"},
	}
	for _, c := range cases {
		t.Run(c.in, func(t *testing.T) {
			got, err := ParseExpiration(c.in)
			if c.err != "" {
				refusal(t, err, c.err)
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("got %d, %v; want %d, nil", got, err, c.want)
			}
		})
	}
}

func TestPolicyValues(t *testing.T) {
	cases := []struct {
		seed string
		fn   func(int64) error
		v    int64
		err  string
	}{
		{`seeds/000: "The value of the TTL argument or policy must be a non-negative integer (0 <= n)"`, PolicyMessageTTL, 0, ""},
		{`seeds/000: rabbitmqctl set_policy TTL ".*" '{"message-ttl":60000}'`, PolicyMessageTTL, 60000, ""},
		{`seeds/000: "must be a non-negative integer (0 <= n)"`, PolicyMessageTTL, -1, "-1 is not a valid message TTL"},
		{`RabbitMQ 3.10.8 accepts a message-ttl policy of 315360000000`, PolicyMessageTTL, 315360000000, ""},
		{`above MaxTTL (RabbitMQ does not check policies; raftmq keeps log time from overflowing)`, PolicyMessageTTL, 315360000001, "315360000001 is not a valid message TTL"},
		{`seeds/000: rabbitmqctl set_policy expiry ".*" '{"expires":1800000}'`, PolicyExpires, 1800000, ""},
		{`seeds/000: "The value of the x-expires argument or expires policy ... must be a positive integer"`, PolicyExpires, 1, ""},
		{`seeds/000: "(unlike message TTL it cannot be 0)"`, PolicyExpires, 0, "0 is not a valid queue expiry"},
		{`seeds/000: "It must be a positive integer"`, PolicyExpires, -5, "-5 is not a valid queue expiry"},
		{`RabbitMQ 3.10.8 accepts an expires policy of 315360000000`, PolicyExpires, 315360000000, ""},
		{`above MaxTTL (RabbitMQ does not check policies; raftmq keeps log time from overflowing)`, PolicyExpires, 315360000001, "315360000001 is not a valid queue expiry"},
	}
	for _, c := range cases {
		err := c.fn(c.v)
		if c.err == "" {
			if err != nil {
				t.Errorf("%s: %d refused: %v", c.seed, c.v, err)
			}
			continue
		}
		refusal(t, err, c.err)
	}
}

// FuzzParseExpiration checks ParseExpiration against strconv: a string is
// accepted exactly when it is an optionally signed run of ASCII digits whose
// value is within 0..MaxTTL (seeds/000: "the broker will (only) accept the
// string representation of the number" and "The same constraints as for
// x-message-ttl apply"), and a refusal is always a 406.
func FuzzParseExpiration(f *testing.F) {
	for _, s := range []string{"0", "1000", "-1", "1.5", "abc", "", "+7", "-0", "4294967295", "4294967296", "315360000000", "315360000001", "00000000000000000001", " 1", "1 ", "٣"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseExpiration(s)
		digits := strings.TrimLeft(s, "+-")
		wellFormed := len(s)-len(digits) <= 1 && digits != "" && strings.Trim(digits, "0123456789") == ""
		want, perr := strconv.ParseInt(strings.TrimPrefix(s, "+"), 10, 64)
		ok := wellFormed && perr == nil && want >= 0 && want <= MaxTTL
		if ok != (err == nil) {
			t.Fatalf("ParseExpiration(%q) = %d, %v; want accepted %v", s, got, err, ok)
		}
		if ok && got != want {
			t.Fatalf("ParseExpiration(%q) = %d, want %d", s, got, want)
		}
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Code != 406 || !strings.HasPrefix(e.Text, "PRECONDITION_FAILED - invalid expiration '"+s+"': ") {
				t.Fatalf("ParseExpiration(%q) refusal %#v", s, err)
			}
		}
	})
}
