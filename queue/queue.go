package queue

import (
	pb "google.golang.org/protobuf/proto"

	"github.com/raftmq/raftmq/proto"
)

// Message is one queued copy of a published message: the metadata the
// state machine decides with. The body is not held here but named (Body):
// it stays in the log entry that published it, and the node reads it back
// where a delivery is carried out. Properties are held encoded, because a
// decoded proto.Properties costs hundreds of bytes per queued message and
// dead-lettering and headers routing need them in the state machine.
type Message struct {
	Exchange   string
	RoutingKey string
	// Props is the deterministic encoding of the proto.Properties the
	// message is delivered with (BCC removed); nil for none. Never
	// changed in place: copies of one publish share it.
	Props []byte
	Body  Body
	// x holds what few messages have (BCC keys, an inline body), so
	// that the rest do not pay for it.
	x *rare
	// Enqueued is the log stamp of the enqueue (ms).
	Enqueued int64
	Deadline int64 // in this queue; ttl.NoDeadline when none
	MsgTTL   int64 // per-message expiration (ms), -1 when none
	Seq      uint64
	// Returns counts the times a consumer handed the message back
	// (x-delivery-count); past the queue's delivery limit it dies.
	Returns     int64
	Priority    uint8 // the priority property (0 when none)
	Persistent  bool  // delivery-mode 2
	Redelivered bool
}

// Body names a message body: the log entry that published it (Index) and
// the position of the Publish command in that entry (Pos), with its size.
// Every replica applies the same entries, so the name is the same on every
// replica while the bytes are each node's own to keep. A body restored
// from a snapshot written before bodies left the state has no entry to
// name: Index is 0 and the message holds the bytes (SetInline).
type Body struct {
	Index uint64
	Pos   uint32
	Size  uint32
}

type rare struct {
	bcc    []string
	inline []byte
	// failures is the delivery-count of RabbitMQ 4.3 (failed delivery
	// attempts, fsm/apply_retry.go), where Returns is its acquired-count.
	// Few messages fail, so the rest do not pay for it.
	failures int64
}

// Failures is the message's count of failed delivery attempts.
func (m *Message) Failures() int64 {
	if m.x == nil {
		return 0
	}
	return m.x.failures
}

// SetFailures sets the count of failed delivery attempts. The rare part
// is copied first: a copy of the message may share it.
func (m *Message) SetFailures(n int64) {
	if m.x == nil && n == 0 {
		return
	}
	r := &rare{failures: n}
	if m.x != nil {
		r.bcc, r.inline = m.x.bcc, m.x.inline
	}
	m.x = r
}

func (m *Message) rare() *rare {
	if m.x == nil {
		m.x = &rare{}
	}
	return m.x
}

// BCC is the message's BCC routing keys (removed from its properties),
// kept for dead-lettering.
func (m *Message) BCC() []string {
	if m.x == nil {
		return nil
	}
	return m.x.bcc
}

// SetBCC sets the BCC routing keys; none costs nothing.
func (m *Message) SetBCC(keys []string) {
	if len(keys) > 0 || m.x != nil {
		m.rare().bcc = keys
	}
}

// SetInline makes the message hold its body's bytes (a body no log entry
// names).
func (m *Message) SetInline(b []byte) {
	m.Body = Body{Size: uint32(len(b))}
	m.rare().inline = b
}

// Inline returns the bytes of a body the message holds.
func (m *Message) Inline() ([]byte, bool) {
	if m.Body.Index != 0 {
		return nil, false
	}
	if m.x == nil {
		return nil, m.Body.Size == 0
	}
	return m.x.inline, true
}

// Properties decodes Props into a fresh value, nil for none; the caller
// may change it. Props is written by the state machine only, so a failed
// decode means a damaged snapshot, which restore already refused.
func (m *Message) Properties() *proto.Properties {
	if len(m.Props) == 0 {
		return nil
	}
	p := &proto.Properties{}
	if err := pb.Unmarshal(m.Props, p); err != nil {
		return nil
	}
	return p
}
