package wire

import (
	"errors"
	"fmt"

	"github.com/raftmq/raftmq/internal/replycode"
)

// Method is one AMQP method: its identity and its encoding.
type Method interface {
	// ClassID is the method's class id.
	ClassID() uint16
	// MethodID is the method's id within its class.
	MethodID() uint16
	// Name is "class.method" as in the specification.
	Name() string
	// Sync reports whether the method expects a reply.
	Sync() bool
	// HasContent reports whether a content header and body follow.
	HasContent() bool
	// AppendTo appends the method frame payload (class id, method id and
	// fields) to b.
	AppendTo(b []byte) []byte
}

// Error is an AMQP exception: a hard one closes the connection with
// connection.close, a soft one closes the channel with channel.close.
type Error struct {
	Code     uint16
	ClassID  uint16
	MethodID uint16
	Text     string
	Hard     bool
}

// Error implements error.
func (e *Error) Error() string {
	kind := "channel"
	if e.Hard {
		kind = "connection"
	}
	return fmt.Sprintf("amqp %s error %d (class %d, method %d): %s", kind, e.Code, e.ClassID, e.MethodID, e.Text)
}

// Close returns the method that reports the error to the peer:
// connection.close when hard, channel.close otherwise.
func (e *Error) Close() Method {
	if e.Hard {
		return &ConnectionClose{ReplyCode: e.Code, ReplyText: e.Text, FailingClassID: e.ClassID, FailingMethodID: e.MethodID}
	}
	return &ChannelClose{ReplyCode: e.Code, ReplyText: e.Text, FailingClassID: e.ClassID, FailingMethodID: e.MethodID}
}

// ConnError returns a hard error with a reply text formatted the way
// RabbitMQ does ("NAME - text").
func ConnError(code uint16, classID, methodID uint16, format string, args ...any) *Error {
	return &Error{Code: code, ClassID: classID, MethodID: methodID, Hard: true, Text: replyText(code, format, args...)}
}

// ChanError returns a soft (channel) error with a reply text formatted the
// way RabbitMQ does ("NAME - text").
func ChanError(code uint16, classID, methodID uint16, format string, args ...any) *Error {
	return &Error{Code: code, ClassID: classID, MethodID: methodID, Text: replyText(code, format, args...)}
}

func replyText(code uint16, format string, args ...any) string {
	text := fmt.Sprintf(format, args...)
	if name := replycode.Name(code); name != "" {
		return name + " - " + text
	}
	return text
}

// AsError returns err as an *Error when it is one.
func AsError(err error) (*Error, bool) {
	var e *Error
	if errors.As(err, &e) {
		return e, true
	}
	return nil, false
}
