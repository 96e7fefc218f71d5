package group

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// reapStore is a snapshot store in dir that shrinks 64 KiB at a time,
// pause apart.
func reapStore(t *testing.T, dir string, pause time.Duration) *SnapshotStore {
	t.Helper()
	files, err := raft.NewFileSnapshotStoreWithLogger(dir, keepSnapshots+1, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := &SnapshotStore{SnapshotStore: files, dir: filepath.Join(dir, "snapshots"), step: 64 << 10, pause: pause}
	t.Cleanup(s.close)
	return s
}

// snap writes a complete snapshot at index of body and returns its id.
func snap(t *testing.T, s *SnapshotStore, index uint64, body []byte) string {
	t.Helper()
	sink, err := s.Create(raft.SnapshotVersionMax, index, 1, raft.Configuration{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sink.Write(body); err != nil {
		t.Fatal(err)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	return sink.ID()
}

// size is the size of snapshot id's state, -1 once it is gone.
func size(s *SnapshotStore, id string) int64 {
	fi, err := os.Stat(filepath.Join(s.dir, id, "state.bin"))
	if err != nil {
		return -1
	}
	return fi.Size()
}

// await polls cond until it holds, for at most 10 s.
func await(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%s: not after 10 s", what)
		}
	}
}

func ids(t *testing.T, s *SnapshotStore) []string {
	t.Helper()
	metas, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	var l []string
	for _, m := range metas {
		l = append(l, m.ID)
	}
	return l
}

// The snapshot a new one pushes out of raft's view is shrunk a step at a
// time and then unlinked by raft's next reap; raft is never shown it, nor
// can it open it, and a snapshot still being read is left whole.
func TestSnapshotStore_ShrinksWhatItDropsAStepAtATime(t *testing.T) {
	s := reapStore(t, t.TempDir(), time.Millisecond)
	body := bytes.Repeat([]byte("raftmq snapshot "), (1<<20)/16)
	a := snap(t, s, 10, body)
	b := snap(t, s, 20, body)
	c := snap(t, s, 30, body)
	if got := ids(t, s); len(got) != 2 || got[0] != c || got[1] != b {
		t.Fatalf("raft is shown %v, want [%s %s]", got, c, b)
	}
	await(t, "the dropped snapshot shrunk to nothing", func() bool { return size(s, a) == 0 })
	if _, _, err := s.Open(a); !errors.Is(err, errReaping) {
		t.Fatalf("Open of the shrunk snapshot: %v, want %v", err, errReaping)
	}

	// A reader of b (a follower's install) keeps it whole while two newer
	// snapshots push it out; raft's reap unlinks it, as it always did,
	// and the reader reads it to its end.
	_, rc, err := s.Open(b)
	if err != nil {
		t.Fatal(err)
	}
	d := snap(t, s, 40, body)
	if size(s, a) != -1 {
		t.Fatalf("raft's reap left the shrunk snapshot %s", a)
	}
	e := snap(t, s, 50, body)
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("the reader of a dropped snapshot read %d bytes (%v), want the %d written", len(got), err, len(body))
	}
	await(t, "the snapshot dropped after the one being read shrunk", func() bool { return size(s, c) == 0 })
	if got := ids(t, s); len(got) != 2 || got[0] != e || got[1] != d {
		t.Fatalf("raft is shown %v, want [%s %s]", got, e, d)
	}
	if _, rc, err := s.Open(e); err != nil {
		t.Fatalf("the newest snapshot: %v", err)
	} else {
		rc.Close()
	}
}

// A store that closes while it shrinks stops at once; opened again on
// its folder it shows raft the two newest snapshots only, and the next
// snapshot shrinks what was left.
func TestSnapshotStore_CloseStopsAShrinkThatTheNextSnapshotEnds(t *testing.T) {
	dir := t.TempDir()
	s := reapStore(t, dir, 50*time.Millisecond)
	body := bytes.Repeat([]byte("raftmq snapshot "), (4<<20)/16)
	a := snap(t, s, 10, body)
	snap(t, s, 20, body)
	c := snap(t, s, 30, body)
	await(t, "the shrink started", func() bool { return size(s, a) < int64(len(body)) })
	start := time.Now()
	s.close()
	if took := time.Since(start); took > time.Second {
		t.Fatalf("close took %v while a shrink of 64 steps of 50 ms was under way", took)
	}
	left := size(s, a)
	if left <= 0 {
		t.Fatalf("the shrink ended (%d bytes left) before the store closed", left)
	}

	s2 := reapStore(t, dir, time.Nanosecond)
	if got := ids(t, s2); len(got) != 2 || got[0] != c {
		t.Fatalf("reopened, raft is shown %v", got)
	}
	snap(t, s2, 40, body)
	if size(s2, a) != -1 {
		t.Fatalf("the half-shrunk snapshot outlived raft's reap")
	}
}
