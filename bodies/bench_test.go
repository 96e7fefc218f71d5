package bodies

import (
	"bytes"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/raftmq/raftmq/proto"
)

// The body size of the 1,000,000-key benchmarks; Open reads no body, so
// its time does not depend on it: BODIES_BENCH_BODY=1024 shows it.
func benchBodySize() int {
	if n, err := strconv.Atoi(os.Getenv("BODIES_BENCH_BODY")); err == nil && n >= 0 {
		return n
	}
	return 32
}

// writeBodyFiles fills dir with body files of n bodies of size bytes,
// four per log index, as Retain would have relocated them.
func writeBodyFiles(tb testing.TB, dir string, n, size int) []Live {
	tb.Helper()
	s, err := Open(dir, raft.NewInmemStore(), Options{})
	if err != nil {
		tb.Fatal(err)
	}
	defer s.Close()
	s.maint.Lock()
	defer s.maint.Unlock()
	b := batch{s: s}
	live := make([]Live, n)
	buf := bytes.Repeat([]byte{'b'}, size)
	for i := range live {
		k := Key{Index: uint64(i/4 + 1), Pos: uint32(i % 4)}
		live[i] = Live{Index: k.Index, Pos: k.Pos, Size: uint32(size)}
		if err := b.add(k, buf); err != nil {
			tb.Fatal(err)
		}
	}
	if _, err := b.commit(nil); err != nil {
		tb.Fatal(err)
	}
	return live
}

// Relocation: 1000 entries of 16 bodies of 1 KiB copied from the log.
func BenchmarkRelocate(b *testing.B) {
	l := inmemLog(b)
	keys := l.entries(1000, 16, 1024)
	live := l.live(keys)
	b.SetBytes(int64(len(keys)) * 1024)
	eachFresh(b, l.logs, func(s *Store) error { return s.Retain(live, l.last) })
}

// eachFresh times op on a new store in an empty dir, b.N times.
func eachFresh(b *testing.B, logs raft.LogStore, op func(*Store) error) {
	for range b.N {
		b.StopTimer()
		dir := b.TempDir()
		s, err := Open(dir, logs, Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if err := op(s); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		_ = s.Close()
		_ = os.RemoveAll(dir)
		b.StartTimer()
	}
}

// Appending bodies received with a snapshot: 16,000 bodies of 1 KiB.
func BenchmarkReadBodies(b *testing.B) {
	l := inmemLog(b)
	keys := l.entries(1000, 16, 1024)
	src, err := Open(b.TempDir(), l.logs, Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer src.Close()
	var stream bytes.Buffer
	if err := src.WriteBodies(&stream, keys); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(keys)) * 1024)
	eachFresh(b, raft.NewInmemStore(), func(s *Store) error {
		return s.ReadBodies(bytes.NewReader(stream.Bytes()), keys)
	})
}

// Get from raft-wal: entries of 64 bodies of 1 KiB read in order, as a
// consumer drains a queue fed by batches. One op is one body.
func BenchmarkGetFromLog(b *testing.B) {
	l := walLog(b, b.TempDir())
	keys := l.entries(200, 64, 1024)
	s, err := Open(b.TempDir(), l.logs, Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	b.SetBytes(1024)
	b.ResetTimer()
	for i := range b.N {
		if _, err := s.Get(keys[i%len(keys)]); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(s.Stats().LogReads)/float64(b.N), "logreads/op")
}

// Get from body files: 20,000 bodies of 1 KiB read at random.
func BenchmarkGetFromFile(b *testing.B) {
	dir := b.TempDir()
	live := writeBodyFiles(b, dir, 20_000, 1024)
	s, err := Open(dir, raft.NewInmemStore(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	r := rand.New(rand.NewPCG(1, 2))
	b.SetBytes(1024)
	b.ResetTimer()
	for range b.N {
		if _, err := s.Get(live[r.IntN(len(live))].Key()); err != nil {
			b.Fatal(err)
		}
	}
}

// Retain over 1,000,000 keys in body files: every key still live (the
// steady state: nothing to copy or delete), and all but one in ten gone
// (the files rewritten with the survivors).
func BenchmarkRetain1M(b *testing.B) {
	size := benchBodySize()
	b.Run("all-live", func(b *testing.B) {
		dir := b.TempDir()
		live := writeBodyFiles(b, dir, 1_000_000, size)
		s, err := Open(dir, raft.NewInmemStore(), Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		b.ResetTimer()
		for range b.N {
			if err := s.Retain(live, live[len(live)-1].Index); err != nil {
				b.Fatal(err)
			}
		}
		if st := s.Stats(); st.RewrittenBodies != 0 || st.FileBodies != int64(len(live)) {
			b.Fatalf("%+v", st)
		}
	})
	b.Run("one-in-ten-live", func(b *testing.B) {
		for range b.N {
			b.StopTimer()
			dir := b.TempDir()
			all := writeBodyFiles(b, dir, 1_000_000, size)
			var live []Live
			for i := 0; i < len(all); i += 10 {
				live = append(live, all[i])
			}
			s, err := Open(dir, raft.NewInmemStore(), Options{})
			if err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			if err := s.Retain(live, all[len(all)-1].Index); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			if st := s.Stats(); st.FileBodies != int64(len(live)) {
				b.Fatalf("%+v", st)
			}
			_ = s.Close()
			_ = os.RemoveAll(dir)
			b.StartTimer()
		}
	})
}

// Open with 1,000,000 relocated bodies; the heap it keeps per body.
func BenchmarkOpen1M(b *testing.B) {
	dir := b.TempDir()
	live := writeBodyFiles(b, dir, 1_000_000, benchBodySize())
	var heap float64
	b.ResetTimer()
	for range b.N {
		var before, after runtime.MemStats
		b.StopTimer()
		runtime.GC()
		runtime.ReadMemStats(&before)
		b.StartTimer()
		s, err := Open(dir, raft.NewInmemStore(), Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		runtime.GC()
		runtime.ReadMemStats(&after)
		heap = float64(after.HeapAlloc-before.HeapAlloc) / float64(len(live))
		if _, err := s.Get(live[len(live)/2].Key()); err != nil {
			b.Fatal(err)
		}
		_ = s.Close()
		b.StartTimer()
	}
	b.ReportMetric(heap, "heapB/body")
}

// One body of 1 KiB out of a batch entry of 130 publishes (about 140 KB,
// what the batcher makes at 20,000 publishes a second), at the middle
// and at the end of the entry: by the decode of the whole Envelope, by
// a scan of every command (what Get did on a cache miss until it read
// one body), and by the scan up to the command (Get now); the last two
// as Get serves them, copied out of the entry.
func BenchmarkBodyOfBatchEntry(b *testing.B) {
	var cmds []*proto.Command
	for i := range 130 {
		cmds = append(cmds, publishCmd(body(Key{Index: 1, Pos: uint32(i)}, 1024)))
	}
	data := envelope(b, cmds...)
	ways := []struct {
		name string
		get  func(pos uint32) ([]byte, error)
	}{
		{"decode", func(pos uint32) ([]byte, error) { return decodedBody(data, pos) }},
		{"scan-all", func(pos uint32) ([]byte, error) {
			e, err := scanEntry(data)
			if err != nil {
				return nil, err
			}
			b, err := e.body(pos)
			return bytes.Clone(b), err
		}},
		{"scan-to", func(pos uint32) ([]byte, error) {
			b, err := entryBody(data, pos)
			return bytes.Clone(b), err
		}},
	}
	for _, w := range ways {
		for _, pos := range []uint32{64, 129} {
			b.Run(w.name+"/pos="+strconv.Itoa(int(pos)), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if got, err := w.get(pos); err != nil || len(got) != 1024 {
						b.Fatal(len(got), err)
					}
				}
				b.ReportMetric(float64(len(data)), "entry-bytes")
			})
		}
	}
}

// Get in the log's order, as a consumer behind a backlog reads: 1 KiB
// bodies of 200 entries of 130 publishes, the cache as a node has it.
func BenchmarkGetInOrder(b *testing.B) {
	l := inmemLog(b)
	benchGets(b, l, l.entries(200, 130, 1024), Options{})
}

// benchGets has a store on l with opts Get keys in turn, round and round.
func benchGets(b *testing.B, l *testLog, keys []Key, opts Options) {
	s, err := Open(b.TempDir(), l.logs, opts)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	b.ReportAllocs()
	b.SetBytes(1024)
	i := 0
	for b.Loop() {
		if _, err := s.Get(keys[i%len(keys)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
	b.ReportMetric(float64(s.Stats().LogReads)/float64(i), "logreads/op")
}

// Get in an order that is not the log's, as a delayed exchange releases:
// 1 KiB bodies out of 200 entries of 130 publishes, the cache keeping
// only the entry read last, so nearly every Get reads its entry again.
func BenchmarkGetOutOfOrder(b *testing.B) {
	for name, open := range map[string]func(testing.TB) *testLog{
		"inmem": inmemLog,
		"wal":   func(tb testing.TB) *testLog { return walLog(tb, b.TempDir()) },
	} {
		b.Run(name, func(b *testing.B) {
			l := open(b)
			keys := l.entries(200, 130, 1024)
			rand.New(rand.NewPCG(1, 2)).Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
			benchGets(b, l, keys, Options{CacheBytes: 1})
		})
	}
}
