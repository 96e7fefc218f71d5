package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	raftwal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/metadb"

	"github.com/raftmq/raftmq/proto"
)

// soloConfig is a lone node's configuration on dir (kept across restarts).
func soloConfig(dir, store string) Config {
	return Config{
		NodeID:  "solo",
		DataDir: dir,
		Logger:  discardLogger(),
		GroupConfig: GroupConfig{
			LogStore:           store,
			RaftAddr:           "127.0.0.1:0",
			HeartbeatTimeout:   100 * time.Millisecond,
			ElectionTimeout:    100 * time.Millisecond,
			LeaderLeaseTimeout: 50 * time.Millisecond,
		},
		MembershipConfig: MembershipConfig{
			GossipAddr: "127.0.0.1:0",
		},
	}
}

// runSolo starts a lone node on dir, commits a few entries, lets before
// act on it (a snapshot) and stops it.
func runSolo(t *testing.T, dir, store string, before func(n *Node)) {
	t.Helper()
	n, err := Start(context.Background(), soloConfig(dir, store))
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tick := &proto.Command{Cmd: &proto.Command_Tick{Tick: &proto.Tick{}}}
	for range 20 {
		if _, err := n.Submit(ctx, tick); err != nil {
			t.Fatal(err)
		}
	}
	if before != nil {
		before(n)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
}

// sealWithoutIndex leaves the write-ahead log in dir as raft-wal v0.4.0's
// tail truncation could (its issue #31): the segment holding the log
// recorded as sealed in the meta database, with no index block written,
// and a new tail after it, holding one more entry when more is set. It
// returns the sealed segment's file.
func sealWithoutIndex(t *testing.T, dir string, more bool) string {
	t.Helper()
	w, err := raftwal.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	last, err := w.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	var lastLog raft.Log
	if err := w.GetLog(last, &lastLog); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	var meta metadb.BoltMetaDB
	st, err := meta.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	n := len(st.Segments)
	if n == 0 || !st.Segments[n-1].SealTime.IsZero() {
		t.Fatalf("no open tail segment in %+v", st.Segments)
	}
	sealed := st.Segments[n-1]
	tail := sealed
	sealed.SealTime, sealed.IndexStart, sealed.MaxIndex = time.Now(), 0, last
	tail.ID, tail.BaseIndex, tail.MinIndex, tail.CreateTime = st.NextSegmentID, last+1, last+1, time.Now()
	st.NextSegmentID++
	st.Segments = append(st.Segments[:n-1], sealed, tail)
	if err := meta.CommitState(st); err != nil {
		t.Fatal(err)
	}
	if err := meta.Close(); err != nil {
		t.Fatal(err)
	}
	if more {
		w, err := raftwal.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.StoreLogs([]*raft.Log{{Index: last + 1, Term: lastLog.Term, Type: raft.LogNoop}}); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, fmt.Sprintf("%020d-%016x.wal", sealed.BaseIndex, sealed.ID))
}

// snapshotNow has a node take a snapshot.
func snapshotNow(t *testing.T) func(n *Node) {
	return func(n *Node) {
		if err := n.group.Raft().Snapshot().Error(); err != nil {
			t.Fatal(err)
		}
	}
}

// snapshotState is the state file of the snapshot in dir.
func snapshotState(t *testing.T, dir string) string {
	t.Helper()
	states, err := filepath.Glob(filepath.Join(dir, "snapshots", "*", "state.bin"))
	if err != nil || len(states) == 0 {
		t.Fatalf("no snapshot state in %s: %v", dir, err)
	}
	return states[0]
}

// TestStart_DamagedDataIsAnError checks that a node whose log, meta
// database or snapshots cannot be read fails to start with a *DataError
// naming the file and the recovery procedure, instead of panicking (raft
// panics when an entry it reads at start cannot be read).
func TestStart_DamagedDataIsAnError(t *testing.T) {
	garbage := func(path string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(strings.Repeat("not a database ", 512)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name, store string
		before      func(n *Node)
		damage      func(t *testing.T, dir string) (file string)
	}{
		// raft reads the last entry first and returns an error.
		{"last entry in a sealed segment without index", LogStoreWAL, nil, func(t *testing.T, dir string) string {
			return sealWithoutIndex(t, filepath.Join(dir, "wal"), false)
		}},
		// raft reads the last entry, then panics on an earlier one while
		// it looks for configuration changes: what raft-wal v0.4.0 left.
		{"earlier entries in a sealed segment without index", LogStoreWAL, nil, func(t *testing.T, dir string) string {
			return sealWithoutIndex(t, filepath.Join(dir, "wal"), true)
		}},
		{"garbage meta database", LogStoreWAL, nil, func(t *testing.T, dir string) string {
			path := filepath.Join(dir, "wal", metadb.FileName)
			garbage(path)
			return path
		}},
		{"garbage bolt log", LogStoreBolt, nil, func(t *testing.T, dir string) string {
			path := filepath.Join(dir, "raft.db")
			garbage(path)
			return path
		}},
		{"snapshot state damaged", LogStoreWAL, snapshotNow(t), func(t *testing.T, dir string) string {
			state := snapshotState(t, dir)
			garbage(state)
			return filepath.Dir(state)
		}},
		// Only the snapshot's sum tells: the state reads as before.
		{"snapshot state with a byte more", LogStoreWAL, snapshotNow(t), func(t *testing.T, dir string) string {
			state := snapshotState(t, dir)
			f, err := os.OpenFile(state, os.O_APPEND|os.O_WRONLY, 0)
			if err == nil {
				_, err = f.Write([]byte{0})
				if cerr := f.Close(); err == nil {
					err = cerr
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			return filepath.Dir(state)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			runSolo(t, dir, c.store, c.before)
			file := c.damage(t, dir)

			n, err := Start(context.Background(), soloConfig(dir, c.store))
			if err == nil {
				n.Close()
				t.Fatal("a node started on damaged data")
			}
			var de *DataError
			if !errors.As(err, &de) {
				t.Fatalf("start: %v (%T), want a *DataError", err, err)
			}
			if !strings.Contains(de.Path, file) {
				t.Errorf("error names %q, want %q", de.Path, file)
			}
			wants := []string{file, "move its data dir aside", RecoveryDoc}
			if strings.Contains(c.name, "byte more") {
				wants = append(wants, "CRC mismatch")
			}
			for _, want := range wants {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}

			// The documented way back for a lone node's dir: an empty data
			// dir starts (it has nothing to catch up from, but it starts).
			if err := os.RemoveAll(dir); err != nil {
				t.Fatal(err)
			}
			n, err = Start(context.Background(), soloConfig(dir, c.store))
			if err != nil {
				t.Fatalf("start on an emptied data dir: %v", err)
			}
			n.Close()
		})
	}
}
