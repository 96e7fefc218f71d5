package fsm_test

import (
	"testing"

	"github.com/raftmq/raftmq/fsm/fsmtest"
	"github.com/raftmq/raftmq/proto"
)

// The log's own refusals of declare arguments say what is wrong with
// them, in RabbitMQ 3.10.8's words.
func TestQueueArgs_RefusalsSayWhatIsWrong(t *testing.T) {
	m := fsmtest.New(t)
	const pre = "PRECONDITION_FAILED - invalid arg '"
	for _, c := range []struct {
		key  string
		v    *proto.Value
		want string
	}{
		{"x-max-length", i64(-1), "x-max-length' for queue 'q' in vhost '/': {value_negative,-1}"},
		{"x-max-length", str("abc"), `x-max-length' for queue 'q' in vhost '/': "expected integer, got longstr"`},
		{"x-max-length-bytes", i64(-1), "x-max-length-bytes' for queue 'q' in vhost '/': {value_negative,-1}"},
		{"x-dead-letter-exchange", i32(5), "x-dead-letter-exchange' for queue 'q' in vhost '/': {unacceptable_type,signedint}"},
		{"x-overflow", str("bogus"), "x-overflow' for queue 'q' in vhost '/': invalid_overflow"},
		{"x-overflow", i32(5), "x-overflow' for queue 'q' in vhost '/': {unacceptable_type,signedint}"},
		{"x-expires", str("x"), `x-expires' for queue 'q' in vhost '/': "expected integer, got longstr"`},
		{"x-message-ttl", str("x"), `x-message-ttl' for queue 'q' in vhost '/': "expected integer, got longstr"`},
	} {
		r, _ := fsmtest.One(t, m, 1, declare("q", table(c.key, c.v)))
		if r.GetCode() != 406 || r.GetText() != pre+c.want {
			t.Errorf("%s %v: %d %q, want 406 %q", c.key, c.v, r.GetCode(), r.GetText(), pre+c.want)
		}
	}
	// A routing key that is not a string, beside a dead-letter exchange.
	r, _ := fsmtest.One(t, m, 1, declare("q", table("x-dead-letter-exchange", str("dx"), "x-dead-letter-routing-key", i32(5))))
	if want := pre + "x-dead-letter-routing-key' for queue 'q' in vhost '/': {unacceptable_type,signedint}"; r.GetText() != want {
		t.Errorf("routing key 5: %q, want %q", r.GetText(), want)
	}
}
