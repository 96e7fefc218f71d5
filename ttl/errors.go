package ttl

import (
	"strconv"
	"strings"

	"github.com/raftmq/raftmq/internal/replycode"
)

// Error is a refusal of a TTL/expiry value: AMQP reply code 406
// PRECONDITION_FAILED with RabbitMQ's reply text. A refused queue argument
// closes the channel of the queue.declare, a refused expiration property
// closes the channel of the basic.publish; nothing is applied either way.
type Error struct {
	Code uint16
	Text string
}

// Error returns the reply text.
func (e *Error) Error() string { return e.Text }

func precondition(text string) *Error {
	return &Error{Code: replycode.PreconditionFailed, Text: "PRECONDITION_FAILED - " + text}
}

// queueResource formats a queue the way RabbitMQ's rabbit_misc:rs/1 does.
func queueResource(vhost, queue string) string {
	return "queue '" + queue + "' in vhost '" + vhost + "'"
}

// argError is RabbitMQ's "invalid arg" refusal of a queue argument; detail is
// the Erlang term of the reason, e.g. {value_negative,-1}.
func argError(key, vhost, queue, detail string) *Error {
	return precondition("invalid arg '" + key + "' for " + queueResource(vhost, queue) + ": " + detail)
}

// erlangList renders a byte string the way Erlang's ~p prints a list of
// bytes (latin1 printable range): a double-quoted string when every byte is
// printable, otherwise a list of integers. Erlang breaks a term longer than
// a line over several lines; this does not.
func erlangList(s string) string {
	printable := true
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < 32 || c > 126 && c < 160) && !strings.ContainsRune("\n\r\t\v\b\f\x1b", rune(c)) {
			printable = false
			break
		}
	}
	var b strings.Builder
	if !printable {
		b.WriteByte('[')
		for i := 0; i < len(s); i++ {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.Itoa(int(s[i])))
		}
		b.WriteByte(']')
		return b.String()
	}
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\v':
			b.WriteString(`\v`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		case 0x1b:
			b.WriteString(`\e`)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}
