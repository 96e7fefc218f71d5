package bodies

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
)

// Gets, Has and WriteBodies run against Retains that relocate, rewrite
// and delete files and a log whose prefix is deleted up to the pin: a key
// that stays live must always read back right (go test -race).
func TestConcurrent_ReadsDuringRetain(t *testing.T) {
	l := inmemLog(t)
	s := openStore(t, t.TempDir(), l, Options{TargetFileSize: 8 << 10, MaxSmallFiles: 2})

	type published struct {
		k    Key
		body []byte
	}
	var mu sync.Mutex
	var stable []published // live for good, readable from the start
	var live []Live
	isStable := map[Key]bool{} // the main goroutine's own copy
	for _, k := range l.batch(3, 100) {
		stable = append(stable, published{k: k, body: l.want[k]})
		isStable[k] = true
		live = append(live, l.live([]Key{k})...)
	}

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	fail := func(err error) {
		select {
		case errs <- err:
		default:
		}
		cancel()
	}
	pick := func(r *rand.Rand) (published, []Key) {
		mu.Lock()
		defer mu.Unlock()
		var keys []Key
		for _, p := range stable {
			keys = append(keys, p.k)
		}
		return stable[r.IntN(len(stable))], keys
	}
	// Raft deletes the log prefix on its own goroutine, as far as the
	// pin lets it, whenever it likes.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			first, err := l.logs.FirstIndex()
			if err != nil {
				fail(err)
				return
			}
			runtime.Gosched()
			if pin := s.Pin(); pin > first {
				if err := l.logs.DeleteRange(first, pin-1); err != nil {
					fail(err)
					return
				}
			}
		}
	}()
	for g := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for ctx.Err() == nil {
				p, keys := pick(r)
				if g == 2 {
					if err := s.WriteBodies(io.Discard, keys); err != nil {
						fail(err)
					}
					continue
				}
				got, err := s.Get(p.k)
				if err != nil {
					fail(err)
					return
				}
				if !bytes.Equal(got, p.body) {
					fail(errWrongBytes(p.k))
					return
				}
				if !s.Has(p.k) {
					fail(errWrongBytes(p.k))
					return
				}
			}
		}()
	}

	for range 40 {
		keys := l.entries(5, 4, 200)
		mu.Lock()
		for _, k := range keys[:2] {
			stable = append(stable, published{k: k, body: l.want[k]})
			isStable[k] = true
		}
		mu.Unlock()
		live = append(live, l.live(keys)...)
		// Of the older ones, a random half goes; the stable stay.
		keep := live[:0]
		for _, x := range live {
			if isStable[x.Key()] || rand.IntN(2) == 0 {
				keep = append(keep, x)
			}
		}
		live = keep
		if err := s.Retain(live, l.last-2); err != nil {
			fail(err)
			break
		}
		if ctx.Err() != nil {
			break
		}
	}
	cancel()
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	if st := s.Stats(); st.RelocatedBodies == 0 || st.RewrittenBodies == 0 || st.DeletedFiles == 0 {
		t.Fatalf("nothing relocated, rewritten or deleted: %+v", st)
	}
}

type errWrongBytes Key

func (e errWrongBytes) Error() string { return "wrong bytes or Has false for " + Key(e).String() }
