package bodies

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/hashicorp/raft"
)

func logKinds(t *testing.T) map[string]func() *testLog {
	return map[string]func() *testLog{
		"inmem": func() *testLog { return inmemLog(t) },
		"wal":   func() *testLog { return walLog(t, t.TempDir()) },
	}
}

func TestGet_FromLogReadsABatchEntryOnce(t *testing.T) {
	for name, mk := range logKinds(t) {
		t.Run(name, func(t *testing.T) {
			l := mk()
			keys := l.batch(50, 300)
			s := openStore(t, t.TempDir(), l, Options{})
			l.check(s, keys)
			st := s.Stats()
			if st.LogReads != 1 || st.CacheHits != int64(2*len(keys)-1) {
				t.Errorf("log reads %d, cache hits %d: want the entry read once for %d Gets and Has", st.LogReads, st.CacheHits, 2*len(keys))
			}
			// A command that is not a Publish, a position past the
			// last, an entry not in the log.
			if _, err := s.Get(Key{Index: 1, Pos: 0}); !errors.Is(err, ErrMissing) || !strings.Contains(err.Error(), "1/0") || !strings.Contains(err.Error(), "settle") {
				t.Errorf("Get of a Settle: %v", err)
			}
			if _, err := s.Get(Key{Index: 1, Pos: 100}); !errors.Is(err, ErrMissing) || !strings.Contains(err.Error(), "1/100") {
				t.Errorf("Get past the last command: %v", err)
			}
			_, err := s.Get(Key{Index: 2, Pos: 1})
			if !errors.Is(err, ErrMissing) || !strings.Contains(err.Error(), "2/1") {
				t.Errorf("Get of an entry not in the log: %v, want ErrMissing naming 2/1", err)
			}
		})
	}
}

func TestGet_CacheIsBounded(t *testing.T) {
	l := inmemLog(t)
	keys := l.entries(10, 2, 1000)
	s := openStore(t, t.TempDir(), l, Options{CacheEntries: 3})
	l.check(s, keys)
	l.check(s, keys[:2])
	if st := s.Stats(); st.LogReads != 11 {
		t.Errorf("%d log reads: want each of 10 entries once and the first again after 9 others", st.LogReads)
	}
}

func TestRetain_RelocatesOnlyLiveBodiesOfTheTruncatedPrefix(t *testing.T) {
	for name, mk := range logKinds(t) {
		t.Run(name, func(t *testing.T) {
			l := mk()
			keys := l.entries(100, 3, 200)
			dir := t.TempDir()
			s := openStore(t, dir, l, Options{})
			if s.Pin() != 0 {
				t.Fatalf("pin %d before any Retain, want 0", s.Pin())
			}
			live := every(keys, 3)
			below, above := upTo(live, 60)
			retain(t, s, l.live(live), 60)
			if s.Pin() != 61 {
				t.Fatalf("pin %d, want 61", s.Pin())
			}
			st := s.Stats()
			if st.RelocatedBodies != int64(len(below)) || st.FileBodies != int64(len(below)) {
				t.Fatalf("relocated %d, %d in files: want only the %d live bodies up to 60", st.RelocatedBodies, st.FileBodies, len(below))
			}
			l.truncate(s, 60)
			l.check(s, live)
			if name == "inmem" {
				// raft-wal still serves entries of its tail segment
				// below its first index: only the in-memory store
				// shows that the dead bodies were not kept.
				dead, _ := upTo(keys, 60)
				checkMissing(t, s, slices.DeleteFunc(dead, func(k Key) bool { return slices.Contains(below, k) })[:5]...)
			}
			if reads := s.Stats().FileReads; reads < int64(len(below)) {
				t.Errorf("%d file reads: the relocated bodies were not read from their file", reads)
			}

			// The next snapshot: what was copied is not copied again,
			// the newly truncated live bodies are.
			before := s.Stats().RelocatedBodies
			b2, _ := upTo(above, 90)
			retain(t, s, l.live(live), 90)
			if got := s.Stats().RelocatedBodies - before; got != int64(len(b2)) {
				t.Fatalf("second Retain relocated %d, want %d", got, len(b2))
			}
			l.truncate(s, 90)
			l.check(s, live)
		})
	}
}

func TestRetain_ABodyConsumedSoonIsNeverCopied(t *testing.T) {
	l := inmemLog(t)
	keys := l.entries(50, 2, 100)
	s := openStore(t, t.TempDir(), l, Options{})
	// Everything up to 40 was consumed before its entry fell behind
	// the trailing logs; only the newer ones are live.
	_, live := upTo(keys, 40)
	retain(t, s, l.live(live), 40)
	if st := s.Stats(); st.RelocatedBytes != 0 || st.Files != 0 || s.Pin() != 41 {
		t.Fatalf("relocated %d bytes into %d files, pin %d: want nothing copied and pin 41", st.RelocatedBytes, st.Files, s.Pin())
	}
	if names := dirFiles(t, s.dir); len(names) != 0 {
		t.Fatalf("files %v", names)
	}
}

func TestRetain_AStuckMessageDoesNotPinTheLog(t *testing.T) {
	l := inmemLog(t)
	stuck := l.batch(1, 500)
	s := openStore(t, t.TempDir(), l, Options{})
	for round := range 20 {
		l.entries(10, 1, 100)
		to := l.last - 5
		retain(t, s, l.live(stuck), to)
		if s.Pin() != to+1 {
			t.Fatalf("round %d: pin %d, want %d", round, s.Pin(), to+1)
		}
		l.truncate(s, to)
		l.check(s, stuck)
	}
	if st := s.Stats(); st.RelocatedBodies != 1 || st.Files != 1 {
		t.Fatalf("relocated %d times into %d files: want once", st.RelocatedBodies, st.Files)
	}
}

func TestRetain_ReclaimsFiles(t *testing.T) {
	l := inmemLog(t)
	keys := l.entries(400, 5, 100) // 2000 bodies, ~240 KB in files
	dir := t.TempDir()
	s := openStore(t, dir, l, Options{TargetFileSize: 16 << 10})
	retain(t, s, l.live(keys), l.last)
	l.truncate(s, l.last)
	full := s.Stats()
	if full.Files < 10 || full.FileBodies != int64(len(keys)) {
		t.Fatalf("%d files, %d bodies: want the 2000 bodies split across files of 16 KiB", full.Files, full.FileBodies)
	}

	// Half of the first files' bodies consumed (above the rewrite share):
	// nothing is copied. The last ones all consumed: those files go.
	var live []Key
	for i, k := range keys {
		if i < 1000 && i%2 == 0 {
			live = append(live, k)
		}
	}
	retain(t, s, l.live(live), l.last)
	st := s.Stats()
	// Only the file across the boundary, with few live, is rewritten.
	if st.RewrittenBodies > 100 || st.DeletedFiles == 0 || st.FileBytes >= full.FileBytes*2/3 {
		t.Fatalf("after half of the first half: rewritten %d, deleted %d files, %d of %d bytes", st.RewrittenBodies, st.DeletedFiles, st.FileBytes, full.FileBytes)
	}
	l.check(s, live)

	// One in ten of those left: their files are rewritten.
	live = every(live, 10)
	rewritten := st.RewrittenBodies
	retain(t, s, l.live(live), l.last)
	st = s.Stats()
	if st.RewrittenBodies-rewritten != int64(len(live)) || st.FileBodies != int64(len(live)) {
		t.Fatalf("rewrote %d, %d in files: want exactly the %d live ones", st.RewrittenBodies, st.FileBodies, len(live))
	}
	if st.FileBytes > int64(len(live))*200+4096 {
		t.Fatalf("%d bytes in files for %d live bodies of 100 bytes", st.FileBytes, len(live))
	}
	l.check(s, live)

	// Nothing live: no file left.
	retain(t, s, nil, l.last)
	if names := dirFiles(t, dir); len(names) != 0 || s.Stats().Files != 0 {
		t.Fatalf("nothing live, files left: %v", names)
	}
}

func TestRetain_RewriteShareThreshold(t *testing.T) {
	l := inmemLog(t)
	keys := l.entries(100, 1, 1000)
	s := openStore(t, t.TempDir(), l, Options{})
	retain(t, s, l.live(keys), l.last)
	l.truncate(s, l.last)
	retain(t, s, l.live(keys[:30]), l.last) // 30% live: kept as it is
	if st := s.Stats(); st.RewrittenBodies != 0 || st.Files != 1 {
		t.Fatalf("30%% live: rewrote %d, %d files", st.RewrittenBodies, st.Files)
	}
	retain(t, s, l.live(keys[:20]), l.last) // 20% live: rewritten
	if st := s.Stats(); st.RewrittenBodies != 20 || st.Files != 1 || st.FileBodies != 20 {
		t.Fatalf("20%% live: rewrote %d, %d files of %d bodies", st.RewrittenBodies, st.Files, st.FileBodies)
	}
	l.check(s, keys[:20])
}

func TestRetain_MergesSmallFiles(t *testing.T) {
	l := inmemLog(t)
	s := openStore(t, t.TempDir(), l, Options{MaxSmallFiles: 3, SmallFileSize: 1 << 20})
	var stuck []Key
	for range 200 {
		stuck = append(stuck, l.batch(1, 1000)...)
		l.entries(3, 1, 100)
		retain(t, s, l.live(stuck), l.last)
		l.truncate(s, l.last)
		if n := s.Stats().Files; n > 4*3 {
			t.Fatalf("%d files for %d stuck bodies", n, len(stuck))
		}
	}
	l.check(s, stuck)
	// Merging by size tier copies a body a few times, not at every
	// merge (which would be some 6700 copies here).
	if st := s.Stats(); st.RewrittenBodies > int64(8*len(stuck)) {
		t.Fatalf("%d bodies rewritten to keep %d in few files", st.RewrittenBodies, len(stuck))
	}
}

func TestRetain_RefusesABodyOfTheWrongSize(t *testing.T) {
	l := inmemLog(t)
	keys := l.entries(3, 1, 100)
	s := openStore(t, t.TempDir(), l, Options{})
	live := l.live(keys)
	live[1].Size = 99
	err := s.Retain(live, 3)
	if err == nil || !strings.Contains(err.Error(), keys[1].String()) {
		t.Fatalf("Retain with a wrong size: %v", err)
	}
	if s.Pin() != 0 || s.Stats().Files != 0 || len(dirFiles(t, s.dir)) != 0 {
		t.Fatalf("pin %d, files %v after a refused Retain", s.Pin(), dirFiles(t, s.dir))
	}
	if err := s.Retain([]Live{live[1], live[0]}, 3); err == nil {
		t.Fatal("Retain took keys out of order")
	}
}

func TestRetain_ReportsALostBodyAndSavesTheOthers(t *testing.T) {
	l := inmemLog(t)
	keys := l.entries(10, 1, 100)
	s := openStore(t, t.TempDir(), l, Options{})
	if err := l.logs.DeleteRange(1, 2); err != nil {
		t.Fatal(err)
	}
	err := s.Retain(l.live(keys), 10)
	if !errors.Is(err, ErrMissing) || !strings.Contains(err.Error(), "1/1") {
		t.Fatalf("Retain: %v, want ErrMissing naming 1/1", err)
	}
	if s.Pin() != 11 {
		t.Fatalf("pin %d", s.Pin())
	}
	l.truncate(s, 10)
	l.check(s, keys[2:])
}

func TestRestart_KeepsEverything(t *testing.T) {
	logDir, dir := t.TempDir(), t.TempDir()
	l := walLog(t, logDir)
	keys := l.entries(200, 4, 300)
	s, err := Open(dir, l.logs, Options{TargetFileSize: 32 << 10})
	if err != nil {
		t.Fatal(err)
	}
	live := every(keys, 2)
	if err := s.Retain(l.live(live), 150); err != nil {
		t.Fatal(err)
	}
	l.truncate(s, 150)
	before := s.Stats()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(live[0]); !errors.Is(err, ErrClosed) {
		t.Fatalf("Get after Close: %v", err)
	}
	// The whole node restarts: its log too.
	if err := l.logs.(io.Closer).Close(); err != nil {
		t.Fatal(err)
	}
	want := l.want
	l = walLog(t, logDir)
	l.want, l.last = want, 200
	s = openStore(t, dir, l, Options{TargetFileSize: 32 << 10})
	if s.Pin() != 0 {
		t.Fatalf("pin %d after Open, want 0 until the first Retain", s.Pin())
	}
	after := s.Stats()
	if after.Files != before.Files || after.FileBodies != before.FileBodies || after.FileBytes != before.FileBytes {
		t.Fatalf("after Open %+v, before %+v", after, before)
	}
	l.check(s, live)
	// Relocation goes on where it stopped.
	retain(t, s, l.live(live), 190)
	l.truncate(s, 190)
	l.check(s, live)
	if st := s.Stats(); st.RelocatedBodies != int64(len(every(keys[150*4:190*4], 2))) {
		t.Fatalf("relocated %d after the restart", st.RelocatedBodies)
	}
}

// heldObsolete stores the bodies of entries up to 10 in a file, takes a
// hold, then retains nothing up to 20: the file is obsolete, kept by the
// hold.
func heldObsolete(t *testing.T) (l *testLog, keys []Key, dir string, s *Store, release func()) {
	t.Helper()
	l = inmemLog(t)
	keys = l.entries(20, 2, 100)
	dir = t.TempDir()
	s = openStore(t, dir, l, Options{})
	retain(t, s, l.live(keys), 10)
	release = s.Hold()
	retain(t, s, nil, 20)
	return l, keys, dir, s, release
}

func TestHold_KeepsFilesAndPin(t *testing.T) {
	l, keys, dir, s, release := heldObsolete(t)
	if s.Pin() != 11 {
		t.Fatalf("pin %d moved while held", s.Pin())
	}
	st := s.Stats()
	if st.Files != 1 || st.Obsolete != 1 {
		t.Fatalf("held: %d files, %d obsolete", st.Files, st.Obsolete)
	}
	l.check(s, keys) // the obsolete file and the whole log still serve
	release()
	release() // a second call is harmless
	if s.Pin() != 21 || len(dirFiles(t, dir)) != 0 {
		t.Fatalf("released: pin %d, files %v", s.Pin(), dirFiles(t, dir))
	}
}

// The last hold ends while another holds maint (a Retain copying, a
// ReadBodies): that release cannot delete, and the holder had already
// looked, so the holder deletes as it lets go.
func TestHold_ReleasedWhileMaintHeldStillDeletes(t *testing.T) {
	_, _, dir, s, release := heldObsolete(t)
	if n := len(dirFiles(t, dir)); n != 1 {
		t.Fatalf("held: %d files, want the obsolete one kept", n)
	}
	s.maint.Lock() // a holder past its own deleteObsolete
	release()      // cannot take maint
	s.unlockMaint()
	if files := dirFiles(t, dir); len(files) != 0 {
		t.Fatalf("after the hold and the holder let go: files %v", files)
	}
}

func TestOpen_RemovesTemporaryFiles(t *testing.T) {
	l := inmemLog(t)
	keys := l.entries(10, 1, 100)
	dir := t.TempDir()
	s := openStore(t, dir, l, Options{})
	retain(t, s, l.live(keys), 10)
	_ = s.Close()
	torn := filepath.Join(dir, fileName(99)+tmpSuffix)
	if err := os.WriteFile(torn, []byte("RMQBODY1 half a rec"), 0o644); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, dir, l, Options{})
	if _, err := os.Stat(torn); !os.IsNotExist(err) {
		t.Fatalf("temporary file left: %v", err)
	}
	l.truncate(s, 10)
	l.check(s, keys)
}

// relocatedAndSaved is a store whose 100 bodies are in files of 8 KiB,
// and a copy of those files.
func relocatedAndSaved(t *testing.T) (*testLog, *Store, []Key, Options, map[string][]byte) {
	l := inmemLog(t)
	keys := l.entries(100, 1, 500)
	opts := Options{TargetFileSize: 8 << 10}
	s := openStore(t, t.TempDir(), l, opts)
	retain(t, s, l.live(keys), 100)
	l.truncate(s, 100)
	saved := map[string][]byte{}
	for _, name := range dirFiles(t, s.dir) {
		b, err := os.ReadFile(filepath.Join(s.dir, name))
		if err != nil {
			t.Fatal(err)
		}
		saved[name] = b
	}
	return l, s, keys, opts, saved
}

// A crash after a rewrite's file was renamed and before the files it
// replaces were deleted: Open finishes the replacement.
func TestOpen_FinishesAnInterruptedRewrite(t *testing.T) {
	l, s, keys, opts, saved := relocatedAndSaved(t)
	dir := s.dir
	live := every(keys, 10)
	retain(t, s, l.live(live), 100)
	if st := s.Stats(); st.RewrittenBodies != int64(len(live)) {
		t.Fatalf("rewrote %d", st.RewrittenBodies)
	}
	want := dirFiles(t, dir)
	var replaced []string
	for _, f := range s.files {
		for _, seq := range f.replaces {
			replaced = append(replaced, fileName(seq))
		}
	}
	if len(replaced) == 0 {
		t.Fatal("the rewrite names no file it replaces")
	}
	_ = s.Close()
	for name, b := range saved { // as if the deletions had not happened
		if name == replaced[0] {
			b = b[:len(b)/2] // and torn: it is replaced, so no matter
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s = openStore(t, dir, l, opts)
	got := dirFiles(t, dir)
	for _, name := range replaced {
		if slices.Contains(got, name) {
			t.Fatalf("after Open: %v still has %s, which %v replaced", got, name, want)
		}
	}
	l.check(s, live)
	// A file in which nothing was live is deleted without a
	// replacement: the next Retain does it again.
	retain(t, s, l.live(live), 100)
	if got := dirFiles(t, dir); !slices.Equal(got, want) {
		t.Fatalf("after Retain: %v, want %v", got, want)
	}
}

// A crash while a rewrite had renamed some of its files but not the last
// (the one naming the files it replaces): the sources stay, and the
// next Retain sorts out the duplicates.
func TestOpen_KeepsTheSourcesOfAnUnfinishedRewrite(t *testing.T) {
	l, s, keys, opts, saved := relocatedAndSaved(t)
	dir := s.dir
	live := every(keys, 6)
	retain(t, s, l.live(live), 100)
	newFiles := dirFiles(t, dir)
	if len(newFiles) < 2 {
		t.Fatalf("the rewrite made %d files; the test needs two", len(newFiles))
	}
	_ = s.Close()
	// Undo: the last file renamed is gone, the sources are back.
	if err := os.Remove(filepath.Join(dir, newFiles[len(newFiles)-1])); err != nil {
		t.Fatal(err)
	}
	for name, b := range saved {
		_ = os.WriteFile(filepath.Join(dir, name), b, 0o644)
	}
	s = openStore(t, dir, l, opts)
	l.check(s, live)
	retain(t, s, l.live(live), 100)
	l.check(s, live)
	_ = s.Close()
	s = openStore(t, dir, l, opts)
	l.check(s, live)
	if st := s.Stats(); st.FileBodies > int64(len(live))*2 {
		t.Fatalf("%d bodies in files for %d live: the duplicates stayed", st.FileBodies, len(live))
	}
}

// A body Get reads from a log entry is a copy: a delivered message held
// in memory does not keep its whole batch entry, and a caller that
// changes it changes neither the entry nor the next Get.
func TestGet_FromLogCopiesTheBodyOutOfTheEntry(t *testing.T) {
	l := inmemLog(t)
	keys := l.batch(130, 1024)
	s, err := Open(t.TempDir(), l.logs, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var entry raft.Log
	if err := l.logs.GetLog(keys[0].Index, &entry); err != nil {
		t.Fatal(err)
	}
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(entry.Data)))
	hi := lo + uintptr(len(entry.Data))
	for _, k := range []Key{keys[0], keys[64], keys[129]} {
		for range 2 { // read from the log, then from the cache
			b, err := s.Get(k)
			if err != nil || !bytes.Equal(b, l.want[k]) {
				t.Fatalf("Get(%v): %d bytes, %v", k, len(b), err)
			}
			if p := uintptr(unsafe.Pointer(unsafe.SliceData(b))); p >= lo && p < hi {
				t.Fatalf("Get(%v) is a slice of its log entry", k)
			}
			if cap(b) > 2*len(l.want[k]) {
				t.Fatalf("Get(%v): %d bytes in a slice of capacity %d", k, len(b), cap(b))
			}
			b[0]++
		}
	}
	if st := s.Stats(); st.LogReads != 1 {
		t.Errorf("%d log reads: want the entry read once", st.LogReads)
	}
}

// A snapshot lists a Live for every queued message, 5,000,000 at a time:
// with a Key inside it each took 24 bytes, a third of them padding, and
// the collector's headroom doubled what the list held while it lived.
func TestLive_SixteenBytesABody(t *testing.T) {
	if n := unsafe.Sizeof(Live{}); n != 16 {
		t.Fatalf("a Live takes %d bytes, want 16", n)
	}
	l := Live{Index: 7, Pos: 3, Size: 100}
	if l.Key() != (Key{Index: 7, Pos: 3}) {
		t.Fatalf("the key of %+v is %v", l, l.Key())
	}
}
