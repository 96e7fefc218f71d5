package bodies

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
)

// A body stream (WriteBodies, ReadBodies):
//
//	"RMQBSTR1" | count u64 | count × (key.Index u64 | key.Pos u32 | len u32 | crc u32 | body)
//
// Each body is framed as a file record, with its key, so that a receiver
// given other keys than the sender fails at the first one rather than
// filing a body under the wrong key.
const streamMagic = "RMQBSTR1"

func checkKeys(keys []Key) error {
	for i := 1; i < len(keys); i++ {
		if !keys[i-1].Less(keys[i]) {
			return fmt.Errorf("bodies: keys not ascending and unique at %v, %v", keys[i-1], keys[i])
		}
	}
	return nil
}

// WriteBodies writes the bodies of keys (ascending, unique) to w, for a
// follower's ReadBodies. The files and log entries it reads stay while it
// runs: no Retain deletes them, Pin does not move.
func (s *Store) WriteBodies(w io.Writer, keys []Key) error {
	if err := checkKeys(keys); err != nil {
		return err
	}
	release := s.Hold()
	defer release()
	bw := bufio.NewWriterSize(w, 256<<10)
	var head [16]byte
	copy(head[:], streamMagic)
	binary.LittleEndian.PutUint64(head[8:], uint64(len(keys)))
	if _, err := bw.Write(head[:]); err != nil {
		return fmt.Errorf("bodies: write bodies: %w", err)
	}
	var h [recHeader]byte
	for _, k := range keys {
		body, err := s.Get(k)
		if err != nil {
			return fmt.Errorf("bodies: write bodies: %w", err)
		}
		putRecHeader(h[:], k, uint32(len(body)), 0)
		putRecHeader(h[:], k, uint32(len(body)), recCRC(h[:], body))
		_, _ = bw.Write(h[:])
		if _, err := bw.Write(body); err != nil {
			return fmt.Errorf("bodies: write bodies: %w", err)
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("bodies: write bodies: %w", err)
	}
	return nil
}

// ReadBodies reads a stream WriteBodies wrote for the same keys and
// stores each body that no body file has into new body files, durable
// before it returns. A body only in the local log is stored too: a
// follower's log may hold, at the same index, an entry the leader
// overwrote, and raft deletes the log prefix a snapshot covers anyway.
// Keys a file has are read past, their checksums still checked.
func (s *Store) ReadBodies(r io.Reader, keys []Key) (err error) {
	if err := checkKeys(keys); err != nil {
		return err
	}
	s.maint.Lock()
	defer s.unlockMaint()
	s.mu.RLock()
	closed := s.closed
	s.mu.RUnlock()
	if closed {
		return ErrClosed
	}
	br := bufio.NewReaderSize(r, 256<<10)
	var head [16]byte
	if _, err := io.ReadFull(br, head[:]); err != nil {
		return fmt.Errorf("bodies: read bodies: %w", err)
	}
	if string(head[:8]) != streamMagic {
		return fmt.Errorf("%w: not a body stream", ErrCorrupt)
	}
	if n := binary.LittleEndian.Uint64(head[8:]); n != uint64(len(keys)) {
		return fmt.Errorf("bodies: read bodies: the stream has %d bodies, %d keys were asked for", n, len(keys))
	}
	b := batch{s: s}
	defer func() {
		if err != nil {
			b.abort()
		}
	}()
	var n, bytes int64
	var h [recHeader]byte
	for _, want := range keys {
		if _, err := io.ReadFull(br, h[:]); err != nil {
			return fmt.Errorf("bodies: read bodies: at %v: %w", want, err)
		}
		k, size, crc := parseRecHeader(h[:])
		if k != want {
			return fmt.Errorf("%w: the stream has key %v where %v was expected", ErrCorrupt, k, want)
		}
		if s.inFile(k, true) {
			sum := crcWriter{crc: crcOfHeader(h[:])}
			if _, err := io.CopyN(&sum, br, int64(size)); err != nil {
				return fmt.Errorf("bodies: read the body of %v: %w", k, unexpectedEOF(err))
			}
			if sum.crc != crc {
				return fmt.Errorf("%w: the body of %v fails its checksum", ErrCorrupt, k)
			}
			continue
		}
		if err := b.addFrom(k, size, crc, br); err != nil {
			return err
		}
		n++
		bytes += int64(size)
	}
	files, err := b.commit(nil)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.files = append(s.files, files...)
	s.mu.Unlock()
	s.stats.receivedBodies.Add(n)
	s.stats.receivedBytes.Add(bytes)
	// A hold that ended meanwhile left its obsolete files to us; the
	// bodies received are durable whatever comes of that.
	_ = s.deleteObsolete()
	return nil
}

// StreamLen is the length of the stream WriteBodies writes for live: a
// node that appends the stream to a snapshot states the snapshot's size
// before sending it.
func StreamLen(live []Live) int64 {
	var total int64
	for _, l := range live {
		total += int64(l.Size)
	}
	return StreamLenOf(int64(len(live)), total)
}

// StreamLenOf is StreamLen of count bodies whose sizes add up to total.
func StreamLenOf(count, total int64) int64 {
	return int64(len(streamMagic)+8) + count*recHeader + total
}
