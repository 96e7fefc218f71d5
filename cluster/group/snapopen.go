package group

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc64"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"

	"github.com/raftmq/raftmq/bodies"
)

// Opening a snapshot. raft's file store sums a snapshot's whole state file
// (CRC-64) before it hands out a reader, and bodiesSnapshots read the file
// through once more to find the bodies it names, then opened it through
// raft again: a node that restarted with 5,000,000 queued messages read
// its 300 MB snapshot four times and summed it twice before the state
// machine read a byte (a summed pass is about 0.2 s of a core, a plain
// one 0.06 s), while three nodes restored at once on two cores.
//
// So the store opens its snapshots itself: the files and the checksum are
// raft's (its store writes them, meta.json holds the sum), but the sum is
// taken on a goroutine of its own, beside whatever reads the snapshot,
// and checked before anything read from the file counts:
//
//   - a restore checks it before it stores a body or takes the state
//     (FSM.Restore), so a damaged snapshot fails the restore and raft
//     goes on to the one before, as when its own Open refused it;
//   - a reader that reaches the end of the file is given the mismatch in
//     place of io.EOF;
//   - a node's own snapshot sent to a follower checks it before its
//     bodies follow (withBodies), so the follower never receives the
//     whole stream and never installs it.
//
// The bodies a snapshot names are found from its framing without reading
// the state: each chunk's length leads to the next, and to the list.

// snapshotMeta is a snapshot's meta.json as raft's file store writes it:
// raft's SnapshotMeta and the CRC-64 (ECMA) of the state file.
type snapshotMeta struct {
	raft.SnapshotMeta
	CRC []byte
}

// errSnapshotClosed is a sum not finished because the file was closed.
var errSnapshotClosed = errors.New("cluster: snapshot closed before its checksum was checked")

// snapshotFile is a snapshot's open state file, summed from the open on.
type snapshotFile struct {
	f    *os.File
	size int64
	id   string
	want []byte
	fail func(error) // told a mismatch or a read error

	stop atomic.Bool
	done chan struct{}
	err  error // the sum's outcome, once done is closed

	closeOnce sync.Once
	closed    func() // told once when the file is closed
}

// openSnapshotFile opens snapshot id in dir and starts summing it.
func openSnapshotFile(dir, id string, fail func(error), closed func()) (*raft.SnapshotMeta, *snapshotFile, error) {
	b, err := os.ReadFile(filepath.Join(dir, id, "meta.json"))
	if err != nil {
		return nil, nil, err
	}
	var m snapshotMeta
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, nil, fmt.Errorf("cluster: snapshot %s: meta.json: %w", id, err)
	}
	f, err := os.Open(filepath.Join(dir, id, "state.bin"))
	if err != nil {
		return nil, nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	sf := &snapshotFile{f: f, size: st.Size(), id: id, want: m.CRC, fail: fail, closed: closed, done: make(chan struct{})}
	go sf.sum()
	return &m.SnapshotMeta, sf, nil
}

// sum checks the file's CRC-64 against meta.json's, reading it to its end
// as raft's store does.
func (s *snapshotFile) sum() {
	defer close(s.done)
	h := crc64.New(crc64.MakeTable(crc64.ECMA))
	buf := make([]byte, 1<<20)
	for off := int64(0); ; {
		if s.stop.Load() {
			s.err = errSnapshotClosed
			return
		}
		n, err := s.f.ReadAt(buf, off)
		h.Write(buf[:n])
		off += int64(n)
		if err == io.EOF {
			break
		}
		if err != nil {
			s.err = fmt.Errorf("cluster: snapshot %s: %w", s.id, err)
			s.fail(s.err)
			return
		}
	}
	if got := h.Sum(nil); !bytes.Equal(got, s.want) {
		s.err = fmt.Errorf("cluster: snapshot %s: CRC mismatch (meta.json %x, state file %x)", s.id, s.want, got)
		s.fail(s.err)
	}
}

// verify waits for the sum and says whether the file is what was written.
func (s *snapshotFile) verify() error {
	<-s.done
	return s.err
}

// Close stops the sum and closes the file.
func (s *snapshotFile) Close() error {
	s.stop.Store(true)
	<-s.done
	var err error
	s.closeOnce.Do(func() {
		err = s.f.Close()
		if s.closed != nil {
			s.closed()
		}
	})
	return err
}

// section is n bytes of the file from off, buffered.
func (s *snapshotFile) section(off, n int64) *bufio.Reader {
	return bufio.NewReaderSize(io.NewSectionReader(s.f, off, n), 64<<10)
}

// stream is the whole file, to be read through: its end is the sum's.
// stateSize bounds the state machine's part of it, 0 if not known.
func (s *snapshotFile) stream(stateSize int64) io.ReadCloser {
	return &checkedStream{r: s.section(0, s.size), file: s, state: stateSize}
}

// checkedSnapshot is a snapshot reader whose file's sum a restore checks
// before it takes what it read.
type checkedSnapshot interface {
	verify() error
	// stateSize bounds the state machine's part of the snapshot, so that
	// a restore reads it into one buffer.
	stateSize() int64
}

// checkedStream is a snapshot file read through, the sum checked at its end.
type checkedStream struct {
	r     io.Reader
	file  *snapshotFile
	state int64
}

func (c *checkedStream) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if err == io.EOF {
		if verr := c.file.verify(); verr != nil {
			return n, verr
		}
	}
	return n, err
}

func (c *checkedStream) Close() error     { return c.file.Close() }
func (c *checkedStream) verify() error    { return c.file.verify() }
func (c *checkedStream) stateSize() int64 { return c.state }

// bodyListing is where a framed snapshot lists the bodies it names, and
// what the stream of those bodies (bodies.Store.WriteBodies) will take.
type bodyListing struct {
	at        int64 // the list's offset in the file
	streamLen int64
}

// skimFile reads a snapshot file's framing: whether it is framed, where
// its list of bodies is, and whether bodies follow the list. It reads the
// chunks' lengths and the list, not the state.
func skimFile(r io.ReaderAt, size int64) (framed bool, l bodyListing, follow bool, err error) {
	head := &snapshotReader{r: bufio.NewReaderSize(io.NewSectionReader(r, 0, size), 16)}
	if framed, err = head.framed(); !framed || err != nil {
		return framed, l, false, err
	}
	off := int64(len(snapFrameMagic) + 1) // the magic and the version
	for {
		var h [4]byte
		if _, err := r.ReadAt(h[:], off); err != nil {
			return true, l, false, errSnapshotFraming
		}
		off += int64(len(h))
		n := binary.BigEndian.Uint32(h[:])
		if n == 0 {
			break
		}
		if n > maxChunk || off+int64(n) > size {
			return true, l, false, errSnapshotFraming
		}
		off += int64(n)
	}
	l.at = off
	sr := &snapshotReader{r: bufio.NewReaderSize(io.NewSectionReader(r, off, size-off), 64<<10)}
	var count, total int64
	err = sr.eachListed(func(n uint64) {}, func(b bodies.Live) {
		count++
		total += int64(b.Size)
	})
	if err != nil {
		return true, l, false, err
	}
	l.streamLen = bodies.StreamLenOf(count, total)
	follow, _, err = sr.follow()
	return true, l, follow, err
}
