package group

import (
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft-wal/types"
)

// sealedReaders is the write-ahead log's segment filer whose segments, once
// sealed, are read through a reader of the sealed file instead of the
// writer that wrote them.
//
// raft-wal keeps a sealed segment's writer as its reader for as long as
// the segment is in the log, and with it the writer's buffer, grown to
// the largest append the segment took, and its in-memory index of at
// least 32,768 offsets. A backlog keeps its segments, so that memory grew
// with the backlog: 52-79 MB of live heap a node at 5,000,000 queued
// 1 KiB messages (a heap profile right after the fill), which the
// collector's headroom doubles in resident memory. A restart opens the
// same segments as readers, which hold neither. Here the writer is closed
// and dropped as soon as it reports itself sealed; its file is read as a
// restart would read it, the index from the file's own index block.
type sealedReaders struct {
	types.SegmentFiler
	log *slog.Logger
}

// Create implements types.SegmentFiler.
func (f sealedReaders) Create(info types.SegmentInfo) (types.SegmentWriter, error) {
	w, err := f.SegmentFiler.Create(info)
	if err != nil {
		return nil, err
	}
	return newSealingWriter(f, info, w), nil
}

// RecoverTail implements types.SegmentFiler.
func (f sealedReaders) RecoverTail(info types.SegmentInfo) (types.SegmentWriter, error) {
	w, err := f.SegmentFiler.RecoverTail(info)
	if err != nil {
		return nil, err
	}
	return newSealingWriter(f, info, w), nil
}

// sealingWriter is a segment writer that hands its reads to a reader of
// the sealed file once the segment is sealed.
//
// raft-wal calls Append, Sealed and ForceSeal one at a time, under its
// write lock; GetLog and LastIndex come from any goroutine at any time,
// and Close once no reader holds the segment.
type sealingWriter struct {
	f    sealedReaders
	info types.SegmentInfo
	// start is the index block's offset once sealed: write path only.
	start uint64
	// reads is held across every read, so that the writer is closed only
	// after the last read that may have found it.
	reads sync.RWMutex
	cur   atomic.Pointer[segmentSide]
}

// segmentSide is what a sealingWriter reads and writes through: the
// writer w until the segment is sealed and its file opened again, then
// the reader r alone (w nil), with last the segment's last index.
type segmentSide struct {
	w    types.SegmentWriter
	r    types.SegmentReader
	last uint64
}

func newSealingWriter(f sealedReaders, info types.SegmentInfo, w types.SegmentWriter) *sealingWriter {
	s := &sealingWriter{f: f, info: info}
	s.cur.Store(&segmentSide{w: w, r: w})
	return s
}

// GetLog implements types.SegmentReader.
func (s *sealingWriter) GetLog(idx uint64) (*types.PooledBuffer, error) {
	s.reads.RLock()
	defer s.reads.RUnlock()
	return s.cur.Load().r.GetLog(idx)
}

// LastIndex implements types.SegmentWriter.
func (s *sealingWriter) LastIndex() uint64 {
	c := s.cur.Load()
	if c.w != nil {
		return c.w.LastIndex()
	}
	return c.last
}

// Append implements types.SegmentWriter.
func (s *sealingWriter) Append(entries []types.LogEntry) error {
	c := s.cur.Load()
	if c.w == nil {
		return types.ErrSealed
	}
	return c.w.Append(entries)
}

// Sealed implements types.SegmentWriter; the segment it finds sealed is
// read from its file from then on.
func (s *sealingWriter) Sealed() (bool, uint64, error) {
	c := s.cur.Load()
	if c.w == nil {
		return true, s.start, nil
	}
	sealed, start, err := c.w.Sealed()
	if err == nil && sealed {
		s.reopen(c, start)
	}
	return sealed, start, err
}

// ForceSeal implements types.SegmentWriter (a truncation of the log's
// tail seals the segment where it got to).
func (s *sealingWriter) ForceSeal() (uint64, error) {
	c := s.cur.Load()
	if c.w == nil {
		return s.start, nil
	}
	start, err := c.w.ForceSeal()
	if err == nil {
		s.reopen(c, start)
	}
	return start, err
}

// reopen opens the sealed segment's file as a reader and closes the
// writer c holds. Where the file cannot be opened the writer goes on
// serving reads: it costs memory, not correctness.
func (s *sealingWriter) reopen(c *segmentSide, start uint64) {
	info := s.info
	info.IndexStart = start
	info.MaxIndex = c.w.LastIndex()
	r, err := s.f.SegmentFiler.Open(info)
	if err != nil {
		s.f.log.Warn("write-ahead log: cannot open a sealed segment to read it; its writer serves its reads", "segment", info.ID, "err", err)
		return
	}
	s.start = start
	s.reads.Lock()
	s.cur.Store(&segmentSide{r: r, last: info.MaxIndex})
	s.reads.Unlock()
	if err := c.w.Close(); err != nil {
		s.f.log.Warn("write-ahead log: cannot close a sealed segment's writer", "segment", info.ID, "err", err)
	}
}

// Close implements io.Closer.
func (s *sealingWriter) Close() error {
	return s.cur.Load().r.Close()
}
