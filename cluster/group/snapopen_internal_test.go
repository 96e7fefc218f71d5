package group

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/raftmq/raftmq/bodies"
)

// framedSnap writes a node's own snapshot (framed, bodies not carried)
// of state naming live, and returns its id.
func framedSnap(t *testing.T, s *SnapshotStore, index uint64, state []byte, live []bodies.Live) string {
	t.Helper()
	var b bytes.Buffer
	if err := writeSnapshot(&b, bytes.NewReader(state), live); err != nil {
		t.Fatal(err)
	}
	return snap(t, s, index, b.Bytes())
}

// appendByte damages snapshot id's state file as nothing but its sum can
// tell: one byte more after its end.
func appendByte(t *testing.T, s *SnapshotStore, id string) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(s.dir, id, "state.bin"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte{0}); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func bodyStore(t *testing.T) *bodies.Store {
	t.Helper()
	bs, err := bodies.Open(filepath.Join(t.TempDir(), "bodies"), raft.NewInmemStore(), bodies.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bs.Close() })
	return bs
}

// The framing alone says where the named bodies are listed and how long
// their stream is: what a list read whole gives.
func TestSkimFile_FindsTheListFromTheFraming(t *testing.T) {
	live := []bodies.Live{{Index: 3, Pos: 0, Size: 10}, {Index: 3, Pos: 1, Size: 1 << 20}, {Index: 9, Pos: 4, Size: 0}}
	state := bytes.Repeat([]byte("state"), 3*maxChunk/5) // three chunks and a bit
	var b bytes.Buffer
	if err := writeSnapshot(&b, bytes.NewReader(state), live); err != nil {
		t.Fatal(err)
	}
	file := b.Bytes()
	framed, l, follow, err := skimFile(bytes.NewReader(file), int64(len(file)))
	if err != nil || !framed || follow {
		t.Fatalf("skim: framed %v follow %v err %v", framed, follow, err)
	}
	if want := bodies.StreamLen(live); l.streamLen != want {
		t.Errorf("stream length %d, want %d", l.streamLen, want)
	}
	sr := &snapshotReader{r: bufioOf(file[l.at:])}
	got, err := sr.bodyList()
	if err != nil || len(got) != len(live) {
		t.Fatalf("list at %d: %v, %v", l.at, got, err)
	}
	for i := range live {
		if got[i] != live[i] {
			t.Errorf("body %d: %+v, want %+v", i, got[i], live[i])
		}
	}

	// A chunk's length past the end of the file is a damaged frame, not
	// a read past it.
	cut := file[:len(file)/2]
	if _, _, _, err := skimFile(bytes.NewReader(cut), int64(len(cut))); !errors.Is(err, errSnapshotFraming) {
		t.Errorf("skim of half a file: %v, want %v", err, errSnapshotFraming)
	}
	// A file that is not framed is the state alone.
	if framed, _, _, err := skimFile(strings.NewReader("RMQS and more"), 13); framed || err != nil {
		t.Errorf("unframed file: framed %v, %v", framed, err)
	}
	if _, _, _, err := skimFile(strings.NewReader("RM"), 2); err == nil {
		t.Error("a 2-byte file skimmed without an error")
	}
}

// A node's own snapshot sent whole: the file, the marker and token, the
// stream of its bodies, as long as the size Open gave.
func TestSnapshotOpen_OwnSnapshotWithItsBodies(t *testing.T) {
	s := reapStore(t, t.TempDir(), 0)
	bs := &bodiesSnapshots{SnapshotStore: s, store: bodyStore(t), token: newBodyToken()}
	id := framedSnap(t, s, 10, []byte("the state"), nil)
	meta, rc, err := bs.Open(id)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(got)) != meta.Size {
		t.Errorf("read %d bytes, Open said %d", len(got), meta.Size)
	}
	sr := &snapshotReader{r: bufioOf(got)}
	state, framed, err := sr.state(0)
	if err != nil || !framed || string(state) != "the state" {
		t.Fatalf("state %q framed %v: %v", state, framed, err)
	}
	if _, err := sr.bodyList(); err != nil {
		t.Fatal(err)
	}
	if follow, tok, err := sr.follow(); err != nil || !follow || tok != bs.token {
		t.Fatalf("follow %v token %x: %v", follow, tok, err)
	}
	if err := rc.Close(); err != nil {
		t.Fatal(err)
	}
	if n := s.readers[id]; n != 0 {
		t.Errorf("%d readers counted after the close", n)
	}
}

// A damaged snapshot's sum fails every reader before the file's bytes
// count: a send stops before the marker (the follower never has the
// whole stream), a read to the end gets the mismatch instead of io.EOF,
// and the store records why.
func TestSnapshotOpen_ADamagedFileFailsItsReaders(t *testing.T) {
	s := reapStore(t, t.TempDir(), 0)
	bs := &bodiesSnapshots{SnapshotStore: s, store: bodyStore(t), token: newBodyToken()}
	own := framedSnap(t, s, 10, []byte("the state"), nil)
	appendByte(t, s, own)
	meta, rc, err := bs.Open(own)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	if err == nil || !strings.Contains(err.Error(), "CRC mismatch") {
		t.Fatalf("send of a damaged snapshot: %v, want a CRC mismatch", err)
	}
	if int64(len(got)) >= meta.Size-tokenLen {
		t.Errorf("%d of %d bytes sent, the marker among them", len(got), meta.Size)
	}
	if c := checkedOf(rc); c == nil || c.verify() == nil {
		t.Error("the reader's sum is not checked")
	}
	rc.Close()
	if err := s.failed[own]; err == nil || !strings.Contains(err.Error(), "CRC mismatch") {
		t.Errorf("store records %v for the damaged snapshot", err)
	}

	// Not framed (or carrying its bodies): read to the end.
	raw := snap(t, s, 11, []byte("RMQS a state written before framing"))
	appendByte(t, s, raw)
	_, rc, err = bs.Open(raw)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(rc); err == nil || !strings.Contains(err.Error(), "CRC mismatch") {
		t.Errorf("read of a damaged unframed snapshot to its end: %v, want a CRC mismatch", err)
	}
	rc.Close()

	// Undamaged, the same reads end cleanly.
	_, rc, err = bs.Open(snap(t, s, 12, []byte("RMQS another")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(rc); err != nil {
		t.Errorf("read of a sound snapshot: %v", err)
	}
	rc.Close()
}

// A reader closed before the sum is done stops it; the store no longer
// counts it, and a closed file's sum is not a pass.
func TestSnapshotOpen_CloseStopsTheSum(t *testing.T) {
	s := reapStore(t, t.TempDir(), 0)
	id := snap(t, s, 10, bytes.Repeat([]byte{7}, 8<<20))
	_, f, err := s.openFile(id)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Errorf("second close: %v", err)
	}
	if n := s.readers[id]; n != 0 {
		t.Errorf("%d readers counted after the close", n)
	}
	if err := f.verify(); err != nil && !errors.Is(err, errSnapshotClosed) {
		t.Errorf("verify after close: %v", err)
	}
	if s.failed[id] != nil {
		t.Errorf("a close recorded as a failure: %v", s.failed[id])
	}
}

func bufioOf(b []byte) *bufio.Reader { return bufio.NewReader(bytes.NewReader(b)) }

// A snapshot a follower received carries its bodies, and its restore
// reads the bodies the list names and stops short of the file's end: only
// the sum tells a byte more. The restore checks it before it stores a body
// or takes the state.
func TestRestore_ChecksTheSumOfASnapshotThatCarriesItsBodies(t *testing.T) {
	dir := t.TempDir()
	n := openRelocNode(t, filepath.Join(dir, "leader"))
	keys := n.fill(t)
	state, index := n.snapshot(t)
	n.waitIdle()
	own := n.st.Snapshots()
	_, rc, err := n.f.Snapshots(own).Open(snap(t, own, index, state))
	if err != nil {
		t.Fatal(err)
	}
	sent, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	rc.Close()

	for _, damaged := range []bool{false, true} {
		r := openRelocNode(t, filepath.Join(dir, fmt.Sprint("follower-", damaged)))
		rs := r.st.Snapshots()
		id := snap(t, rs, index, sent)
		if damaged {
			appendByte(t, rs, id)
		}
		_, rc, err := r.f.Snapshots(rs).Open(id)
		if err != nil {
			t.Fatal(err)
		}
		// The restore's buffer is sized for the state, not for the
		// bodies that follow it.
		stateBytes, _, err := (&snapshotReader{r: bufioOf(sent)}).state(0)
		if err != nil {
			t.Fatal(err)
		}
		if c := checkedOf(rc); c == nil || c.stateSize() < int64(len(stateBytes)) || c.stateSize() >= int64(len(sent))-int64(len(keys))*relocBody {
			t.Fatalf("state size hint %v for a state of %d bytes in a snapshot of %d", c, len(stateBytes), len(sent))
		}
		err = r.f.Restore(rc)
		if !damaged {
			if err != nil {
				t.Fatalf("restore: %v", err)
			}
			checkBodies(t, r.store, keys)
			continue
		}
		if err == nil || !strings.Contains(err.Error(), "CRC mismatch") {
			t.Fatalf("restore of a damaged snapshot: %v, want a CRC mismatch", err)
		}
		if b, err := r.store.Get(keys[0]); err == nil {
			t.Errorf("a body of the damaged snapshot was stored (%d bytes)", len(b))
		}
		if got := r.f.state.m.AppliedIndex(); got != 0 {
			t.Errorf("the damaged snapshot's state was taken: applied index %d", got)
		}
	}
}
