package group

import (
	"testing"

	"github.com/hashicorp/raft"
)

// gapLog is a follower's log holding the entries of the given terms from
// index from on, with its snapshot at from-1 in term snapTerm.
func gapLog(t *testing.T, from uint64, terms ...uint64) raft.LogStore {
	t.Helper()
	s := raft.NewInmemStore()
	for i, term := range terms {
		if err := s.StoreLog(&raft.Log{Index: from + uint64(i), Term: term, Type: raft.LogCommand}); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func appendReq(prev, prevTerm uint64, terms ...uint64) *raft.AppendEntriesRequest {
	a := &raft.AppendEntriesRequest{PrevLogEntry: prev, PrevLogTerm: prevTerm}
	for i, term := range terms {
		a.Entries = append(a.Entries, &raft.Log{Index: prev + 1 + uint64(i), Term: term, Type: raft.LogCommand})
	}
	return a
}

func snapAt(index, term uint64) func() (uint64, uint64, bool) {
	return func() (uint64, uint64, bool) { return index, term, true }
}

func TestMendSnapshotGap(t *testing.T) {
	for _, c := range []struct {
		name     string
		log      []uint64 // terms of the follower's entries 207...
		snapTerm uint64
		req      *raft.AppendEntriesRequest
		mended   bool
		prev     uint64 // after
		first    uint64 // the first entry left, 0 for none
	}{
		{"the lost answer: continues after the follower's entries", []uint64{2, 2}, 2, appendReq(206, 2, 2, 2, 2, 2), true, 208, 209},
		{"every entry held already", []uint64{2, 2}, 2, appendReq(206, 2, 2, 2), true, 208, 0},
		{"the snapshot's term differs", []uint64{2, 2}, 2, appendReq(206, 3, 3, 3, 3), false, 206, 207},
		{"a held entry's term differs", []uint64{2, 1}, 2, appendReq(206, 2, 2, 2, 2), false, 206, 207},
		{"the follower holds more than the request carries", []uint64{2, 2, 2}, 2, appendReq(206, 2, 2, 2), false, 206, 207},
		{"no entries", []uint64{2, 2}, 2, appendReq(206, 2), false, 206, 0},
		{"prev is not the snapshot", []uint64{2, 2}, 2, appendReq(205, 2, 2, 2, 2, 2), false, 205, 206},
		{"prev is the follower's last entry", []uint64{2, 2}, 2, appendReq(208, 2, 2), false, 208, 209},
	} {
		t.Run(c.name, func(t *testing.T) {
			logs := gapLog(t, 207, c.log...)
			got := mendSnapshotGap(c.req, logs, snapAt(206, c.snapTerm))
			first := uint64(0)
			if len(c.req.Entries) > 0 {
				first = c.req.Entries[0].Index
			}
			if got != c.mended || c.req.PrevLogEntry != c.prev || first != c.first {
				t.Fatalf("mended %v, prev %d, first entry %d; want %v, %d, %d", got, c.req.PrevLogEntry, first, c.mended, c.prev, c.first)
			}
			if got && c.req.PrevLogTerm != c.log[len(c.log)-1] {
				t.Fatalf("prev term %d, want the follower's last entry's %d", c.req.PrevLogTerm, c.log[len(c.log)-1])
			}
		})
	}
}

// A follower's log that holds the snapshot's index itself is left to raft.
func TestMendSnapshotGap_PrevInTheLog(t *testing.T) {
	logs := gapLog(t, 206, 2, 2, 2)
	a := appendReq(206, 2, 2, 2, 2)
	if mendSnapshotGap(a, logs, snapAt(206, 2)) || a.PrevLogEntry != 206 || len(a.Entries) != 3 {
		t.Fatalf("mended a request raft can check itself: prev %d, %d entries", a.PrevLogEntry, len(a.Entries))
	}
}
