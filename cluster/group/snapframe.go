package group

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/hashicorp/raft"

	"github.com/raftmq/raftmq/bodies"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
	"github.com/raftmq/raftmq/queue"
)

// Message bodies stay out of the state machine (queue.Body names each by
// the entry that published it): a node reads them back from its raft log,
// or from its body files (package bodies) once the log prefix holding them
// is compacted. Three things make that work:
//
//   - the group's log (group.Storage.Logs) keeps raft from deleting log
//     entries whose bodies the body store may still be asked for
//     (bodies.Store.Pin);
//   - a snapshot is the state's metadata and the list of bodies it names
//     (snapshot framing below), so its cost follows the metadata, and
//     the body store relocates what the compaction would take away
//     (bodies.Store.Retain) before raft compacts;
//   - a snapshot sent to a follower carries the bodies: bodiesSnapshots
//     appends them, read from this node's store, as raft reads the file,
//     and the follower's Restore stores them in its body files.

// Snapshot framing. A snapshot file written by this version is:
//
//	magic "RMQF", version byte 1
//	the state machine's snapshot in chunks: u32 length, bytes; length 0 ends it
//	u64 count of named bodies, then count x (u64 index, u32 pos, u32 size)
//	one byte: bodiesNone (a node's own snapshot: the bodies are in its
//	  log or body files), or bodiesFollow, a 16-byte token and the
//	  named bodies in order (bodies.Store.WriteBodies)
//
// A file that begins with the state machine's own magic ("RMQS") was
// written before bodies left the state: it is the state alone, bodies
// inline.
const (
	snapFrameMagic   = "RMQF"
	snapFrameVersion = 1
	bodiesNone       = 0
	bodiesFollow     = 1
	tokenLen         = 16
	keyLen           = 16 // u64 index, u32 pos, u32 size
	maxChunk         = 1 << 20
)

// newBodyToken marks the bodies a node appends to its own snapshots
// (bodiesSnapshots), fresh at every start: a restore that reads its own
// node's token needs none of them, they came from its own store.
func newBodyToken() [tokenLen]byte {
	var t [tokenLen]byte
	_, _ = rand.Read(t[:])
	return t
}

// liveBodies is the list of bodies a snapshot names, built in place: a
// list of the state's own type converted after would hold two lists of
// every queued message at once (200 MB at 5,000,000), and that burst of
// allocation beside the applies had the collector take a processor for
// 100 ms at a time. delayed is the size of those that wait in delayed
// exchanges, counted in the same walk.
func liveBodies(bl fsm.BodyLister) (live []bodies.Live, delayed int64) {
	out := make([]bodies.Live, 0, bl.BodyCount())
	bl.EachBody(func(b queue.Body, isDelayed bool) {
		out = append(out, bodies.Live{Index: b.Index, Pos: b.Pos, Size: b.Size})
		if isDelayed {
			delayed += int64(b.Size)
		}
	})
	return queue.SortedBodies(out, func(l bodies.Live) queue.Body { return queue.Body{Index: l.Index, Pos: l.Pos} }), delayed
}

func keysOf(live []bodies.Live) []bodies.Key {
	out := make([]bodies.Key, len(live))
	for i, l := range live {
		out[i] = l.Key()
	}
	return out
}

// writeSnapshot writes a snapshot file: the state and the bodies it names.
func writeSnapshot(w io.Writer, state io.WriterTo, live []bodies.Live) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	bw.WriteString(snapFrameMagic)
	bw.WriteByte(snapFrameVersion)
	cw := &chunkWriter{w: bw}
	if _, err := state.WriteTo(cw); err != nil {
		return err
	}
	if err := cw.end(); err != nil {
		return err
	}
	var b [keyLen]byte
	binary.BigEndian.PutUint64(b[:8], uint64(len(live)))
	bw.Write(b[:8])
	var pace queue.Pace
	for _, l := range live {
		pace.Step()
		binary.BigEndian.PutUint64(b[:8], l.Index)
		binary.BigEndian.PutUint32(b[8:12], l.Pos)
		binary.BigEndian.PutUint32(b[12:16], l.Size)
		bw.Write(b[:])
	}
	bw.WriteByte(bodiesNone)
	return bw.Flush()
}

// chunkWriter frames what it is given in chunks of at most maxChunk.
type chunkWriter struct {
	w   *bufio.Writer
	err error
}

func (c *chunkWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 && c.err == nil {
		k := min(len(p), maxChunk)
		var h [4]byte
		binary.BigEndian.PutUint32(h[:], uint32(k))
		if _, c.err = c.w.Write(h[:]); c.err == nil {
			_, c.err = c.w.Write(p[:k])
		}
		n += k
		p = p[k:]
	}
	return n, c.err
}

func (c *chunkWriter) end() error {
	if c.err != nil {
		return c.err
	}
	_, err := c.w.Write([]byte{0, 0, 0, 0})
	return err
}

// snapshotReader reads a snapshot file's parts in order.
type snapshotReader struct {
	r *bufio.Reader
}

var errSnapshotFraming = errors.New("cluster: snapshot damaged (framing)")

// framed reports whether the file is in the framed format and reads its
// header (false: the whole file is the state, written before framing).
func (s *snapshotReader) framed() (bool, error) {
	head, err := s.r.Peek(len(snapFrameMagic))
	if err != nil {
		return false, fmt.Errorf("cluster: snapshot too short: %w", err)
	}
	if string(head) != snapFrameMagic {
		return false, nil
	}
	var hdr [5]byte
	if _, err := io.ReadFull(s.r, hdr[:]); err != nil {
		return true, errSnapshotFraming
	}
	if hdr[4] != snapFrameVersion {
		return true, fmt.Errorf("cluster: snapshot framing version %d, this version reads %d: written by a newer version", hdr[4], snapFrameVersion)
	}
	return true, nil
}

// chunks copies the state machine's chunks to w, up to the empty chunk
// that ends them.
func (s *snapshotReader) chunks(w io.Writer) error {
	for {
		var h [4]byte
		if _, err := io.ReadFull(s.r, h[:]); err != nil {
			return errSnapshotFraming
		}
		n := binary.BigEndian.Uint32(h[:])
		if n == 0 {
			return nil
		}
		if n > maxChunk {
			return errSnapshotFraming
		}
		if _, err := io.CopyN(w, s.r, int64(n)); err != nil {
			return errSnapshotFraming
		}
	}
}

// state returns the state machine's snapshot bytes and whether the file
// is in the framed format; sizeHint, when known, bounds their length (a
// buffer grown by doubling copies a large state several times over).
func (s *snapshotReader) state(sizeHint int64) ([]byte, bool, error) {
	framed, err := s.framed()
	if err != nil {
		return nil, framed, err
	}
	var out bytes.Buffer
	if sizeHint > 0 && sizeHint <= maxStateHint {
		out.Grow(int(sizeHint))
	}
	if !framed {
		_, err = io.Copy(&out, s.r)
	} else {
		err = s.chunks(&out)
	}
	return out.Bytes(), framed, err
}

// maxStateHint bounds the buffer a restore allocates up front for the
// state: 4 GiB.
const maxStateHint = 1 << 32

// maxListedUpFront bounds the list of bodies a restore allocates before
// reading them: 4,194,304 (64 MiB).
const maxListedUpFront = 1 << 22

// bodyList reads the named bodies.
func (s *snapshotReader) bodyList() ([]bodies.Live, error) {
	var out []bodies.Live
	err := s.eachListed(func(n uint64) {
		// Sized from the count up to a bound, so that a damaged count
		// fails at the end of the file rather than in the allocation.
		out = make([]bodies.Live, 0, min(n, maxListedUpFront))
	}, func(l bodies.Live) { out = append(out, l) })
	if err != nil {
		return nil, err
	}
	return out, nil
}

// eachListed reads the list of named bodies: count is told how many the
// list says, then each is given to fn.
func (s *snapshotReader) eachListed(count func(uint64), fn func(bodies.Live)) error {
	var b [keyLen]byte
	if _, err := io.ReadFull(s.r, b[:8]); err != nil {
		return errSnapshotFraming
	}
	n := binary.BigEndian.Uint64(b[:8])
	count(n)
	for range n {
		if _, err := io.ReadFull(s.r, b[:]); err != nil {
			return errSnapshotFraming
		}
		fn(bodies.Live{
			Index: binary.BigEndian.Uint64(b[:8]),
			Pos:   binary.BigEndian.Uint32(b[8:12]),
			Size:  binary.BigEndian.Uint32(b[12:16]),
		})
	}
	return nil
}

// follow reads the byte that says whether bodies follow, and the token
// of the process that appended them.
func (s *snapshotReader) follow() (bool, [tokenLen]byte, error) {
	var tok [tokenLen]byte
	f, err := s.r.ReadByte()
	if err != nil {
		return false, tok, errSnapshotFraming
	}
	switch f {
	case bodiesNone:
		return false, tok, nil
	case bodiesFollow:
		if _, err := io.ReadFull(s.r, tok[:]); err != nil {
			return false, tok, errSnapshotFraming
		}
		return true, tok, nil
	}
	return false, tok, errSnapshotFraming
}

// bodiesSnapshots is the node's snapshot store, opening a node's own
// snapshot with its bodies appended (read lazily from the body store as
// raft reads the stream), so that a follower that installs it has them.
// A restore on this node reads this process's token and stops there.
type bodiesSnapshots struct {
	*SnapshotStore
	store *bodies.Store
	token [tokenLen]byte
}

func (s *bodiesSnapshots) Open(id string) (*raft.SnapshotMeta, io.ReadCloser, error) {
	meta, f, err := s.SnapshotStore.openFile(id)
	if err != nil {
		return nil, nil, err
	}
	// The framing says where the named bodies are listed and whether the
	// file already carries them (one received from a leader, or written
	// before bodies left the state).
	framed, listing, follow, err := skimFile(f.f, f.size)
	if err != nil {
		f.Close()
		err = fmt.Errorf("cluster: snapshot %s: %w", id, err)
		s.Fail(id, err)
		return nil, nil, err
	}
	switch {
	case !framed:
		return meta, f.stream(f.size), nil
	case follow:
		// The state is what comes before the list; the bodies after it
		// may be gigabytes.
		return meta, f.stream(listing.at), nil
	}
	own := meta.Size - 1 // the file without its bodiesNone byte
	m := *meta
	m.Size = own + 1 + tokenLen + listing.streamLen
	// The bodies must outlast the send: no Retain of a newer snapshot
	// deletes them or lets the log go until the reader is closed.
	return &m, &withBodies{file: f, head: f.section(0, own), listing: listing, store: s.store, token: s.token,
		release: s.store.Hold()}, nil
}

// withBodies is a node's own snapshot file followed by the bodies it
// names: the marker and token come first, and the bodies are listed and
// read from the store only once a reader goes past them (a follower being
// sent the snapshot; a restore on this node stops at the token). The
// file's sum is checked before the marker: a damaged file ends the send
// there, and the follower's install with it.
type withBodies struct {
	file    *snapshotFile
	head    io.Reader
	mark    []byte
	listing bodyListing
	store   *bodies.Store
	token   [tokenLen]byte
	release func()
	pr      *io.PipeReader
	state   int // 0 file, 1 marker, 2 bodies
}

func (w *withBodies) Read(p []byte) (int, error) {
	for {
		switch w.state {
		case 0:
			n, err := w.head.Read(p)
			if err == io.EOF {
				if verr := w.file.verify(); verr != nil {
					return n, verr
				}
				w.state = 1
				w.mark = append([]byte{bodiesFollow}, w.token[:]...)
				if n > 0 {
					return n, nil
				}
				continue
			}
			return n, err
		case 1:
			if len(w.mark) > 0 {
				n := copy(p, w.mark)
				w.mark = w.mark[n:]
				return n, nil
			}
			sr := &snapshotReader{r: w.file.section(w.listing.at, w.file.size-w.listing.at)}
			live, err := sr.bodyList()
			if err != nil {
				return 0, err
			}
			w.state = 2
			pr, pw := io.Pipe()
			w.pr = pr
			go func() { pw.CloseWithError(w.store.WriteBodies(pw, keysOf(live))) }()
		default:
			return w.pr.Read(p)
		}
	}
}

func (w *withBodies) verify() error    { return w.file.verify() }
func (w *withBodies) stateSize() int64 { return w.listing.at }

func (w *withBodies) Close() error {
	if w.pr != nil {
		w.pr.Close()
	}
	w.release()
	return w.file.Close()
}

// importBodies stores the bodies a snapshot from the leader carries.
func importBodies(store *bodies.Store, r io.Reader, live []bodies.Live) error {
	return store.ReadBodies(r, keysOf(live))
}

// batchBodies reads the bodies the effects of a batch name: from the
// batch's own entries when it published them (a consumer keeping pace
// never waits on the store), else from the node's body store.
type batchBodies struct {
	envs  map[uint64]*proto.Envelope // the batch's command entries by index
	store *bodies.Store
}

func (b *batchBodies) read(ref queue.Body) ([]byte, error) {
	if env := b.envs[ref.Index]; env != nil {
		if body, ok := fsm.ReadBody(env, ref); ok {
			return body, nil
		}
	}
	if b.store == nil {
		return nil, fmt.Errorf("cluster: body %d/%d: no body store", ref.Index, ref.Pos)
	}
	return b.store.Get(bodies.Key{Index: ref.Index, Pos: ref.Pos})
}

// holdDenseLog lowers the compaction point to below the oldest live body
// while the log is mostly live bodies: relocating such a log (a backlog
// waiting for its consumers) would copy it for next to no disk gained,
// and the copy competes with the traffic. Once consumers have taken more
// than half of it, the log is compacted and what is left relocated. Only
// the write-ahead log's size can be read cheaply (its segment files); a
// bolt log always relocates. walBytes is group.Storage.WALBytes.
//
// Bodies that wait in delayed exchanges (outOfOrder bytes of live) do not
// make a log dense: they are read as they fall due, each from another
// entry, and a body read from the log costs the read and decoding of its
// whole entry (a batch of publishes, often a hundred bodies or more)
// where a relocated one is read alone. Profiled with 1,000,000 delayed
// messages released at about 1,700 a second, such reads were half of the
// consumer's node's CPU; relocating copies each entry once.
func (f *FSM) holdDenseLog(live []bodies.Live, outOfOrder int64, to uint64, walBytes func() (int64, bool)) uint64 {
	// The oldest body only the log holds; bodies already in files pin
	// nothing.
	oldest, liveBytes := uint64(0), -outOfOrder
	for _, l := range live {
		if l.Index <= to && oldest == 0 && !f.bodies.InFile(l.Key()) {
			oldest = l.Index
		}
		liveBytes += int64(l.Size)
	}
	if oldest == 0 {
		return to
	}
	if logBytes, ok := walBytes(); !ok || 2*liveBytes < logBytes {
		return to
	}
	return oldest - 1
}

// relocateTo is the last entry whose live bodies a snapshot at index
// copies into body files, given raft's compaction point (raftTo: index -
// TrailingLogs) and the one holdDenseLog chose (compact). A log held
// dense is copied no further than compact. Otherwise, while bodies wait
// in delayed exchanges (outOfOrder bytes), those of the trailing entries
// are copied too: they are read as they fall due, a whole log entry for
// each, and raft keeps its trailing entries all the same.
func relocateTo(index, raftTo, compact uint64, outOfOrder int64) uint64 {
	if outOfOrder > 0 && compact == raftTo {
		return index
	}
	return compact
}
