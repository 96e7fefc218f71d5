package group

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftmq/raftmq/fsm"
)

// Large entries travel beside the append.
//
// hashicorp/raft's network transport decodes an append with go-msgpack,
// which reads a byte string longer than 256 KiB by reallocating and
// copying it 256 KiB at a time: quadratic in the entry's size. A 72 MiB
// entry cost each follower over 10 GB of allocations and copies, and
// copies of tens of MiB that the collector cannot stop: the followers'
// world stood still for up to 2 s at a time, heartbeats and gossip were
// missed, leaders were deposed and the publish nacked again and again. A
// 1 MiB batch of small publishes cost 2.5 MiB.
//
// So a leader sends the data of an entry of at least bulkMin bytes over a
// connection of its own (the group's bulk layer on the node's raft port:
// read into one buffer of the announced size), waits for the follower to
// say it holds it, and sends the append with that entry's data left out
// and a marker in its Extensions naming its length and checksum. The
// follower's bridge (GapBridge) puts the data back before raft sees the
// append, or answers the append with an error when it does not hold it,
// and the leader sends both again. A follower that does not answer on the
// bulk layer (a release before it, whose first byte check refuses the
// connection) gets its entries inline, as before, and is asked again
// after bulkRetry.

const (
	// bulkMin is the least entry data sent beside the append: at this
	// size go-msgpack already copies it four times.
	bulkMin = 1 << 20
	// bulkRetry is how long a follower that refused the bulk layer gets
	// its large entries inline before it is asked again.
	bulkRetry = 30 * time.Second
	// bulkKeep and bulkKeepBytes bound the entries a follower holds for
	// appends that have not come (a leader deposed between the two): the
	// oldest goes, though the newest always stays.
	bulkKeep      = 8
	bulkKeepBytes = 2 * MaxBulkEntry
	// bulkFrameLen is a frame's header: magic, term, index, length, crc.
	bulkFrameLen = 1 + 8 + 8 + 8 + 4
	bulkMagic    = byte('B')
	// MaxBulkEntry is the largest entry data sent beside an append: a
	// publish of the largest body a node may be configured to take, with
	// room for its properties. A larger one goes inline.
	MaxBulkEntry = fsm.MaxBodySize + 16<<20
	bulkAck      = byte(1)
)

// bulkMarker starts the Extensions of an entry whose data travelled
// beside the append; its length and crc32c follow.
var bulkMarker = []byte("raftmq-bulk/1")

// BulkLayerID is the mux layer of group's large entries. Its '!' is no
// byte of a group id, so it names no group.
func BulkLayerID(group string) string { return "!bulk" + group }

type bulkKey struct{ term, index uint64 }

type heldEntry struct {
	data []byte
	crc  uint32
}

// Bulk is a group's channel for large entries: the leader's side sends
// them (Strip), the follower's side serves the layer and gives them back
// to the appends (restore).
type Bulk struct {
	layer   raft.StreamLayer
	max     int
	timeout time.Duration
	log     *slog.Logger

	mu    sync.Mutex
	held  map[bulkKey]heldEntry
	order []bulkKey
	bytes int // of the entries held
	peers map[raft.ServerAddress]*bulkPeer

	done chan struct{}
	wg   sync.WaitGroup
}

// BulkConfig is how a Bulk is built.
type BulkConfig struct {
	// Layer is the group's bulk layer (Mux.Layer(BulkLayerID(group))).
	Layer raft.StreamLayer
	// MaxEntry is the largest entry data a follower accepts.
	MaxEntry int
	// Timeout bounds one entry's trip, as the transport's round trip.
	Timeout time.Duration
	Logger  *slog.Logger
}

type bulkPeer struct {
	mu   sync.Mutex
	conn net.Conn
	off  time.Time // inline until then
}

// NewBulk serves cfg.Layer until Close.
func NewBulk(cfg BulkConfig) *Bulk {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	b := &Bulk{layer: cfg.Layer, max: cfg.MaxEntry, timeout: cfg.Timeout, log: cfg.Logger,
		held: map[bulkKey]heldEntry{}, peers: map[raft.ServerAddress]*bulkPeer{}, done: make(chan struct{})}
	b.wg.Add(1)
	go b.accept()
	return b
}

// Close stops serving and closes the connections.
func (b *Bulk) Close() {
	select {
	case <-b.done:
		return
	default:
	}
	close(b.done)
	_ = b.layer.Close()
	b.mu.Lock()
	for _, p := range b.peers {
		p.mu.Lock()
		if p.conn != nil {
			_ = p.conn.Close()
		}
		p.mu.Unlock()
	}
	b.mu.Unlock()
	b.wg.Wait()
}

// Strip sends the large entries of an append to target and returns the
// entries to send in the append: those it holds now without their data.
// entries is not changed (raft keeps them). On any failure the append
// carries them all inline.
func (b *Bulk) Strip(target raft.ServerAddress, entries []*raft.Log) []*raft.Log {
	if b == nil {
		return entries
	}
	var out []*raft.Log
	for i, e := range entries {
		if e.Type != raft.LogCommand || len(e.Data) < bulkMin || e.Extensions != nil || len(e.Data) > b.max {
			continue
		}
		if err := b.send(target, e); err != nil {
			return entries
		}
		if out == nil {
			out = slices.Clone(entries)
		}
		c := *e
		c.Data = nil
		c.Extensions = binary.LittleEndian.AppendUint32(
			binary.LittleEndian.AppendUint64(slices.Clone(bulkMarker), uint64(len(e.Data))),
			crc32.Checksum(e.Data, crcTable))
		out[i] = &c
	}
	if out == nil {
		return entries
	}
	return out
}

func (b *Bulk) peer(target raft.ServerAddress) *bulkPeer {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.peers[target]
	if p == nil {
		p = &bulkPeer{}
		b.peers[target] = p
	}
	return p
}

var errBulkOff = errors.New("group: the follower takes large entries inline")

// send gives e's data to target's bulk layer and waits for it to say it
// holds it.
func (b *Bulk) send(target raft.ServerAddress, e *raft.Log) error {
	p := b.peer(target)
	p.mu.Lock()
	defer p.mu.Unlock()
	if time.Now().Before(p.off) {
		return errBulkOff
	}
	fresh := p.conn == nil
	if fresh {
		c, err := b.layer.Dial(target, b.timeout)
		if err != nil {
			return err
		}
		p.conn = c
	}
	c := p.conn
	hdr := make([]byte, 0, bulkFrameLen)
	hdr = append(hdr, bulkMagic)
	hdr = binary.LittleEndian.AppendUint64(hdr, e.Term)
	hdr = binary.LittleEndian.AppendUint64(hdr, e.Index)
	hdr = binary.LittleEndian.AppendUint64(hdr, uint64(len(e.Data)))
	hdr = binary.LittleEndian.AppendUint32(hdr, crc32.Checksum(e.Data, crcTable))
	_ = c.SetDeadline(time.Now().Add(b.timeout))
	var ack [1]byte
	_, err := c.Write(hdr)
	if err == nil {
		_, err = c.Write(e.Data)
	}
	if err == nil {
		_, err = io.ReadFull(c, ack[:])
	}
	if err == nil && ack[0] != bulkAck {
		err = fmt.Errorf("group: the follower refused entry %d beside the append", e.Index)
	}
	if err != nil {
		_ = c.Close()
		p.conn = nil
		var ne net.Error
		if fresh && !(errors.As(err, &ne) && ne.Timeout()) {
			// A new connection closed before it answered: a node that
			// does not serve the layer.
			p.off = time.Now().Add(bulkRetry)
			b.log.Info("a follower takes large entries inline (a release before the bulk layer?)", "peer", target, "err", err)
		}
		return err
	}
	return nil
}

func (b *Bulk) accept() {
	defer b.wg.Done()
	for {
		c, err := b.layer.Accept()
		if err != nil {
			return
		}
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			defer c.Close()
			b.serve(c)
		}()
	}
}

// serve reads a leader's frames, holding each entry for its append, until
// the connection ends or sends what is not a frame.
func (b *Bulk) serve(c net.Conn) {
	hdr := make([]byte, bulkFrameLen)
	for {
		// An idle connection waits for the next large entry; the frame's
		// own bytes come within the timeout.
		_ = c.SetReadDeadline(time.Time{})
		if _, err := io.ReadFull(c, hdr[:1]); err != nil {
			return
		}
		_ = c.SetDeadline(time.Now().Add(b.timeout))
		if _, err := io.ReadFull(c, hdr[1:]); err != nil || hdr[0] != bulkMagic {
			return
		}
		key := bulkKey{binary.LittleEndian.Uint64(hdr[1:]), binary.LittleEndian.Uint64(hdr[9:])}
		n := binary.LittleEndian.Uint64(hdr[17:])
		crc := binary.LittleEndian.Uint32(hdr[25:])
		if n > uint64(b.max) {
			b.log.Warn("refused a large entry beside the append: larger than any entry", "index", key.index, "bytes", n, "max", b.max)
			_, _ = c.Write([]byte{0})
			return
		}
		data := make([]byte, n)
		if _, err := io.ReadFull(c, data); err != nil {
			return
		}
		if crc32.Checksum(data, crcTable) != crc {
			b.log.Warn("refused a large entry beside the append: checksum mismatch", "index", key.index)
			_, _ = c.Write([]byte{0})
			return
		}
		b.hold(key, heldEntry{data, crc})
		if _, err := c.Write([]byte{bulkAck}); err != nil {
			return
		}
	}
}

func (b *Bulk) hold(k bulkKey, h heldEntry) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if old, ok := b.held[k]; ok {
		b.bytes -= len(old.data)
	} else {
		b.order = append(b.order, k)
	}
	b.held[k] = h
	b.bytes += len(h.data)
	for len(b.order) > 1 && (len(b.order) > bulkKeep || b.bytes > bulkKeepBytes) {
		b.bytes -= len(b.held[b.order[0]].data)
		delete(b.held, b.order[0])
		b.order = b.order[1:]
	}
}

func (b *Bulk) take(k bulkKey) (heldEntry, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	d, ok := b.held[k]
	if ok {
		b.bytes -= len(d.data)
		delete(b.held, k)
		b.order = slices.DeleteFunc(b.order, func(o bulkKey) bool { return o == k })
	}
	return d, ok
}

// restore puts back the data of the entries of a that travelled beside
// it. An error says which did not arrive or do not match their marker.
func (b *Bulk) restore(a *raft.AppendEntriesRequest) error {
	for _, e := range a.Entries {
		if !bytes.HasPrefix(e.Extensions, bulkMarker) {
			continue
		}
		m := e.Extensions[len(bulkMarker):]
		if b == nil || len(m) != 12 {
			return fmt.Errorf("group: entry %d came without its data, and this node holds none for it", e.Index)
		}
		n, crc := binary.LittleEndian.Uint64(m), binary.LittleEndian.Uint32(m[8:])
		h, ok := b.take(bulkKey{e.Term, e.Index})
		if !ok || uint64(len(h.data)) != n || h.crc != crc {
			return fmt.Errorf("group: the data of entry %d (term %d) did not arrive beside the append", e.Index, e.Term)
		}
		e.Data, e.Extensions = h.data, nil
	}
	return nil
}
