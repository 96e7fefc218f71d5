package group

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"
	"weak"

	"github.com/hashicorp/raft"
)

// Large log entries live beside the write-ahead log, not in it.
//
// raft-wal writes a record of any size but its reader refuses one over
// its compile-time MaxEntrySize (64 MiB) as corrupt, so a node that
// appended a larger entry (one publish of a large message) could not
// start again, and neither could any replica: they all hold the entry.
// Its writer also grows one buffer to the next power of two above the
// largest batch and keeps it. So an entry whose data is over
// inlineMax is written to its own file in the log's directory, fsynced
// with the directory before the append, and the log holds a small marker
// record in its place. Reads resolve the marker: raft, the state machine
// and the body store see the entry as it was appended.
//
// Marker record: Type markerType, Data
//
//	"RMQL" | version 1 | the entry's type u8 | data length u64 | data crc32c u32
//
// with the entry's Index, Term, Extensions and AppendedAt kept as they
// are. Side file "<index %020d>-<term %016x>.entry":
//
//	"RMQLENT1" | index u64 | term u64 | length u64 | crc32c u32 | data
//
// (big-endian, CRC-32C of the data). An (index, term) pair names one
// entry for good (raft's log matching), so a file is never rewritten
// with other bytes; a file no entry of the log names (left by a crash
// between the file and the append, or by a truncation) is removed at
// open.
const (
	// inlineMax is the largest entry data kept in the log itself. An
	// entry above it costs two more fsyncs (file and directory), small
	// next to writing its bytes; batches of small commands (the batcher
	// stops at MaxBatchBytes, 1 MiB) stay inline.
	inlineMax = 4 << 20

	// markerType marks a record whose data is in a side file. raft's own
	// types are small numbers; raft never sees this one.
	markerType raft.LogType = 0xE5

	markerMagic   = "RMQL"
	markerVersion = 1
	markerLen     = len(markerMagic) + 1 + 1 + 8 + 4

	sideMagic  = "RMQLENT1"
	sideHeader = len(sideMagic) + 8 + 8 + 8 + 4
	sideSuffix = ".entry"
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// largeEntries is a log store that keeps entries over inlineMax in side
// files in dir.
type largeEntries struct {
	logStore
	dir string
	max int // inline limit (inlineMax; tests lower it)

	// mu orders appends against truncations: a truncation removes the
	// side files of the entries it removed, never one an append has
	// just written.
	mu sync.Mutex
	// side lists the indexes that have side files, ascending.
	side []uint64
	bad  atomic.Pointer[DataError]

	// recent finds the data of large entries that are still in memory.
	recent recentEntries
}

// recentEntries remembers, without keeping them alive, the data of the
// last large entries appended or read. While raft still holds an entry it
// appended (to apply it and replicate it) or one a follower's append is
// being sent from, a read of the same entry shares those bytes instead of
// reading the file into a new copy: on a leader, every follower's
// replication of a 128 MiB publish would otherwise hold a copy of its
// own. Log data is never written after it is appended.
type recentEntries struct {
	mu    sync.Mutex
	slots [4]recentEntry
	next  int
}

type recentEntry struct {
	index, term uint64
	n           int
	crc         uint32
	p           weak.Pointer[byte]
}

func (r *recentEntries) put(index, term uint64, crc uint32, data []byte) {
	if len(data) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.slots[r.next] = recentEntry{index: index, term: term, n: len(data), crc: crc, p: weak.Make(&data[0])}
	r.next = (r.next + 1) % len(r.slots)
}

func (r *recentEntries) get(index, term, n uint64, crc uint32) []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.slots {
		if e.index == index && e.term == term && uint64(e.n) == n && e.crc == crc {
			if p := e.p.Value(); p != nil {
				return unsafe.Slice(p, e.n)
			}
		}
	}
	return nil
}

// withLargeEntries wraps store, whose files are in dir, and removes the
// side files no entry names.
func withLargeEntries(store logStore, dir string, max int) (*largeEntries, error) {
	s := &largeEntries{logStore: store, dir: dir, max: max}
	if err := s.clean(); err != nil {
		return nil, err
	}
	return s, nil
}

func sideName(index, term uint64) string {
	return fmt.Sprintf("%020d-%016x%s", index, term, sideSuffix)
}

func parseSideName(name string) (index, term uint64, ok bool) {
	if !strings.HasSuffix(name, sideSuffix) {
		return 0, 0, false
	}
	var rest string
	n, err := fmt.Sscanf(name, "%020d-%016x%s", &index, &term, &rest)
	return index, term, err == nil && n == 3 && rest == sideSuffix
}

// clean removes side files (and ones being written) that no marker of
// the log names.
func (s *largeEntries) clean() error {
	des, err := os.ReadDir(s.dir)
	if err != nil {
		return fmt.Errorf("cluster: list %s: %w", s.dir, err)
	}
	first, err := s.logStore.FirstIndex()
	if err != nil {
		return err
	}
	last, err := s.logStore.LastIndex()
	if err != nil {
		return err
	}
	removed := false
	for _, de := range des {
		name := de.Name()
		if strings.HasSuffix(name, sideSuffix+".tmp") {
			if err := os.Remove(filepath.Join(s.dir, name)); err != nil {
				return err
			}
			removed = true
			continue
		}
		index, term, ok := parseSideName(name)
		if !ok {
			continue
		}
		keep := false
		if last != 0 && index >= first && index <= last {
			var l raft.Log
			err := s.logStore.GetLog(index, &l)
			if err != nil && !errors.Is(err, raft.ErrLogNotFound) {
				return err
			}
			keep = err == nil && l.Type == markerType && l.Term == term
		}
		if !keep {
			if err := os.Remove(filepath.Join(s.dir, name)); err != nil {
				return err
			}
			removed = true
			continue
		}
		s.side = append(s.side, index)
	}
	slices.Sort(s.side)
	if removed {
		return syncDir(s.dir)
	}
	return nil
}

func (s *largeEntries) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

func (s *largeEntries) StoreLogs(logs []*raft.Log) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*raft.Log // the logs with markers, made only when needed
	var wrote []uint64
	var crcs []uint32
	for i, l := range logs {
		if len(l.Data) <= s.max {
			if out != nil {
				out[i] = l
			}
			continue
		}
		if out == nil {
			out = make([]*raft.Log, len(logs))
			copy(out, logs[:i])
		}
		crc, err := s.writeSide(l)
		if err != nil {
			return err
		}
		wrote = append(wrote, l.Index)
		crcs = append(crcs, crc)
		m := *l
		m.Type = markerType
		m.Data = marker(l.Type, len(l.Data), crc)
		out[i] = &m
	}
	if out == nil {
		return s.logStore.StoreLogs(logs)
	}
	// The files must be found after a crash that keeps the markers.
	if err := syncDir(s.dir); err != nil {
		return err
	}
	if err := s.logStore.StoreLogs(out); err != nil {
		return err
	}
	k := 0
	for _, l := range logs {
		if len(l.Data) > s.max {
			s.recent.put(l.Index, l.Term, crcs[k], l.Data)
			k++
		}
	}
	for _, index := range wrote {
		if i, found := slices.BinarySearch(s.side, index); !found {
			s.side = slices.Insert(s.side, i, index)
		}
	}
	return nil
}

func marker(typ raft.LogType, n int, crc uint32) []byte {
	b := make([]byte, 0, markerLen)
	b = append(b, markerMagic...)
	b = append(b, markerVersion, byte(typ))
	b = binary.BigEndian.AppendUint64(b, uint64(n))
	return binary.BigEndian.AppendUint32(b, crc)
}

func parseMarker(b []byte) (typ raft.LogType, n uint64, crc uint32, err error) {
	if len(b) != markerLen || string(b[:4]) != markerMagic {
		return 0, 0, 0, errors.New("malformed large-entry marker")
	}
	if b[4] != markerVersion {
		return 0, 0, 0, fmt.Errorf("large-entry marker version %d, this version reads %d: written by a newer version", b[4], markerVersion)
	}
	return raft.LogType(b[5]), binary.BigEndian.Uint64(b[6:14]), binary.BigEndian.Uint32(b[14:18]), nil
}

// writeSide writes l's data to its side file, durably, and returns the
// data's checksum.
func (s *largeEntries) writeSide(l *raft.Log) (uint32, error) {
	crc := checksum(l.Data)
	name := filepath.Join(s.dir, sideName(l.Index, l.Term))
	tmp := name + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return 0, fmt.Errorf("cluster: large log entry %d: %w", l.Index, err)
	}
	hdr := make([]byte, 0, sideHeader)
	hdr = append(hdr, sideMagic...)
	hdr = binary.BigEndian.AppendUint64(hdr, l.Index)
	hdr = binary.BigEndian.AppendUint64(hdr, l.Term)
	hdr = binary.BigEndian.AppendUint64(hdr, uint64(len(l.Data)))
	hdr = binary.BigEndian.AppendUint32(hdr, crc)
	_, err = f.Write(hdr)
	if err == nil {
		_, err = f.Write(l.Data)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, name)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return 0, fmt.Errorf("cluster: large log entry %d: %w", l.Index, err)
	}
	return crc, nil
}

func (s *largeEntries) GetLog(index uint64, l *raft.Log) error {
	for attempt := 0; ; attempt++ {
		if err := s.logStore.GetLog(index, l); err != nil || l.Type != markerType {
			return err
		}
		typ, n, crc, err := parseMarker(l.Data)
		name := filepath.Join(s.dir, sideName(l.Index, l.Term))
		if err == nil {
			if data := s.recent.get(l.Index, l.Term, n, crc); data != nil {
				l.Data, l.Type = data, typ
				return nil
			}
			var data []byte
			data, err = readSide(name, l.Index, l.Term, n, crc)
			if err == nil {
				s.recent.put(l.Index, l.Term, crc, data)
				l.Data, l.Type = data, typ
				return nil
			}
		}
		if errors.Is(err, os.ErrNotExist) {
			// A truncation of the head removed the entry's file. raft-wal
			// still reads an entry below its first index while the entry
			// is in the open segment, so ask the log where it starts: raft
			// then sends the snapshot instead.
			if first, ferr := s.logStore.FirstIndex(); ferr == nil && index < first {
				return raft.ErrLogNotFound
			}
			if attempt == 0 {
				// A truncation of the tail removed the entry after its
				// marker was read: read again (it may be gone, or
				// another entry now).
				continue
			}
		}
		de := &DataError{Path: name, Err: fmt.Errorf("log entry %d: %w", index, err)}
		s.bad.Store(de)
		return de
	}
}

// readSide reads the data of entry (index, term) from its side file with
// one allocation, checking it against what the marker says.
func readSide(name string, index, term, n uint64, crc uint32) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var hdr [sideHeader]byte
	if _, err := io.ReadFull(f, hdr[:]); err != nil {
		return nil, fmt.Errorf("side file header: %w", err)
	}
	b := hdr[len(sideMagic):]
	if string(hdr[:len(sideMagic)]) != sideMagic || binary.BigEndian.Uint64(b) != index ||
		binary.BigEndian.Uint64(b[8:]) != term || binary.BigEndian.Uint64(b[16:]) != n ||
		binary.BigEndian.Uint32(b[24:]) != crc {
		return nil, errors.New("side file header does not match the log's marker")
	}
	if st, err := f.Stat(); err != nil || uint64(st.Size()) != uint64(sideHeader)+n {
		return nil, errors.New("side file length does not match the log's marker")
	}
	data := make([]byte, n)
	if _, err := io.ReadFull(f, data); err != nil {
		return nil, fmt.Errorf("side file: %w", err)
	}
	if checksum(data) != crc {
		return nil, errors.New("side file checksum mismatch")
	}
	return data, nil
}

func (s *largeEntries) DeleteRange(min, max uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.logStore.DeleteRange(min, max); err != nil {
		return err
	}
	lo, _ := slices.BinarySearch(s.side, min)
	hi := lo
	for hi < len(s.side) && s.side[hi] <= max {
		hi++
	}
	if lo == hi {
		return nil
	}
	des, err := os.ReadDir(s.dir)
	if err != nil {
		return err
	}
	for _, de := range des {
		if index, _, ok := parseSideName(de.Name()); ok && index >= min && index <= max {
			// Left behind, the next open removes it.
			_ = os.Remove(filepath.Join(s.dir, de.Name()))
		}
	}
	s.side = slices.Delete(s.side, lo, hi)
	return nil
}

// IsMonotonic passes on raft.MonotonicLogStore.
func (s *largeEntries) IsMonotonic() bool {
	m, ok := s.logStore.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}

func (s *largeEntries) damage() *DataError {
	if de := s.bad.Load(); de != nil {
		return de
	}
	return s.logStore.damage()
}

// checksum is the CRC-32C of b, a MiB at a time: the checksum's assembly
// loop cannot be preempted, and a garbage collection that must stop the
// world would wait for it to get through hundreds of MiB, holding every
// other goroutine of the process (heartbeats included).
func checksum(b []byte) uint32 {
	var crc uint32
	for len(b) > 0 {
		n := min(len(b), 1<<20)
		crc = crc32.Update(crc, crcTable, b[:n])
		b = b[n:]
	}
	return crc
}

// syncDir makes the names in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
