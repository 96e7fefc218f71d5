package bodies

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// relocatedStore is a store whose only file holds every body of keys,
// and whose log no longer has them.
func relocatedStore(t *testing.T) (*testLog, *Store, []Key, string) {
	l := inmemLog(t)
	keys := l.entries(20, 3, 400)
	dir := t.TempDir()
	s := openStore(t, dir, l, Options{})
	retain(t, s, l.live(keys), l.last)
	l.truncate(s, l.last)
	names := dirFiles(t, dir)
	if len(names) != 1 {
		t.Fatalf("files %v", names)
	}
	return l, s, keys, filepath.Join(dir, names[0])
}

func patch(t *testing.T, path string, fn func([]byte) []byte) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, fn(b), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestCorrupt_ARecordNamesFileAndKey(t *testing.T) {
	l, s, keys, path := relocatedStore(t)
	victim := keys[7]
	off := int64(s.files[0].off[7]) + recHeader + 100
	fd, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fd.WriteAt([]byte{0xee}, off); err != nil {
		t.Fatal(err)
	}
	_ = fd.Close()
	_, err = s.Get(victim)
	var ce *CorruptError
	if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) || ce.Key == nil || *ce.Key != victim ||
		!strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), victim.String()) {
		t.Fatalf("Get of a damaged record: %v", err)
	}
	l.check(s, keys[8:]) // the others still read
	if err := s.WriteBodies(io.Discard, keys); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("WriteBodies over a damaged record: %v", err)
	}
	// A rewrite must not copy it on.
	err = s.Retain(l.live(keys[:8]), l.last)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), victim.String()) {
		t.Fatalf("Retain rewriting a damaged record: %v", err)
	}
	if n := len(dirFiles(t, s.dir)); n != 1 {
		t.Fatalf("%d files after a failed rewrite", n)
	}
}

func TestCorrupt_OpenNamesTheFile(t *testing.T) {
	for name, damage := range map[string]func([]byte) []byte{
		"torn by one byte": func(b []byte) []byte { return b[:len(b)-1] },
		"torn in half":     func(b []byte) []byte { return b[:len(b)/2] },
		"empty":            func([]byte) []byte { return nil },
		"index byte":       func(b []byte) []byte { b[len(b)-trailerSize-3] ^= 1; return b },
		"trailer byte":     func(b []byte) []byte { b[len(b)-trailerSize+9] ^= 1; return b },
		"header":           func(b []byte) []byte { b[0] = 'X'; return b },
		"grown":            func(b []byte) []byte { return append(b, 0) },
	} {
		t.Run(name, func(t *testing.T) {
			l, s, _, path := relocatedStore(t)
			_ = s.Close()
			patch(t, path, damage)
			_, err := Open(s.dir, l.logs, Options{})
			var ce *CorruptError
			if !errors.As(err, &ce) || ce.Path != path || !strings.Contains(err.Error(), path) {
				t.Fatalf("Open: %v, want a CorruptError naming %s", err, path)
			}
		})
	}
}

// nopCloser serves a file's bytes from memory.
type nopCloser struct{ *bytes.Reader }

func (nopCloser) Close() error { return nil }

func FuzzReadFooter(f *testing.F) {
	l := inmemLog(f)
	keys := l.entries(5, 2, 30)
	dir := f.TempDir()
	s, err := Open(dir, l.logs, Options{})
	if err != nil {
		f.Fatal(err)
	}
	if err := s.Retain(l.live(keys), l.last); err != nil {
		f.Fatal(err)
	}
	_ = s.Close()
	for _, name := range dirFiles(f, dir) {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(fileMagic))
	f.Fuzz(func(t *testing.T, data []byte) {
		// Half the inputs get right checksums, so that the checks
		// behind them are explored too.
		if len(data) > 0 && data[len(data)-1]&1 == 1 {
			data = fixChecksums(data)
		}
		fl, err := readFooter(nopCloser{bytes.NewReader(data)}, "fuzz", int64(len(data)))
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("not ErrCorrupt: %v", err)
			}
			return
		}
		for i := range fl.idx {
			if fixRecord(data, fl, i) {
				fl.f = nopCloser{bytes.NewReader(data)}
			}
			b, err := fl.read(i)
			if err != nil && !errors.Is(err, ErrCorrupt) {
				t.Fatalf("record %d: not ErrCorrupt: %v", i, err)
			}
			if err == nil && int64(len(b)) != fl.bodyLen(i) {
				t.Fatalf("record %d: %d bytes, the index says %d", i, len(b), fl.bodyLen(i))
			}
		}
	})
}

// fixChecksums sets the index and trailer checksums of a would-be body
// file to what its content says.
func fixChecksums(data []byte) []byte {
	data = bytes.Clone(data)
	if len(data) < headerSize+trailerSize {
		return data
	}
	tr := data[len(data)-trailerSize:]
	footer := uint64(len(data) - trailerSize)
	if off := binary.LittleEndian.Uint64(tr[8:]); off <= footer {
		binary.LittleEndian.PutUint32(tr[20:], crc32.Checksum(data[off:footer], castagnoli))
	}
	binary.LittleEndian.PutUint32(tr[24:], crc32.Checksum(tr[:24], castagnoli))
	return data
}

// fixRecord sets the checksum of record i to what its bytes say, when it
// has a header.
func fixRecord(data []byte, fl *file, i int) bool {
	off, n := int(fl.off[i]), int(fl.recLen(i))
	if n < recHeader || off+n > len(data) {
		return false
	}
	rec := data[off : off+n]
	binary.LittleEndian.PutUint32(rec[16:], recCRC(rec, rec[recHeader:]))
	return true
}
