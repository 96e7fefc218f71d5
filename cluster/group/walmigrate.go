package group

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"

	"github.com/hashicorp/raft"
	raftwal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/segment"
	"github.com/hashicorp/raft-wal/types"
)

// Migration of a write-ahead log that holds entries raft-wal cannot read.
//
// Releases before large entries moved out of the log wrote a publish of
// more than 64 MiB into the log as one record, which raft-wal's reader
// then refuses ("frame header indicates a record larger than
// MaxEntrySize"): raft panics on it at start, on every replica. At open,
// such a log is rewritten, entry by entry, into a new log through
// largeEntries; the stable store's keys follow. The new log is built
// beside the old one (wal.migrate), synced, and swapped in with two
// renames; a crash at any point leaves either the old log, which the next
// start migrates again, or the new one complete.
//
// Finding such a log is cheap: raft-wal preallocates its segment files to
// their size limit (64 MiB by default), so only a file over MaxEntrySize
// can hold such a record, and of those (a segment's last append may also
// run past the limit) only the index block of a sealed one is read
// (segmentOversized).
const (
	walMigrateDir = walDir + ".migrate" // the new log being built
	walOldDir     = walDir + ".premigrate"
)

// stableKeys are the keys raft keeps in its stable store (raft.go of
// hashicorp/raft: the current term and the last vote).
var stableKeys = []string{"CurrentTerm", "LastVoteTerm", "LastVoteCand"}

// raft-wal segment format (segment/format.go and README of
// hashicorp/raft-wal v0.4): a 32-byte file header (magic u32, 3 reserved
// bytes, version u8, base index u64, segment id u64, codec u64; little
// endian), then 8-byte aligned frames: type u8, 3 reserved bytes, u32
// payload length (a commit frame's crc instead, and no payload), payload
// padded to 8 bytes. Entry frames hold the log's records in index order
// from the base index; an index frame ends a sealed segment; an all-zero
// header ends what was written.
const (
	walFileHeader  = 32
	walFrameHeader = 8
	walMagic       = 0x58eb6b0d
	walFrameEntry  = 1
	walFrameIndex  = 2
	walFrameCommit = 3
)

// walFrame is where one record's payload is in a segment file.
type walFrame struct {
	path   string
	offset int64
	size   uint32
}

// prepareWAL finishes a migration a crash interrupted and migrates the
// write-ahead log in dataDir if it holds records raft-wal cannot read.
func prepareWAL(dataDir string, logf func(msg string, args ...any)) error {
	if err := finishWALSwap(dataDir); err != nil {
		return err
	}
	dir := filepath.Join(dataDir, walDir)
	if _, err := os.Stat(dir); err != nil {
		return nil
	}
	big, err := oversizedRecords(dir)
	if err != nil || len(big) == 0 {
		return err
	}
	logf("write-ahead log holds entries larger than raft-wal reads; rewriting it with them out of line", "entries", len(big), "dir", dir)
	if err := migrateWAL(dataDir, big); err != nil {
		return err
	}
	logf("write-ahead log rewritten", "dir", dir)
	return nil
}

// finishWALSwap completes or undoes a swap a crash interrupted. The old
// log is renamed aside only once the new one is complete, so while it is
// aside the new one is whole.
func finishWALSwap(dataDir string) error {
	wal, mig, old := filepath.Join(dataDir, walDir), filepath.Join(dataDir, walMigrateDir), filepath.Join(dataDir, walOldDir)
	if exists(old) {
		if !exists(wal) {
			if err := os.Rename(mig, wal); err != nil {
				return fmt.Errorf("cluster: finish the write-ahead log migration: %w", err)
			}
			if err := syncDir(dataDir); err != nil {
				return err
			}
		}
		return os.RemoveAll(old)
	}
	if exists(mig) {
		return os.RemoveAll(mig)
	}
	return nil
}

// oversizedRecords finds the records over raft-wal's MaxEntrySize in the
// live segments of the log in dir, by index.
func oversizedRecords(dir string) (map[uint64]walFrame, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*.wal"))
	if err != nil {
		return nil, err
	}
	large := false
	for _, name := range names {
		if st, err := os.Stat(name); err == nil && st.Size() > walFileHeader+segment.MaxEntrySize {
			large = true
		}
	}
	if !large {
		return nil, nil
	}
	meta := &metadb.BoltMetaDB{}
	state, err := meta.Load(dir)
	_ = meta.Close()
	if err != nil {
		return nil, openError(filepath.Join(dir, metadb.FileName), err)
	}
	out := map[uint64]walFrame{}
	for _, si := range state.Segments {
		path := filepath.Join(dir, fmt.Sprintf("%020d-%016x.wal", si.BaseIndex, si.ID))
		st, err := os.Stat(path)
		if err != nil || st.Size() <= walFileHeader+segment.MaxEntrySize {
			continue
		}
		if err := oversizedInSegment(path, si, st.Size(), out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// oversizedInSegment adds the oversized entry records of one segment
// file to out.
func oversizedInSegment(path string, si types.SegmentInfo, size int64, out map[uint64]walFrame) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return segmentOversized(f, path, si, size, out)
}

// segmentOversized reads a sealed segment's record sizes from its index
// block, the offsets of its entry frames, and the frame headers only of
// records the offsets leave room for above MaxEntrySize. A segment's
// last append may run past the size limit, so a long log holds many files
// just over it (a backlog of 5,000,000 messages: 79 segments, 42 KiB
// over each); reading every frame header of those was 75,000 reads at
// each start, 8 to 13 s when they were not in the page cache. The tail,
// and a sealed segment without an index block, are scanned.
func segmentOversized(r io.ReaderAt, path string, si types.SegmentInfo, size int64, out map[uint64]walFrame) error {
	if err := checkSegmentHeader(r, path, si.BaseIndex); err != nil {
		return err
	}
	if si.SealTime.IsZero() || si.IndexStart < walFileHeader+walFrameHeader {
		return scanFrames(r, path, si.BaseIndex, size, out)
	}
	// An index that is not what the log's metadata says it is leaves the
	// frames to the scan, and what is wrong with them to raft-wal.
	indexFrame := int64(si.IndexStart) - walFrameHeader
	var fh [walFrameHeader]byte
	if _, err := r.ReadAt(fh[:], indexFrame); err != nil {
		return scanFrames(r, path, si.BaseIndex, size, out)
	}
	n := int64(binary.LittleEndian.Uint32(fh[4:8]))
	if fh[0] != walFrameIndex || n%4 != 0 || int64(si.IndexStart)+n > size {
		return scanFrames(r, path, si.BaseIndex, size, out)
	}
	index := make([]byte, n)
	if _, err := r.ReadAt(index, int64(si.IndexStart)); err != nil {
		return scanFrames(r, path, si.BaseIndex, size, out)
	}
	found := map[uint64]walFrame{}
	count := n / 4
	for i := range count {
		off := int64(binary.LittleEndian.Uint32(index[4*i:]))
		next := indexFrame
		if i+1 < count {
			next = int64(binary.LittleEndian.Uint32(index[4*(i+1):]))
		}
		if next-off-walFrameHeader <= segment.MaxEntrySize {
			continue
		}
		if _, err := r.ReadAt(fh[:], off); err != nil || fh[0] != walFrameEntry || off < walFileHeader || next > size {
			return scanFrames(r, path, si.BaseIndex, size, out)
		}
		if n := binary.LittleEndian.Uint32(fh[4:8]); n > segment.MaxEntrySize && off+walFrameHeader+int64(n) <= size {
			found[si.BaseIndex+uint64(i)] = walFrame{path: path, offset: off + walFrameHeader, size: n}
		}
	}
	maps.Copy(out, found)
	return nil
}

// checkSegmentHeader checks that a segment file is the raft-wal segment
// with base index base.
func checkSegmentHeader(r io.ReaderAt, path string, base uint64) error {
	var h [walFileHeader]byte
	if _, err := r.ReadAt(h[:], 0); err != nil {
		return &DataError{Path: path, Err: fmt.Errorf("segment header: %w", err)}
	}
	if binary.LittleEndian.Uint32(h[0:4]) != walMagic || binary.LittleEndian.Uint64(h[8:16]) != base {
		return &DataError{Path: path, Err: errors.New("not the raft-wal segment its name and the log's metadata say")}
	}
	return nil
}

// scanFrames adds the oversized entry records of a segment to out from
// its frame headers, one after the other. Frames after the last commit
// (a write a crash cut) may be counted too; the migration asks for them
// only if raft-wal says they are in the log.
func scanFrames(r io.ReaderAt, path string, base uint64, size int64, out map[uint64]walFrame) error {
	index := base
	for off := int64(walFileHeader); off+walFrameHeader <= size; {
		var fh [walFrameHeader]byte
		if _, err := r.ReadAt(fh[:], off); err != nil {
			return &DataError{Path: path, Err: fmt.Errorf("frame at %d: %w", off, err)}
		}
		n := binary.LittleEndian.Uint32(fh[4:8])
		switch fh[0] {
		case walFrameEntry:
			if n > segment.MaxEntrySize && off+walFrameHeader+int64(n) <= size {
				out[index] = walFrame{path: path, offset: off + walFrameHeader, size: n}
			}
			index++
			off += walFrameHeader + int64(n) + int64(pad8(n))
		case walFrameCommit:
			off += walFrameHeader
		default:
			// The index frame of a sealed segment, or the end of what
			// was written.
			return nil
		}
	}
	return nil
}

func pad8(n uint32) uint32 { return (8 - n%8) % 8 }

// readFrame reads and decodes one record raft-wal refuses to read.
func readFrame(fr walFrame, index uint64, l *raft.Log) error {
	f, err := os.Open(fr.path)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, fr.size)
	if _, err := f.ReadAt(buf, fr.offset); err != nil {
		return &DataError{Path: fr.path, Err: fmt.Errorf("log entry %d: %w", index, err)}
	}
	var codec raftwal.BinaryCodec
	if err := codec.Decode(buf, l); err != nil || l.Index != index {
		return &DataError{Path: fr.path, Err: fmt.Errorf("log entry %d: record does not decode to it (%v)", index, err)}
	}
	return nil
}

// migrateWAL rewrites the log of dataDir into a new one through
// largeEntries and swaps it in.
func migrateWAL(dataDir string, big map[uint64]walFrame) (err error) {
	dir, mig := filepath.Join(dataDir, walDir), filepath.Join(dataDir, walMigrateDir)
	if err := os.RemoveAll(mig); err != nil {
		return err
	}
	old, err := raftwal.Open(dir, raftwal.WithMetaStore(&metadb.BoltMetaDB{}))
	if err != nil {
		return openError(dir, err)
	}
	defer func() {
		if cerr := old.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	if err := os.MkdirAll(mig, 0o755); err != nil {
		return err
	}
	w, err := raftwal.Open(mig, raftwal.WithMetaStore(&metadb.BoltMetaDB{}))
	if err != nil {
		return fmt.Errorf("cluster: new write-ahead log: %w", err)
	}
	dst, err := withLargeEntries(&walStore{WAL: w, dir: mig}, mig, inlineMax)
	if err != nil {
		_ = w.Close()
		return err
	}
	if err := copyLog(old, dst, dir, big); err != nil {
		_ = dst.Close()
		return err
	}
	for _, k := range stableKeys {
		v, err := old.Get([]byte(k))
		if err != nil {
			_ = dst.Close()
			return openError(filepath.Join(dir, metadb.FileName), err)
		}
		if len(v) > 0 {
			if err := dst.Set([]byte(k), v); err != nil {
				_ = dst.Close()
				return err
			}
		}
	}
	if err := dst.Close(); err != nil {
		return err
	}
	if err := syncTree(mig); err != nil {
		return err
	}
	// The swap: once the old log is aside, finishWALSwap completes it.
	if err := os.Rename(dir, filepath.Join(dataDir, walOldDir)); err != nil {
		return err
	}
	if err := syncDir(dataDir); err != nil {
		return err
	}
	return finishWALSwap(dataDir)
}

// copyLog appends every entry of old to dst, in batches.
func copyLog(old *raftwal.WAL, dst raft.LogStore, dir string, big map[uint64]walFrame) error {
	first, err := old.FirstIndex()
	if err != nil {
		return err
	}
	last, err := old.LastIndex()
	if err != nil {
		return err
	}
	if last == 0 {
		return nil
	}
	var batch []*raft.Log
	bytes := 0
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		err := dst.StoreLogs(batch)
		batch, bytes = batch[:0], 0
		return err
	}
	for i := first; i <= last; i++ {
		l := new(raft.Log)
		if fr, ok := big[i]; ok {
			err = readFrame(fr, i, l)
		} else if err = old.GetLog(i, l); err != nil {
			err = &DataError{Path: segmentFile(dir, i), Err: fmt.Errorf("log entry %d: %w", i, err)}
		}
		if err != nil {
			return err
		}
		batch = append(batch, l)
		bytes += len(l.Data)
		if len(batch) >= 256 || bytes >= 8<<20 {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

// syncTree fsyncs every file in dir and dir itself.
func syncTree(dir string) error {
	des, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, de := range des {
		if !de.Type().IsRegular() {
			continue
		}
		f, err := os.OpenFile(filepath.Join(dir, de.Name()), os.O_RDWR, 0)
		if err != nil {
			return err
		}
		err = f.Sync()
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	return syncDir(dir)
}
