package bodies

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"testing"

	"github.com/hashicorp/raft"
	raftwal "github.com/hashicorp/raft-wal"
	"github.com/raftmq/raftmq/proto"
)

// testLog is a raft log of Publish entries and the bodies they carry.
type testLog struct {
	t    testing.TB
	logs raft.LogStore
	last uint64
	want map[Key][]byte
}

func newTestLog(t testing.TB, logs raft.LogStore) *testLog {
	return &testLog{t: t, logs: logs, want: map[Key][]byte{}}
}

func inmemLog(t testing.TB) *testLog { return newTestLog(t, raft.NewInmemStore()) }

// walLog is a log in raft-wal's segment files, as a node keeps it.
func walLog(t testing.TB, dir string) *testLog {
	w, err := raftwal.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	return newTestLog(t, w)
}

// body is the distinct content of the body of k.
func body(k Key, size int) []byte {
	b := make([]byte, size)
	var seed [12]byte
	binary.LittleEndian.PutUint64(seed[:], k.Index)
	binary.LittleEndian.PutUint32(seed[8:], k.Pos)
	for i := range b {
		b[i] = seed[i%12] ^ byte(i/12)
	}
	return b
}

// batch appends one entry of n publishes of size bytes, each after a
// command of another kind, and returns their keys.
func (l *testLog) batch(n, size int) []Key {
	l.t.Helper()
	l.last++
	var cmds []*proto.Command
	var keys []Key
	for i := range n {
		cmds = append(cmds, settleCmd())
		k := Key{Index: l.last, Pos: uint32(2*i + 1)}
		b := body(k, size)
		cmds = append(cmds, publishCmd(b))
		l.want[k] = b
		keys = append(keys, k)
	}
	if err := l.logs.StoreLog(&raft.Log{Index: l.last, Term: 1, Type: raft.LogCommand, Data: envelope(l.t, cmds...)}); err != nil {
		l.t.Fatal(err)
	}
	return keys
}

// entries appends n entries of per publishes each.
func (l *testLog) entries(n, per, size int) []Key {
	var keys []Key
	for range n {
		keys = append(keys, l.batch(per, size)...)
	}
	return keys
}

func (l *testLog) live(keys []Key) []Live {
	out := make([]Live, len(keys))
	for i, k := range keys {
		out[i] = Live{Index: k.Index, Pos: k.Pos, Size: uint32(len(l.want[k]))}
	}
	return out
}

// truncate deletes the log prefix up to the store's pin, as the node's
// log store wrapper lets raft do.
func (l *testLog) truncate(s *Store, upTo uint64) {
	l.t.Helper()
	first, err := l.logs.FirstIndex()
	if err != nil {
		l.t.Fatal(err)
	}
	upTo = min(upTo, s.Pin()-1)
	if s.Pin() == 0 || upTo < first {
		return
	}
	if err := l.logs.DeleteRange(first, upTo); err != nil {
		l.t.Fatal(err)
	}
}

// check reads every key back.
func (l *testLog) check(s *Store, keys []Key) {
	l.t.Helper()
	for _, k := range keys {
		got, err := s.Get(k)
		if err != nil {
			l.t.Fatalf("Get(%v): %v", k, err)
		}
		if !bytes.Equal(got, l.want[k]) {
			l.t.Fatalf("Get(%v): %d wrong bytes", k, len(got))
		}
		if !s.Has(k) {
			l.t.Fatalf("Has(%v) false after a Get", k)
		}
	}
}

func checkMissing(t testing.TB, s *Store, keys ...Key) {
	t.Helper()
	for _, k := range keys {
		if b, err := s.Get(k); !errors.Is(err, ErrMissing) {
			t.Fatalf("Get(%v) = %d bytes, %v; want ErrMissing", k, len(b), err)
		}
		if s.Has(k) {
			t.Fatalf("Has(%v) true for a missing body", k)
		}
	}
}

func openStore(t testing.TB, dir string, l *testLog, opts Options) *Store {
	t.Helper()
	s, err := Open(dir, l.logs, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func retain(t testing.TB, s *Store, live []Live, truncateTo uint64) {
	t.Helper()
	if err := s.Retain(live, truncateTo); err != nil {
		t.Fatal(err)
	}
}

// dirFiles is the names in dir.
func dirFiles(t testing.TB, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

func every(keys []Key, n int) []Key {
	var out []Key
	for i := 0; i < len(keys); i += n {
		out = append(out, keys[i])
	}
	return out
}

func upTo(keys []Key, index uint64) (below, above []Key) {
	for _, k := range keys {
		if k.Index <= index {
			below = append(below, k)
		} else {
			above = append(above, k)
		}
	}
	return below, above
}
