package wire

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/raftmq/raftmq/internal/replycode"
)

// Frame sizes.
const (
	// FrameHeaderSize is the size of a frame header: type, channel, size.
	FrameHeaderSize = 7
	// FrameOverhead is what a frame adds to its payload: header and end octet.
	FrameOverhead = FrameHeaderSize + 1
)

// ProtocolHeader is what an AMQP 0-9-1 client sends first, and what the
// server answers to a client that sends anything else.
var ProtocolHeader = []byte{'A', 'M', 'Q', 'P', 0, 0, 9, 1}

// ProtocolHeader09 is what a client of AMQP 0-9 sends first. RabbitMQ
// serves it as 0-9-1, whose methods and framing are those of 0-9 less
// the classes no broker of either implemented; old clients that speak
// no 0-9-1 (the .NET client Mono ships) connect with it.
var ProtocolHeader09 = []byte{'A', 'M', 'Q', 'P', 1, 1, 0, 9}

// Frame is one frame: its type (FrameMethod, FrameHeader, FrameBody or
// FrameHeartbeat), its channel and its payload.
type Frame struct {
	Type    uint8
	Channel uint16
	Payload []byte
}

// FrameBuffered reports whether the next frame is whole in r's buffer, so
// that reading it reads nothing from the connection under r.
func FrameBuffered(r *bufio.Reader) bool {
	n := r.Buffered()
	if n < FrameHeaderSize {
		return false
	}
	hdr, _ := r.Peek(FrameHeaderSize) // buffered: reads nothing
	return uint64(n) >= uint64(binary.BigEndian.Uint32(hdr[3:7]))+FrameOverhead
}

// ReadFrame reads one frame. frameMax is the negotiated frame-max (the
// largest frame, overhead included; values below FrameMinSize count as
// FrameMinSize). A frame whose size exceeds it, an unknown frame type or a
// wrong frame-end octet is a hard *Error with FRAME_ERROR; nothing is
// allocated before the size was checked.
func ReadFrame(r *bufio.Reader, frameMax uint32) (Frame, error) {
	if frameMax < FrameMinSize {
		frameMax = FrameMinSize
	}
	// The header is read in the reader's buffer: an array of its own
	// escapes through io.ReadFull, an allocation per frame.
	hdr, err := r.Peek(FrameHeaderSize)
	if err != nil {
		if len(hdr) > 0 && err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return Frame{}, err
	}
	f := Frame{Type: hdr[0], Channel: binary.BigEndian.Uint16(hdr[1:3])}
	size := binary.BigEndian.Uint32(hdr[3:7])
	switch f.Type {
	case FrameMethod, FrameHeader, FrameBody, FrameHeartbeat:
	default:
		return Frame{}, ConnError(replycode.FrameError, 0, 0, "type %d, first 16 octets = %x: unknown frame type", f.Type, [FrameHeaderSize]byte(hdr))
	}
	_, _ = r.Discard(FrameHeaderSize) // Peek made them buffered
	if uint64(size) > uint64(frameMax)-FrameOverhead {
		return Frame{}, ConnError(replycode.FrameError, 0, 0, "frame size %d is larger than negotiated maximum %d", uint64(size)+FrameOverhead, frameMax)
	}
	f.Payload = make([]byte, size)
	if _, err := io.ReadFull(r, f.Payload); err != nil {
		return Frame{}, unexpectedEOF(err)
	}
	end, err := r.ReadByte()
	if err != nil {
		return Frame{}, unexpectedEOF(err)
	}
	if end != FrameEnd {
		return Frame{}, ConnError(replycode.FrameError, 0, 0, "frame end octet is 0x%02x, not 0x%02x", end, FrameEnd)
	}
	if f.Type == FrameHeartbeat && f.Channel != 0 {
		return Frame{}, ConnError(replycode.FrameError, 0, 0, "heartbeat frame on channel %d", f.Channel)
	}
	return f, nil
}

func unexpectedEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// AppendFrame appends a frame with the given payload.
func AppendFrame(b []byte, typ uint8, channel uint16, payload []byte) []byte {
	b = append(b, typ)
	b = appendShort(b, channel)
	b = appendLong(b, uint32(len(payload)))
	b = append(b, payload...)
	return append(b, FrameEnd)
}

// appendFrameWith appends a frame whose payload fill appends in place.
func appendFrameWith(b []byte, typ uint8, channel uint16, fill func([]byte) []byte) []byte {
	start := len(b)
	b = append(b, typ)
	b = appendShort(b, channel)
	b = append(b, 0, 0, 0, 0)
	b = fill(b)
	binary.BigEndian.PutUint32(b[start+3:], uint32(len(b)-start-FrameHeaderSize))
	return append(b, FrameEnd)
}

// AppendMethodFrame appends a method frame carrying m.
func AppendMethodFrame(b []byte, channel uint16, m Method) []byte {
	return appendFrameWith(b, FrameMethod, channel, m.AppendTo)
}

// AppendHeaderFrame appends a content-header frame.
func AppendHeaderFrame(b []byte, channel uint16, h *ContentHeader) []byte {
	return appendFrameWith(b, FrameHeader, channel, h.AppendTo)
}

// AppendHeartbeat appends a heartbeat frame.
func AppendHeartbeat(b []byte) []byte {
	return AppendFrame(b, FrameHeartbeat, 0, nil)
}

// AppendContent appends a content-carrying method (basic.deliver,
// basic.get-ok, basic.return, basic.publish) with its header and its body
// split into body frames that fit frameMax.
func AppendContent(b []byte, channel uint16, m Method, props *Properties, body []byte, frameMax uint32) []byte {
	b = AppendMethodFrame(b, channel, m)
	h := ContentHeader{ClassID: m.ClassID(), BodySize: uint64(len(body))}
	if props != nil {
		h.Properties = *props
	}
	b = AppendHeaderFrame(b, channel, &h)
	chunk := MaxBodyFrame(frameMax)
	for len(body) > 0 {
		n := min(len(body), chunk)
		b = AppendFrame(b, FrameBody, channel, body[:n])
		body = body[n:]
	}
	return b
}

// MaxBodyFrame is the largest body frame payload that fits frameMax.
func MaxBodyFrame(frameMax uint32) int {
	if frameMax < FrameMinSize {
		frameMax = FrameMinSize
	}
	return int(frameMax - FrameOverhead)
}

// ContentHeader is the payload of a content-header frame.
type ContentHeader struct {
	ClassID    uint16
	Weight     uint16
	BodySize   uint64
	Properties Properties
}

// AppendTo appends the content-header frame payload.
func (h *ContentHeader) AppendTo(b []byte) []byte {
	b = appendShort(b, h.ClassID)
	b = appendShort(b, h.Weight)
	b = appendLonglong(b, h.BodySize)
	return h.Properties.AppendTo(b)
}

// DecodeContentHeader decodes the payload of a content-header frame.
func DecodeContentHeader(p []byte) (*ContentHeader, error) {
	d := decoder{b: p}
	h := &ContentHeader{ClassID: d.short(), Weight: d.short(), BodySize: d.longlong()}
	if d.err == nil && h.ClassID != ClassBasic {
		return nil, ConnError(replycode.FrameError, h.ClassID, 0, "content header for class %d", h.ClassID)
	}
	h.Properties.decode(&d)
	if d.err != nil {
		return nil, ConnError(replycode.FrameError, h.ClassID, 0, "cannot decode content header: %v", d.err)
	}
	return h, nil
}

// String describes a frame for logs.
func (f Frame) String() string {
	return fmt.Sprintf("frame(type %d, channel %d, %d bytes)", f.Type, f.Channel, len(f.Payload))
}
