package group

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	raftwal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/segment"
)

// overWAL is an entry raft-wal writes but refuses to read back.
const overWAL = segment.MaxEntrySize + 6<<20

// patterned is n bytes that differ from any other call's.
func patterned(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7+i>>13)
	}
	return b
}

func sameLog(t *testing.T, got, want *raft.Log) {
	t.Helper()
	if got.Index != want.Index || got.Term != want.Term || got.Type != want.Type ||
		!bytes.Equal(got.Data, want.Data) || !bytes.Equal(got.Extensions, want.Extensions) ||
		!got.AppendedAt.Equal(want.AppendedAt) {
		t.Fatalf("entry %d: got index %d term %d type %v data %d bytes ext %q at %v; want term %d type %v data %d bytes ext %q at %v",
			want.Index, got.Index, got.Term, got.Type, len(got.Data), got.Extensions, got.AppendedAt,
			want.Term, want.Type, len(want.Data), want.Extensions, want.AppendedAt)
	}
}

func sideFiles(t *testing.T, dir string) []string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*"+sideSuffix))
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// An entry larger than raft-wal reads goes to a side file: after a
// reopen every entry reads back as appended, no record of the log itself
// is over raft-wal's limit, and truncations take the side files along.
func TestLargeEntries_ReadBackAfterReopen(t *testing.T) {
	dir := t.TempDir()
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	logs := []*raft.Log{
		{Index: 1, Term: 1, Type: raft.LogCommand, Data: []byte("small"), AppendedAt: at},
		{Index: 2, Term: 1, Type: raft.LogCommand, Data: patterned(overWAL, 1), Extensions: []byte("ext"), AppendedAt: at},
		{Index: 3, Term: 2, Type: raft.LogCommand, Data: patterned(inlineMax, 2), AppendedAt: at},
		{Index: 4, Term: 2, Type: raft.LogCommand, Data: patterned(inlineMax+1, 3), AppendedAt: at},
	}
	s, _, err := openLogStore(dir, LogStoreWAL, inlineMax, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	wal := filepath.Join(dir, walDir)
	if n := len(sideFiles(t, wal)); n != 2 {
		t.Fatalf("%d side files, want 2 (entries 2 and 4)", n)
	}

	// The log itself: raft-wal reads every record.
	raw, err := raftwal.Open(wal, raftwal.WithMetaStore(&metadb.BoltMetaDB{}))
	if err != nil {
		t.Fatal(err)
	}
	for i := uint64(1); i <= 4; i++ {
		var l raft.Log
		if err := raw.GetLog(i, &l); err != nil {
			t.Fatalf("raft-wal reads entry %d: %v", i, err)
		}
	}
	raw.Close()

	s, _, err = openLogStore(dir, LogStoreAuto, inlineMax, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range logs {
		var got raft.Log
		if err := s.GetLog(want.Index, &got); err != nil {
			t.Fatal(err)
		}
		sameLog(t, &got, want)
	}
	// Tail truncation, then a new entry at the same index in a new term.
	if err := s.DeleteRange(4, 4); err != nil {
		t.Fatal(err)
	}
	if n := len(sideFiles(t, wal)); n != 1 {
		t.Fatalf("%d side files after the tail truncation, want 1", n)
	}
	repl := &raft.Log{Index: 4, Term: 3, Type: raft.LogCommand, Data: patterned(inlineMax+5, 4), AppendedAt: at}
	if err := s.StoreLogs([]*raft.Log{repl}); err != nil {
		t.Fatal(err)
	}
	var got raft.Log
	if err := s.GetLog(4, &got); err != nil {
		t.Fatal(err)
	}
	sameLog(t, &got, repl)
	// Head truncation.
	if err := s.DeleteRange(1, 3); err != nil {
		t.Fatal(err)
	}
	if names := sideFiles(t, wal); len(names) != 1 || !strings.Contains(names[0], sideName(4, 3)) {
		t.Fatalf("side files after the head truncation: %v", names)
	}
	if err := s.GetLog(2, &got); !errors.Is(err, raft.ErrLogNotFound) {
		t.Fatalf("entry 2 after truncation: %v", err)
	}
	s.Close()
}

// A side file a crash left without its entry (written, then no append)
// is removed at open; one whose bytes changed is a DataError naming it.
func TestLargeEntries_OrphansAndDamage(t *testing.T) {
	dir := t.TempDir()
	s, _, err := openLogStore(dir, LogStoreWAL, inlineMax, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.StoreLogs([]*raft.Log{{Index: 1, Term: 1, Type: raft.LogCommand, Data: patterned(inlineMax+1, 9)}}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	wal := filepath.Join(dir, walDir)
	orphan := filepath.Join(wal, sideName(2, 1))
	if err := os.WriteFile(orphan, []byte("left by a crash"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(wal, sideName(3, 1)+".tmp"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// Flip one byte of the data of entry 1.
	name := filepath.Join(wal, sideName(1, 1))
	f, err := os.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0xff}, int64(sideHeader)+100); err != nil {
		t.Fatal(err)
	}
	f.Close()

	s, _, err = openLogStore(dir, LogStoreAuto, inlineMax, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if names := sideFiles(t, wal); len(names) != 1 || names[0] != name {
		t.Fatalf("side files after open: %v; want only %s", names, name)
	}
	if tmp, _ := filepath.Glob(filepath.Join(wal, "*.tmp")); len(tmp) != 0 {
		t.Fatalf("temporary files left: %v", tmp)
	}
	var l raft.Log
	err = s.GetLog(1, &l)
	var de *DataError
	if !errors.As(err, &de) || de.Path != name || !strings.Contains(err.Error(), "checksum") {
		t.Fatalf("damaged side file: %v; want a DataError naming %s", err, name)
	}
	if s.damage() == nil {
		t.Fatal("the damage is not remembered for newRaft")
	}
}

// writeOldWAL writes logs and raft's stable keys with raft-wal alone, as
// releases before largeEntries did.
func writeOldWAL(t *testing.T, dataDir string, logs []*raft.Log) {
	t.Helper()
	dir := filepath.Join(dataDir, walDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	w, err := raftwal.Open(dir, raftwal.WithMetaStore(&metadb.BoltMetaDB{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range logs {
		if err := w.StoreLogs([]*raft.Log{l}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.SetUint64([]byte("CurrentTerm"), 5); err != nil {
		t.Fatal(err)
	}
	if err := w.SetUint64([]byte("LastVoteTerm"), 4); err != nil {
		t.Fatal(err)
	}
	if err := w.Set([]byte("LastVoteCand"), []byte("n2")); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

func oldLogs() []*raft.Log {
	at := time.Date(2026, 3, 4, 5, 6, 7, 8, time.UTC)
	return []*raft.Log{
		{Index: 1, Term: 1, Type: raft.LogConfiguration, Data: []byte("conf"), AppendedAt: at},
		{Index: 2, Term: 2, Type: raft.LogNoop, AppendedAt: at.Add(time.Second)},
		{Index: 3, Term: 2, Type: raft.LogCommand, Data: patterned(overWAL, 5), Extensions: []byte{1, 2}, AppendedAt: at.Add(2 * time.Second)},
		{Index: 4, Term: 3, Type: raft.LogCommand, Data: []byte("after"), AppendedAt: at.Add(3 * time.Second)},
	}
}

func checkMigrated(t *testing.T, dataDir string, logs []*raft.Log) {
	t.Helper()
	s, kind, err := openLogStore(dataDir, LogStoreAuto, inlineMax, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if kind != LogStoreWAL {
		t.Fatalf("kind %q", kind)
	}
	first, _ := s.FirstIndex()
	last, _ := s.LastIndex()
	if first != 1 || last != uint64(len(logs)) {
		t.Fatalf("log %d..%d, want 1..%d", first, last, len(logs))
	}
	for _, want := range logs {
		var got raft.Log
		if err := s.GetLog(want.Index, &got); err != nil {
			t.Fatal(err)
		}
		sameLog(t, &got, want)
	}
	for k, want := range map[string]uint64{"CurrentTerm": 5, "LastVoteTerm": 4} {
		if v, err := s.GetUint64([]byte(k)); err != nil || v != want {
			t.Fatalf("%s = %d, %v; want %d", k, v, err, want)
		}
	}
	if v, err := s.Get([]byte("LastVoteCand")); err != nil || string(v) != "n2" {
		t.Fatalf("LastVoteCand = %q, %v", v, err)
	}
	for _, d := range []string{walMigrateDir, walOldDir} {
		if exists(filepath.Join(dataDir, d)) {
			t.Fatalf("%s left behind", d)
		}
	}
}

// A log written by an earlier release with an entry over raft-wal's
// limit is rewritten at open: every entry and raft's stable keys come
// back as they were.
func TestOpenLogStore_MigratesAnOversizedWAL(t *testing.T) {
	dataDir := t.TempDir()
	logs := oldLogs()
	writeOldWAL(t, dataDir, logs)

	// The fixture is the bug: raft-wal cannot read entry 3.
	w, err := raftwal.Open(filepath.Join(dataDir, walDir), raftwal.WithMetaStore(&metadb.BoltMetaDB{}))
	if err != nil {
		t.Fatal(err)
	}
	var l raft.Log
	if err := w.GetLog(3, &l); err == nil || !strings.Contains(err.Error(), "MaxEntrySize") {
		t.Fatalf("raft-wal read the oversized entry: %v", err)
	}
	w.Close()

	checkMigrated(t, dataDir, logs)
	// Once more: nothing left to migrate, the same log.
	checkMigrated(t, dataDir, logs)
}

// A crash during the migration leaves a log that the next open serves:
// the new log half built (it is dropped and rebuilt), or the old log
// renamed aside with the new one complete (the swap is finished).
func TestOpenLogStore_MigrationSurvivesACrash(t *testing.T) {
	t.Run("half built", func(t *testing.T) {
		dataDir := t.TempDir()
		logs := oldLogs()
		writeOldWAL(t, dataDir, logs)
		mig := filepath.Join(dataDir, walMigrateDir)
		if err := os.MkdirAll(mig, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(mig, "00000000000000000001-0000000000000001.wal"), []byte("torn"), 0o600); err != nil {
			t.Fatal(err)
		}
		checkMigrated(t, dataDir, logs)
	})
	t.Run("between the renames", func(t *testing.T) {
		dataDir := t.TempDir()
		logs := oldLogs()
		writeOldWAL(t, dataDir, logs)
		big, err := oversizedRecords(filepath.Join(dataDir, walDir))
		if err != nil || len(big) != 1 {
			t.Fatalf("oversized records %v, %v; want entry 3", big, err)
		}
		// Migrate, then put the state back to the instant after the first
		// rename.
		if err := migrateWAL(dataDir, big); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(dataDir, walDir), filepath.Join(dataDir, walMigrateDir)); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(filepath.Join(dataDir, walOldDir), 0o755); err != nil {
			t.Fatal(err)
		}
		checkMigrated(t, dataDir, logs)
	})
}

// While the appended bytes of a large entry are alive (raft holds them
// to apply and replicate the entry), reads share them rather than each
// reading the side file into a copy of its own.
func TestLargeEntries_ReadsShareBytesStillInMemory(t *testing.T) {
	s, _, err := openLogStore(t.TempDir(), LogStoreWAL, inlineMax, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	appended := &raft.Log{Index: 1, Term: 1, Type: raft.LogCommand, Data: patterned(inlineMax+1, 4)}
	if err := s.StoreLogs([]*raft.Log{appended}); err != nil {
		t.Fatal(err)
	}
	var a, b raft.Log
	if err := s.GetLog(1, &a); err != nil {
		t.Fatal(err)
	}
	if err := s.GetLog(1, &b); err != nil {
		t.Fatal(err)
	}
	if &a.Data[0] != &appended.Data[0] || &b.Data[0] != &appended.Data[0] || a.Type != raft.LogCommand {
		t.Fatal("reads of an entry still in memory made copies")
	}
	runtime.KeepAlive(appended)
}

func TestChecksum_IsCRC32C(t *testing.T) {
	b := patterned(3<<20+5, 6)
	if got, want := checksum(b), crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)); got != want {
		t.Fatalf("checksum %08x, want %08x", got, want)
	}
}

// An entry kept beside the log and removed with the log's head is not
// found, as raft expects of a compacted entry (it then sends the
// snapshot), not damage: raft-wal still reads such an entry's marker while
// it is in the open segment.
func TestLargeEntries_HeadTruncatedIsNotFound(t *testing.T) {
	dir := t.TempDir()
	s, _, err := openLogStore(dir, LogStoreWAL, inlineMax, nil)
	if err != nil {
		t.Fatal(err)
	}
	logs := []*raft.Log{
		{Index: 1, Term: 1, Type: raft.LogCommand, Data: []byte("small")},
		{Index: 2, Term: 1, Type: raft.LogCommand, Data: patterned(inlineMax+1, 5)},
		{Index: 3, Term: 1, Type: raft.LogCommand, Data: []byte("kept")},
	}
	if err := s.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
	// Reopened, so that no read is served from the bytes just appended.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, _, err = openLogStore(dir, LogStoreAuto, inlineMax, nil); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.DeleteRange(1, 2); err != nil {
		t.Fatal(err)
	}
	var l raft.Log
	if err := s.GetLog(2, &l); !errors.Is(err, raft.ErrLogNotFound) {
		t.Fatalf("GetLog of a compacted entry kept beside the log: %v, want raft.ErrLogNotFound", err)
	}
	if de := s.damage(); de != nil {
		t.Fatalf("the store reports damage: %v", de)
	}
	if err := s.GetLog(3, &l); err != nil || string(l.Data) != "kept" {
		t.Fatalf("GetLog(3) = %q, %v", l.Data, err)
	}
}

// A bolt log keeps entries over inlineMax in side files too (bbolt copies
// a value out in one uninterruptible move: seconds at the size limit),
// and a bolt log an earlier release wrote, with such entries inline,
// reads as it was.
func TestLargeEntries_InABoltLog(t *testing.T) {
	dir := t.TempDir()
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	// An earlier release's log: every entry in bolt.
	old, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, boltFile)})
	if err != nil {
		t.Fatal(err)
	}
	logs := []*raft.Log{
		{Index: 1, Term: 1, Type: raft.LogCommand, Data: []byte("small"), AppendedAt: at},
		{Index: 2, Term: 1, Type: raft.LogCommand, Data: patterned(inlineMax+1, 1), AppendedAt: at},
	}
	if err := old.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}

	s, kind, err := openLogStore(dir, LogStoreAuto, inlineMax, nil)
	if err != nil || kind != LogStoreBolt {
		t.Fatalf("open: %q %v", kind, err)
	}
	more := []*raft.Log{
		{Index: 3, Term: 2, Type: raft.LogCommand, Data: patterned(inlineMax+1, 2), Extensions: []byte("ext"), AppendedAt: at},
		{Index: 4, Term: 2, Type: raft.LogCommand, Data: []byte("small too"), AppendedAt: at},
	}
	if err := s.StoreLogs(more); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	side := filepath.Join(dir, boltLargeDir)
	if names := sideFiles(t, side); len(names) != 1 || !strings.Contains(names[0], sideName(3, 2)) {
		t.Fatalf("side files %v, want entry 3's alone", names)
	}
	s, _, err = openLogStore(dir, LogStoreAuto, inlineMax, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, want := range append(logs, more...) {
		var got raft.Log
		if err := s.GetLog(want.Index, &got); err != nil {
			t.Fatal(err)
		}
		sameLog(t, &got, want)
	}
}

// readCounter counts the reads made of a file.
type readCounter struct {
	r     io.ReaderAt
	reads int
}

func (c *readCounter) ReadAt(p []byte, off int64) (int, error) {
	c.reads++
	return c.r.ReadAt(p, off)
}

// A sealed segment's records are sized from its index block: a few reads
// whatever it holds, where a scan of its frame headers reads each. The
// two agree on which records are oversized.
func TestSegmentOversized_ReadsASealedSegmentsIndex(t *testing.T) {
	dataDir := t.TempDir()
	// 500 small entries, then one over raft-wal's limit, which seals
	// their segment, and one more in the next.
	var logs []*raft.Log
	add := func(data []byte) {
		logs = append(logs, &raft.Log{Index: uint64(len(logs) + 1), Term: 1, Type: raft.LogCommand, Data: data})
	}
	for i := range 500 {
		add([]byte(fmt.Sprint("small ", i)))
	}
	add(patterned(overWAL, 5))
	add([]byte("after"))
	writeOldWAL(t, dataDir, logs)
	dir := filepath.Join(dataDir, walDir)
	meta := &metadb.BoltMetaDB{}
	state, err := meta.Load(dir)
	meta.Close()
	if err != nil {
		t.Fatal(err)
	}
	sealed := 0
	for _, si := range state.Segments {
		path := filepath.Join(dir, fmt.Sprintf("%020d-%016x.wal", si.BaseIndex, si.ID))
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		st, _ := f.Stat()
		scanned, indexed := map[uint64]walFrame{}, map[uint64]walFrame{}
		if err := scanFrames(f, path, si.BaseIndex, st.Size(), scanned); err != nil {
			t.Fatal(err)
		}
		c := &readCounter{r: f}
		if err := segmentOversized(c, path, si, st.Size(), indexed); err != nil {
			t.Fatal(err)
		}
		f.Close()
		if !reflect.DeepEqual(scanned, indexed) {
			t.Errorf("segment %d: index finds %v, the scan %v", si.ID, indexed, scanned)
		}
		if si.SealTime.IsZero() {
			continue
		}
		sealed++
		// The header, the index frame and its block, and each oversized
		// record's frame header.
		if max := 3 + len(indexed); c.reads > max {
			t.Errorf("sealed segment %d (%d entries): %d reads, want at most %d", si.ID, si.MaxIndex-si.BaseIndex+1, c.reads, max)
		}
		// An index frame that is not where the metadata says, or an
		// index naming no entry frame: the frames are scanned.
		file, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for what, at := range map[string]int64{"index frame": int64(si.IndexStart) - walFrameHeader, "index entry": int64(si.IndexStart) + 4} {
			damaged := bytes.Clone(file)
			copy(damaged[at:], []byte{0xff, 0xff, 0xff, 0x7f, 0, 0, 0, 0})
			got := map[uint64]walFrame{}
			if err := segmentOversized(bytes.NewReader(damaged), path, si, st.Size(), got); err != nil {
				t.Fatalf("%s damaged: %v", what, err)
			}
			if !reflect.DeepEqual(got, scanned) {
				t.Errorf("%s damaged: %v, the scan %v", what, got, scanned)
			}
		}
	}
	if sealed == 0 {
		t.Fatal("no sealed segment to read")
	}
}
