package group

import (
	"archive/tar"
	"compress/gzip"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/raftmq/raftmq/proto"
)

// The log in testdata/landed-wal.tar.gz was written by the release before
// the group had a package of its own (testdata/README.md says how); its
// state after the last entry has this digest.
const (
	landedLastIndex = 212
	landedDigest    = "4a71b2cba4310bb8fdb0803f6163a1bbaf3e7a1d4827a305bf8c5887ef99c07f"
)

// untar unpacks a gzipped tar of a data dir into dir.
func untar(t *testing.T, archive, dir string) {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, filepath.FromSlash(h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(path, 0o755); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			out, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(out, tr); err != nil {
				t.Fatal(err)
			}
			if err := out.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// A log the landed release wrote opens in a group's storage, its large
// entry read back from beside the log, and replays through the group's
// state machine adapter to the same state.
func TestStorage_LandedLogReplaysToItsDigest(t *testing.T) {
	dir := t.TempDir()
	untar(t, filepath.Join("testdata", "landed-wal.tar.gz"), dir)
	st, err := OpenStorage(dir, StorageOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if st.Kind() != LogStoreWAL {
		t.Fatalf("kind %s, want %s", st.Kind(), LogStoreWAL)
	}
	logs := st.Logs(func() uint64 { return 0 })
	first, err := logs.FirstIndex()
	if err != nil {
		t.Fatal(err)
	}
	last, err := logs.LastIndex()
	if err != nil || first != 1 || last != landedLastIndex {
		t.Fatalf("log %d..%d, %v; want 1..%d", first, last, err, landedLastIndex)
	}
	state, applied := NewState(), NewAppliedIndex()
	f := NewFSM(FSMConfig{NodeID: "n1", State: state, Applied: applied, Proposals: &Proposals{}, Storage: st})
	large := 0
	var batch []*raft.Log
	for i := first; i <= last; i++ {
		l := &raft.Log{}
		if err := logs.GetLog(i, l); err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		if len(l.Data) > inlineMax {
			large++
		}
		batch = append(batch, l)
	}
	for i, out := range f.ApplyBatch(batch) {
		res, _ := out.([]*proto.Result)
		for _, r := range res {
			if r.GetCode() != 0 {
				t.Fatalf("entry %d: %d %s", batch[i].Index, r.GetCode(), r.GetText())
			}
		}
	}
	m := state.Machine()
	if large != 1 {
		t.Errorf("%d entries read from beside the log, want 1", large)
	}
	if i, _ := applied.Load(); i != landedLastIndex {
		t.Errorf("applied index %d, want %d", i, landedLastIndex)
	}
	if d := m.Digest(); hex.EncodeToString(d[:]) != landedDigest || m.AppliedIndex() != landedLastIndex {
		t.Fatalf("replayed to %d with digest %x; the landed release reached %d with %s", m.AppliedIndex(), d, landedLastIndex, landedDigest)
	}
}
