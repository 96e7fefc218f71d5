package bodies

import (
	"bytes"
	"testing"

	"github.com/raftmq/raftmq/proto"
	gproto "google.golang.org/protobuf/proto"
)

// An entry the cache keeps gives every position the body or the error
// entryBody gives, on its first read (a scan up to the command) and on
// the reads after it (from the scan of all its commands).
func TestCachedBody_AgreesWithEntryBody(t *testing.T) {
	for name, data := range entryCases(t) {
		t.Run(name, func(t *testing.T) {
			var env proto.Envelope
			_ = gproto.Unmarshal(data, &env)
			n := uint32(len(env.GetCommands()))
			c := &cached{data: data}
			for round := range 3 {
				for pos := range n + 2 {
					want, werr := entryBody(data, pos)
					got, gerr := c.body(pos)
					if (werr == nil) != (gerr == nil) || (werr != nil && werr.Error() != gerr.Error()) {
						t.Fatalf("round %d, position %d: error %v, entryBody's %v", round, pos, gerr, werr)
					}
					if !bytes.Equal(got, want) {
						t.Fatalf("round %d, position %d: %d bytes, entryBody's %d", round, pos, len(got), len(want))
					}
				}
			}
		})
	}
}

// A consumer's reads of a batch entry's bodies, one after the other, scan
// its commands once, not once each up to the body read.
func TestGet_ABatchEntryIsScannedOnce(t *testing.T) {
	l := inmemLog(t)
	keys := l.entries(1, 130, 16)
	s := openStore(t, t.TempDir(), l, Options{})
	for _, k := range keys {
		if _, err := s.Get(k); err != nil {
			t.Fatal(err)
		}
	}
	c, ok := s.cache.get(keys[0].Index)
	if !ok || c.scan.Load() == nil {
		t.Fatal("the entry read 130 times was never scanned whole")
	}
	l.check(s, keys)
}
