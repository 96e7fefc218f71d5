package bodies

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
)

func TestStream_ToAFollowerWithAnEmptyLog(t *testing.T) {
	l := walLog(t, t.TempDir())
	keys := l.entries(100, 5, 700)
	leader := openStore(t, t.TempDir(), l, Options{TargetFileSize: 64 << 10})
	live := every(keys, 3)
	retain(t, leader, l.live(live), 60) // some in files, the rest in the log
	l.truncate(leader, 60)

	var buf bytes.Buffer
	if err := leader.WriteBodies(&buf, live); err != nil {
		t.Fatal(err)
	}
	empty := newTestLog(t, raft.NewInmemStore())
	empty.want = l.want
	followerDir := t.TempDir()
	f := openStore(t, followerDir, empty, Options{TargetFileSize: 64 << 10})
	if err := f.ReadBodies(bytes.NewReader(buf.Bytes()), live); err != nil {
		t.Fatal(err)
	}
	if st := f.Stats(); st.ReceivedBodies != int64(len(live)) || st.LogReads != 0 {
		t.Fatalf("received %d of %d, %d log reads", st.ReceivedBodies, len(live), st.LogReads)
	}
	empty.check(f, live)

	// Durable: a restart keeps them.
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	f = openStore(t, followerDir, empty, Options{})
	empty.check(f, live)

	// The same snapshot again: nothing new is stored, but the stream
	// is read to its end.
	r := bytes.NewReader(buf.Bytes())
	if err := f.ReadBodies(r, live); err != nil {
		t.Fatal(err)
	}
	if st := f.Stats(); st.ReceivedBodies != 0 || r.Len() != 0 {
		t.Fatalf("stored %d again, %d bytes left unread", st.ReceivedBodies, r.Len())
	}

	// The follower's own Retain then treats them as its files.
	retain(t, f, l.live(live[:10]), 100)
	empty.check(f, live[:10])
	if st := f.Stats(); st.FileBodies != 10 {
		t.Fatalf("%d bodies in files for 10 live", st.FileBodies)
	}
}

func TestStream_RefusesDamageAndLeavesNoFile(t *testing.T) {
	l := inmemLog(t)
	keys := l.entries(20, 2, 300)
	leader := openStore(t, t.TempDir(), l, Options{})
	var buf bytes.Buffer
	if err := leader.WriteBodies(&buf, keys); err != nil {
		t.Fatal(err)
	}
	good := buf.Bytes()
	flip := func(at int) []byte {
		b := bytes.Clone(good)
		b[at] ^= 0x40
		return b
	}
	for name, c := range map[string]struct {
		stream []byte
		keys   []Key
		want   error
	}{
		"body byte":       {flip(len(good) - 10), keys, ErrCorrupt},
		"key":             {flip(16 + 1), keys, ErrCorrupt},
		"magic":           {flip(0), keys, ErrCorrupt},
		"cut short":       {good[:len(good)-100], keys, io.ErrUnexpectedEOF},
		"other keys":      {good, append([]Key{{Index: 0, Pos: 9}}, keys[1:]...), ErrCorrupt},
		"fewer keys":      {good, keys[1:], nil},
		"huge length":     {hugeLength(good), keys, nil},
		"keys unordered":  {good, []Key{keys[1], keys[0]}, nil},
		"truncated empty": {nil, keys, io.EOF},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			f := openStore(t, dir, inmemLog(t), Options{})
			err := f.ReadBodies(bytes.NewReader(c.stream), c.keys)
			if err == nil || (c.want != nil && !errors.Is(err, c.want)) {
				t.Fatalf("ReadBodies: %v, want %v", err, c.want)
			}
			if names := dirFiles(t, dir); len(names) != 0 || f.Stats().Files != 0 {
				t.Fatalf("files left: %v", names)
			}
		})
	}
}

// hugeLength says the first body is 4 GiB: the reader must not believe it
// and allocate.
func hugeLength(good []byte) []byte {
	b := bytes.Clone(good)
	copy(b[16+12:], []byte{0xff, 0xff, 0xff, 0xff})
	return b
}

func TestStream_MissingBodyFailsTheSender(t *testing.T) {
	l := inmemLog(t)
	keys := l.entries(3, 1, 10)
	s := openStore(t, t.TempDir(), l, Options{})
	err := s.WriteBodies(io.Discard, append(keys, Key{Index: 9, Pos: 1}))
	if !errors.Is(err, ErrMissing) || !strings.Contains(err.Error(), "9/1") {
		t.Fatalf("WriteBodies: %v", err)
	}
	if s.Stats().Obsolete != 0 || s.holds != 0 {
		t.Fatal("the hold outlived WriteBodies")
	}
}

func FuzzReadBodies(f *testing.F) {
	l := inmemLog(f)
	keys := l.entries(3, 2, 20)
	src, err := Open(f.TempDir(), l.logs, Options{})
	if err != nil {
		f.Fatal(err)
	}
	defer src.Close()
	var buf bytes.Buffer
	if err := src.WriteBodies(&buf, keys); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Add(buf.Bytes()[:40])
	f.Fuzz(func(t *testing.T, stream []byte) {
		dir := t.TempDir()
		s, err := Open(dir, raft.NewInmemStore(), Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if err := s.ReadBodies(bytes.NewReader(stream), keys); err != nil {
			if names := dirFiles(t, dir); len(names) != 0 {
				t.Fatalf("%v left files %v", err, names)
			}
			return
		}
		// Accepted: every body is exactly what the stream framed.
		for _, k := range keys {
			b, err := s.Get(k)
			if err != nil || !bytes.Contains(stream, b) {
				t.Fatalf("Get(%v) after an accepted stream: %v", k, err)
			}
		}
	})
}

// A snapshot of the follower's own, taken before it installed the
// leader's and persisted after, has an older live set: its Retain must
// not delete the bodies of the newer state that it does not know of.
func TestStream_AnOlderSnapshotsRetainKeepsReceivedBodies(t *testing.T) {
	leaderLog := inmemLog(t)
	leaderLog.entries(50, 2, 100)
	newer := leaderLog.entries(50, 2, 100) // published at 51..100
	leader := openStore(t, t.TempDir(), leaderLog, Options{})
	var buf bytes.Buffer
	if err := leader.WriteBodies(&buf, newer); err != nil {
		t.Fatal(err)
	}

	followerLog := inmemLog(t)
	followerLog.want = leaderLog.want
	f := openStore(t, t.TempDir(), followerLog, Options{})
	if err := f.ReadBodies(&buf, newer); err != nil {
		t.Fatal(err)
	}
	// The follower's older snapshot, at index 50: none of those live.
	retain(t, f, nil, 40)
	followerLog.check(f, newer)
	// Some of them consumed since: the rest is kept, rewritten or not.
	retain(t, f, leaderLog.live(newer[60:]), 80)
	followerLog.check(f, newer[60:])
	// A snapshot past them all without them: gone.
	retain(t, f, nil, 100)
	if st := f.Stats(); st.Files != 0 {
		t.Fatalf("%d files left", st.Files)
	}
}
