package fsm

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"io"

	"github.com/raftmq/raftmq/proto"
)

// state is a placeholder until the broker state lands: it only tracks the
// clock and the applied index.
type state struct {
	clock       int64
	index       uint64
	initialized bool
}

func (s *state) init() {}

func (s *state) apply(e Entry, _ Sink) []*proto.Result {
	if e.Envelope.GetStampMs() > s.clock {
		s.clock = e.Envelope.GetStampMs()
	}
	s.index = e.Index
	for _, c := range e.Envelope.GetCommands() {
		if c.GetVhostPut() != nil || c.GetUserPut() != nil {
			s.initialized = true
		}
	}
	out := make([]*proto.Result, len(e.Envelope.GetCommands()))
	for i := range out {
		out[i] = &proto.Result{Code: 540, Text: "NOT_IMPLEMENTED", Index: e.Index}
	}
	return out
}

func (s *state) nextDeadline() (int64, bool)         { return 0, false }
func (s *state) dueExpiries(int64) []*proto.QueueRef { return nil }
func (s *state) nextLeaseDue() (int64, bool)         { return 0, false }
func (s *state) dueLeases(int64) []*proto.QueueRef   { return nil }
func (s *state) encode() []byte {
	b := binary.BigEndian.AppendUint64(nil, uint64(s.clock))
	return binary.BigEndian.AppendUint64(b, s.index)
}
func (s *state) snapshot() (io.WriterTo, error) { return bytes.NewReader(s.encode()), nil }
func (s *state) restore(r io.Reader) error {
	var b [16]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return err
	}
	s.clock = int64(binary.BigEndian.Uint64(b[:8]))
	s.index = binary.BigEndian.Uint64(b[8:])
	return nil
}
func (s *state) digest() [32]byte { return sha256.Sum256(s.encode()) }
