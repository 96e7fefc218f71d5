package bodies

import (
	"bufio"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

const (
	fileSuffix = ".body"
	tmpSuffix  = ".tmp"
)

func fileName(seq uint64) string { return fmt.Sprintf("%016x%s", seq, fileSuffix) }

// parseFileName is the seq of a body file's name.
func parseFileName(name string) (uint64, bool) {
	hex, ok := strings.CutSuffix(name, fileSuffix)
	if !ok || len(hex) != 16 {
		return 0, false
	}
	seq, err := strconv.ParseUint(hex, 16, 64)
	return seq, err == nil
}

// writer writes one body file under a temporary name; keys must come in
// ascending order.
type writer struct {
	f   *file // the columns so far; f.f is fd
	fd  *os.File
	tmp string
	bw  *bufio.Writer
	off int64
}

// newWriter creates the next body file of the store (maint held).
func (s *Store) newWriter() (*writer, error) {
	seq := s.nextSeq
	s.nextSeq++
	path := filepath.Join(s.dir, fileName(seq))
	tmp := path + tmpSuffix
	fd, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, fmt.Errorf("bodies: %w", err)
	}
	w := &writer{f: &file{seq: seq, path: path, f: fd}, fd: fd, tmp: tmp, bw: bufio.NewWriterSize(fd, 256<<10)}
	_, _ = w.bw.WriteString(fileMagic)
	w.off = int64(headerSize)
	return w, nil
}

// fits says whether a body of n bytes still fits the file's 32-bit offsets.
func (w *writer) fits(n int64) bool { return w.off+recHeader+n <= maxOffset }

func (w *writer) begin(k Key, n int64) error {
	if c := len(w.f.idx); c > 0 && !w.f.key(c-1).Less(k) {
		return fmt.Errorf("bodies: key %v after %v: keys must ascend", k, w.f.key(c-1))
	}
	if !w.fits(n) {
		return fmt.Errorf("bodies: a body of %d bytes does not fit a body file", n)
	}
	w.f.idx = append(w.f.idx, k.Index)
	w.f.pos = append(w.f.pos, k.Pos)
	w.f.off = append(w.f.off, uint32(w.off))
	w.f.bodyBytes += n
	w.off += recHeader + n
	return nil
}

// add appends the body of k.
func (w *writer) add(k Key, body []byte) error {
	if err := w.begin(k, int64(len(body))); err != nil {
		return err
	}
	var h [recHeader]byte
	putRecHeader(h[:], k, uint32(len(body)), 0)
	putRecHeader(h[:], k, uint32(len(body)), recCRC(h[:], body))
	_, _ = w.bw.Write(h[:])
	_, err := w.bw.Write(body)
	return err
}

// addRecord appends a record already checked (file.readRecord).
func (w *writer) addRecord(rec []byte) error {
	k, _, _ := parseRecHeader(rec)
	if err := w.begin(k, int64(len(rec)-recHeader)); err != nil {
		return err
	}
	_, err := w.bw.Write(rec)
	return err
}

// addFrom appends the body of k, n bytes read from r, whose checksum
// must be crc: the body goes to the file as it is read, never whole in
// memory.
func (w *writer) addFrom(k Key, n uint32, crc uint32, r io.Reader) error {
	if err := w.begin(k, int64(n)); err != nil {
		return err
	}
	var h [recHeader]byte
	putRecHeader(h[:], k, n, crc)
	_, _ = w.bw.Write(h[:])
	sum := crcWriter{crc: crcOfHeader(h[:])}
	if _, err := io.CopyN(io.MultiWriter(w.bw, &sum), r, int64(n)); err != nil {
		return fmt.Errorf("bodies: read the body of %v: %w", k, unexpectedEOF(err))
	}
	if sum.crc != crc {
		return fmt.Errorf("%w: the body of %v fails its checksum", ErrCorrupt, k)
	}
	return nil
}

type crcWriter struct{ crc uint32 }

func (c *crcWriter) Write(b []byte) (int, error) {
	c.crc = crc32.Update(c.crc, castagnoli, b)
	return len(b), nil
}

// finish writes the footer and makes the temporary file durable.
func (w *writer) finish(replaces []uint64) error {
	w.f.end = uint32(w.off)
	w.f.replaces = replaces
	footer := appendFooter(nil, w.f)
	_, _ = w.bw.Write(footer)
	if err := w.bw.Flush(); err != nil {
		return fmt.Errorf("bodies: write %s: %w", w.tmp, err)
	}
	if err := w.fd.Sync(); err != nil {
		return fmt.Errorf("bodies: sync %s: %w", w.tmp, err)
	}
	w.f.size = w.off + int64(len(footer))
	// The columns stay in memory as long as the file: no spare capacity.
	w.f.idx, w.f.pos, w.f.off = slices.Clip(slices.Clone(w.f.idx)), slices.Clip(slices.Clone(w.f.pos)), slices.Clip(slices.Clone(w.f.off))
	return nil
}

func (w *writer) abort() {
	_ = w.fd.Close()
	_ = os.Remove(w.tmp)
}

// batch writes records across as many files as the target size asks.
type batch struct {
	s    *Store
	done []*writer // finished and durable, not yet renamed
	cur  *writer
}

// writer is the file the next body of n bytes goes to.
func (b *batch) writer(n int64) (*writer, error) {
	if b.cur != nil && (b.cur.off >= b.s.opts.TargetFileSize || !b.cur.fits(n)) && len(b.cur.f.idx) > 0 {
		if err := b.cur.finish(nil); err != nil {
			return nil, err
		}
		b.done = append(b.done, b.cur)
		b.cur = nil
	}
	if b.cur == nil {
		w, err := b.s.newWriter()
		if err != nil {
			return nil, err
		}
		b.cur = w
	}
	return b.cur, nil
}

func (b *batch) add(k Key, body []byte) error {
	w, err := b.writer(int64(len(body)))
	if err != nil {
		return err
	}
	return w.add(k, body)
}

func (b *batch) addRecord(rec []byte) error {
	w, err := b.writer(int64(len(rec) - recHeader))
	if err != nil {
		return err
	}
	return w.addRecord(rec)
}

func (b *batch) addFrom(k Key, n uint32, crc uint32, r io.Reader) error {
	w, err := b.writer(int64(n))
	if err != nil {
		return err
	}
	return w.addFrom(k, n, crc, r)
}

// commit makes the batch's files durable under their names. The last
// file renamed carries replaces, the files the batch replaces: Open
// deletes those once it finds it, so its rename is the instant the
// replacement happens, and every other file of the batch is durably
// renamed before it.
func (b *batch) commit(replaces []uint64) ([]*file, error) {
	if b.cur != nil {
		if len(b.cur.f.idx) == 0 {
			b.cur.abort()
		} else {
			if err := b.cur.finish(replaces); err != nil {
				b.abort()
				return nil, err
			}
			b.done = append(b.done, b.cur)
		}
		b.cur = nil
	}
	ws := b.done
	if len(ws) == 0 {
		return nil, nil
	}
	rename := func(ws []*writer) error {
		for _, w := range ws {
			if err := os.Rename(w.tmp, w.f.path); err != nil {
				return fmt.Errorf("bodies: %w", err)
			}
		}
		return syncDir(b.s.dir)
	}
	last := len(ws) - 1
	if len(ws[last].f.replaces) > 0 && last > 0 {
		if err := rename(ws[:last]); err != nil {
			b.abort()
			return nil, err
		}
		ws = ws[last:]
	}
	if err := rename(ws); err != nil {
		b.abort()
		return nil, err
	}
	files := make([]*file, len(b.done))
	for i, w := range b.done {
		files[i] = w.f
	}
	b.done = nil
	return files, nil
}

// abort removes the batch's temporary files (and any it renamed: their
// bodies are also where they were read from).
func (b *batch) abort() {
	if b.cur != nil {
		b.cur.abort()
		b.cur = nil
	}
	for _, w := range b.done {
		w.abort()
		_ = os.Remove(w.f.path)
	}
	b.done = nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("bodies: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("bodies: sync %s: %w", dir, err)
	}
	return nil
}

// unexpectedEOF is err, an end of input in the middle of a body.
func unexpectedEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
