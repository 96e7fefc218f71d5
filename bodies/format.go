package bodies

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"sort"
)

// A body file (DESIGN.md, "File format"):
//
//	header   "RMQBODY1"
//	records  key.Index u64 | key.Pos u32 | len u32 | crc u32 | body, ascending by key
//	index    key.Index u64 | key.Pos u32 | record offset u32, one per record
//	replaces file seq u64, one per file this one replaces
//	trailer  records u64 | index offset u64 | replaces u32 | index crc u32 | trailer crc u32 | "RMQBEND1"
//
// Integers are little-endian; crcs are CRC-32C. A record's crc covers its
// key, length and body; the index crc covers index and replaces; the
// trailer crc the trailer's first 28 bytes. Open reads trailer and index,
// never a record.
const (
	fileMagic    = "RMQBODY1"
	trailerMagic = "RMQBEND1"
	headerSize   = len(fileMagic)
	recHeader    = 20
	indexEntry   = 16
	trailerSize  = 8 + 8 + 4 + 4 + 4 + len(trailerMagic)
	// maxOffset bounds a file: record offsets are 32 bits in memory.
	maxOffset = math.MaxUint32
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrCorrupt is a body file or a body stream whose bytes fail their
// checks. The error wrapping it (a *CorruptError for a file) names the
// file and, when it is one record, the key.
var ErrCorrupt = errors.New("bodies: damaged data")

// CorruptError is a damaged body file.
type CorruptError struct {
	Path string
	Key  *Key // the record, when one record is damaged
	Err  error
}

func (e *CorruptError) Error() string {
	if e.Key != nil {
		return fmt.Sprintf("bodies: body file %s is damaged at key %v: %v", e.Path, *e.Key, e.Err)
	}
	return fmt.Sprintf("bodies: body file %s is damaged: %v", e.Path, e.Err)
}

func (e *CorruptError) Unwrap() error { return e.Err }

func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

// file is one body file, open for reading. Everything but obsolete is set
// at open and never changes.
type file struct {
	seq  uint64
	path string
	f    handle
	size int64
	// end is the offset of the index: the end of the last record.
	end uint32
	// The index, as columns: 16 bytes per body.
	idx []uint64
	pos []uint32
	off []uint32
	// replaces are the files this one was written to replace.
	replaces []uint64
	// bodyBytes is the sum of the bodies' lengths.
	bodyBytes int64
	// obsolete is a file whose live bodies are elsewhere, deleted once no
	// hold is left (Store.mu).
	obsolete bool
}

// handle is an open file: an *os.File, or bytes in tests.
type handle interface {
	io.ReaderAt
	io.Closer
}

func (f *file) key(i int) Key { return Key{Index: f.idx[i], Pos: f.pos[i]} }

func (f *file) minKey() Key { return f.key(0) }
func (f *file) maxKey() Key { return f.key(len(f.idx) - 1) }

// find is the record of k.
func (f *file) find(k Key) (int, bool) {
	n := len(f.idx)
	if n == 0 || k.Less(f.minKey()) || f.maxKey().Less(k) {
		return 0, false
	}
	i := sort.Search(n, func(i int) bool { return !f.key(i).Less(k) })
	return i, i < n && f.key(i) == k
}

// recLen is the length of record i, header included.
func (f *file) recLen(i int) uint32 {
	next := f.end
	if i+1 < len(f.off) {
		next = f.off[i+1]
	}
	return next - f.off[i]
}

func (f *file) bodyLen(i int) int64 { return int64(f.recLen(i)) - recHeader }

// readRecord reads record i whole and checks it; the body is rec[recHeader:].
func (f *file) readRecord(i int) ([]byte, error) {
	k := f.key(i)
	rec := make([]byte, f.recLen(i))
	if _, err := f.f.ReadAt(rec, int64(f.off[i])); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &CorruptError{Path: f.path, Key: &k, Err: fmt.Errorf("record cut short: %w", err)}
		}
		return nil, fmt.Errorf("bodies: read %s at key %v: %w", f.path, k, err)
	}
	if err := checkRecord(rec, k); err != nil {
		return nil, &CorruptError{Path: f.path, Key: &k, Err: err}
	}
	return rec, nil
}

func (f *file) read(i int) ([]byte, error) {
	rec, err := f.readRecord(i)
	if err != nil {
		return nil, err
	}
	return rec[recHeader:], nil
}

// putRecHeader writes the header of a record of k with a body of n bytes
// and checksum crc.
func putRecHeader(h []byte, k Key, n uint32, crc uint32) {
	binary.LittleEndian.PutUint64(h[0:], k.Index)
	binary.LittleEndian.PutUint32(h[8:], k.Pos)
	binary.LittleEndian.PutUint32(h[12:], n)
	binary.LittleEndian.PutUint32(h[16:], crc)
}

// recCRC is the checksum of a record: its key and length (the first 16
// bytes of its header) and its body.
func recCRC(h []byte, body []byte) uint32 {
	return crc32.Update(crcOfHeader(h), castagnoli, body)
}

// crcOfHeader is a record checksum before its body.
func crcOfHeader(h []byte) uint32 { return crc32.Checksum(h[:16], castagnoli) }

// parseRecHeader reads a record header.
func parseRecHeader(h []byte) (k Key, n uint32, crc uint32) {
	return Key{Index: binary.LittleEndian.Uint64(h[0:]), Pos: binary.LittleEndian.Uint32(h[8:])},
		binary.LittleEndian.Uint32(h[12:]), binary.LittleEndian.Uint32(h[16:])
}

// checkRecord checks a whole record read for key want.
func checkRecord(rec []byte, want Key) error {
	if len(rec) < recHeader {
		return errors.New("record shorter than its header")
	}
	k, n, crc := parseRecHeader(rec)
	switch {
	case k != want:
		return fmt.Errorf("the record holds key %v", k)
	case int64(n) != int64(len(rec)-recHeader):
		return fmt.Errorf("the record says %d bytes, the index %d", n, len(rec)-recHeader)
	case recCRC(rec, rec[recHeader:]) != crc:
		return errors.New("record checksum mismatch")
	}
	return nil
}

// openFile opens a body file and reads its index.
func openFile(path string, seq uint64) (_ *file, err error) {
	fd, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("bodies: %w", err)
	}
	defer func() {
		if err != nil {
			_ = fd.Close()
		}
	}()
	st, err := fd.Stat()
	if err != nil {
		return nil, fmt.Errorf("bodies: %w", err)
	}
	f, err := readFooter(fd, path, st.Size())
	if err != nil {
		return nil, err
	}
	f.seq = seq
	return f, nil
}

// readFooter reads and checks the header, trailer and index of a body
// file of size bytes. Every length is checked against the file before it
// is used, so no content makes it allocate more than the file holds or
// index out of range.
func readFooter(r handle, path string, size int64) (*file, error) {
	corrupt := func(format string, args ...any) error {
		return &CorruptError{Path: path, Err: fmt.Errorf(format, args...)}
	}
	readAt := func(b []byte, off int64) error {
		if _, err := r.ReadAt(b, off); err != nil {
			if errors.Is(err, io.EOF) {
				return corrupt("cut short: %v", err)
			}
			return fmt.Errorf("bodies: read %s: %w", path, err)
		}
		return nil
	}
	if size < int64(headerSize+trailerSize) {
		return nil, corrupt("%d bytes is too short for a body file (torn write?)", size)
	}
	head := make([]byte, headerSize)
	if err := readAt(head, 0); err != nil {
		return nil, err
	}
	if string(head) != fileMagic {
		return nil, corrupt("no body file header")
	}
	tr := make([]byte, trailerSize)
	if err := readAt(tr, size-int64(trailerSize)); err != nil {
		return nil, err
	}
	if string(tr[28:]) != trailerMagic {
		return nil, corrupt("no trailer (torn write?)")
	}
	if crc32.Checksum(tr[:24], castagnoli) != binary.LittleEndian.Uint32(tr[24:]) {
		return nil, corrupt("trailer checksum mismatch")
	}
	count := binary.LittleEndian.Uint64(tr[0:])
	indexOff := binary.LittleEndian.Uint64(tr[8:])
	nrep := uint64(binary.LittleEndian.Uint32(tr[16:]))
	indexCRC := binary.LittleEndian.Uint32(tr[20:])
	footer := uint64(size) - uint64(trailerSize)
	if indexOff < uint64(headerSize) || indexOff > maxOffset || indexOff > footer ||
		count > (footer-indexOff)/indexEntry || (footer-indexOff)-count*indexEntry != nrep*8 {
		return nil, corrupt("trailer says %d records at %d and %d replaced files, which do not fit %d bytes", count, indexOff, nrep, size)
	}
	index := make([]byte, footer-indexOff)
	if err := readAt(index, int64(indexOff)); err != nil {
		return nil, err
	}
	if crc32.Checksum(index, castagnoli) != indexCRC {
		return nil, corrupt("index checksum mismatch")
	}
	f := &file{
		f:    r,
		path: path,
		size: size,
		end:  uint32(indexOff),
		idx:  make([]uint64, count),
		pos:  make([]uint32, count),
		off:  make([]uint32, count),
	}
	for i := range f.idx {
		e := index[i*indexEntry:]
		f.idx[i] = binary.LittleEndian.Uint64(e[0:])
		f.pos[i] = binary.LittleEndian.Uint32(e[8:])
		f.off[i] = binary.LittleEndian.Uint32(e[12:])
		if i > 0 && !f.key(i-1).Less(f.key(i)) {
			return nil, corrupt("index keys out of order at %v", f.key(i))
		}
	}
	// Records lie end to end from the header to the index; a record's
	// length is the distance to the next one (recLen), at least a header.
	if count > 0 && f.off[0] != uint32(headerSize) {
		return nil, corrupt("the first record is at %d, not %d", f.off[0], headerSize)
	}
	for i := range f.off {
		next := f.end
		if i+1 < len(f.off) {
			next = f.off[i+1]
		}
		if next < f.off[i] || next-f.off[i] < recHeader {
			return nil, corrupt("record %v is shorter than its header", f.key(i))
		}
		f.bodyBytes += int64(next-f.off[i]) - recHeader
	}
	if count == 0 && f.end != uint32(headerSize) {
		return nil, corrupt("no records but %d bytes of them", f.end-uint32(headerSize))
	}
	rep := index[count*indexEntry:]
	for len(rep) > 0 {
		f.replaces = append(f.replaces, binary.LittleEndian.Uint64(rep))
		rep = rep[8:]
	}
	return f, nil
}

// appendFooter appends the index, replaces and trailer of the records of
// f (whose columns and end are set) to b.
func appendFooter(b []byte, f *file) []byte {
	start := len(b)
	for i := range f.idx {
		b = binary.LittleEndian.AppendUint64(b, f.idx[i])
		b = binary.LittleEndian.AppendUint32(b, f.pos[i])
		b = binary.LittleEndian.AppendUint32(b, f.off[i])
	}
	for _, r := range f.replaces {
		b = binary.LittleEndian.AppendUint64(b, r)
	}
	crc := crc32.Checksum(b[start:], castagnoli)
	tr := len(b)
	b = binary.LittleEndian.AppendUint64(b, uint64(len(f.idx)))
	b = binary.LittleEndian.AppendUint64(b, uint64(f.end))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(f.replaces)))
	b = binary.LittleEndian.AppendUint32(b, crc)
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(b[tr:], castagnoli))
	return append(b, trailerMagic...)
}
