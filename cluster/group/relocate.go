package group

import (
	"errors"
	"sync"
	"time"

	"github.com/raftmq/raftmq/bodies"
)

// Relocation in paced steps. Once consumers have taken half of a backlog
// (holdDenseLog), a snapshot compacts its entries and the body store
// copies the bodies still waiting into body files: 500 MB at 500,000
// delayed messages. Copied in one go, on every node at the same second
// (reclaimLoop's tick), those writes and their fsyncs queued the log's
// own fsyncs behind them for about 4 s on a shared disk, and every commit
// (the releases, the acks that return the consumers' credit) waited. So a
// snapshot relocates one step of at most relocateStepBytes itself, and a
// goroutine of its own relocates the rest, a step at a time, each made
// durable before the pin moves past it, at most relocateBytesPerSec; it
// then compacts the log up to where the snapshot would have.
const (
	// relocateStepBytes bounds the bodies one step copies, and so the
	// data one fsync of the body files carries.
	relocateStepBytes = 8 << 20
	// relocateBytesPerSec is the pace of the steps after the first.
	relocateBytesPerSec = 32 << 20
)

// relocJob is the rest of a snapshot's relocation: live is the snapshot's
// list of bodies, to the last entry whose bodies are copied, compact the
// compaction point (at most to), next the first key of live not
// relocated yet.
type relocJob struct {
	live    []bodies.Live
	to      uint64
	compact uint64
	next    int
}

// relocator runs the relocation jobs one at a time; a newer snapshot's
// job replaces the one waiting or under way (its list is newer, and
// every body the older list would still copy that the newer state names
// is in the newer list, below the newer compaction point).
type relocator struct {
	mu      sync.Mutex
	job     *relocJob
	gen     uint64 // moved by every submit and cancel: a job under way stops at its next step
	running bool
	idle    *sync.Cond // broadcast when running ends (tests)
}

// relocStep is the compaction point of the next step from live[i:]: the
// highest index up to which the bodies not yet in a file hold at most
// budget bytes (at least one entry's, whatever its size), or to once
// every live body up to to fits. next is the first key above the step,
// n the bytes it copies.
func relocStep(store *bodies.Store, live []bodies.Live, i int, to uint64, budget int64) (step uint64, next int, n int64) {
	for i < len(live) && live[i].Index <= to {
		index := live[i].Index
		var m int64
		j := i
		for ; j < len(live) && live[j].Index == index; j++ {
			if !store.InFile(live[j].Key()) {
				m += int64(live[j].Size)
			}
		}
		if n > 0 && n+m > budget {
			return index - 1, i, n
		}
		n += m
		i = j
	}
	return to, i, n
}

// retain relocates the live bodies up to entry to: one bounded step
// here, the rest on the relocator's goroutine, which then compacts the
// log up to compact (at most to; less where raft keeps trailing entries
// whose bodies are copied all the same).
func (f *FSM) retain(live []bodies.Live, to, compact uint64) {
	step, next, _ := relocStep(f.bodies, live, 0, to, f.relocBytes)
	if err := f.bodies.Retain(live, step); err != nil {
		// The pin stays where it was: the log is kept, nothing lost.
		f.log.Error("body store: cannot relocate the bodies of the compacted log", "err", err)
		return
	}
	r := &f.reloc
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gen++
	r.job = nil
	if step == to {
		return
	}
	r.job = &relocJob{live: live, to: to, compact: min(compact, to), next: next}
	if !r.running {
		r.running = true
		go f.relocate()
	}
}

// cancelRelocation drops the job waiting or under way: a snapshot from
// the leader replaces the state and the log.
func (f *FSM) cancelRelocation() {
	r := &f.reloc
	r.mu.Lock()
	r.gen++
	r.job = nil
	r.mu.Unlock()
}

// relocate runs the jobs until none waits.
func (f *FSM) relocate() {
	r := &f.reloc
	for {
		r.mu.Lock()
		j, gen := r.job, r.gen
		r.job = nil
		if j == nil {
			r.running = false
			if r.idle != nil {
				r.idle.Broadcast()
			}
			r.mu.Unlock()
			return
		}
		r.mu.Unlock()
		f.relocateJob(j, gen)
	}
}

// current says whether the job of gen is still the one to run.
func (r *relocator) current(gen uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.gen == gen
}

func (f *FSM) relocateJob(j *relocJob, gen uint64) {
	r := &f.reloc
	start, from, copied := time.Now(), j.next, int64(0)
	for {
		step, next, n := relocStep(f.bodies, j.live, j.next, j.to, f.relocBytes)
		copied += n
		if !f.pace(n) || !r.current(gen) {
			return
		}
		if err := f.bodies.Retain(j.live, step); err != nil {
			if errors.Is(err, bodies.ErrClosed) {
				return // the node closes
			}
			f.log.Error("body store: cannot relocate the bodies of the compacted log", "err", err)
			return
		}
		j.next = next
		if step == j.to {
			break
		}
	}
	if r.current(gen) {
		f.log.Info("relocated the bodies of the compacted log", "bodies", j.next-from, "bytes", copied,
			"seconds", time.Since(start).Seconds(), "to", j.to)
		f.compact(j.compact)
	}
}

// pace waits before a step that copies n bytes, so that the steps take
// at most relocateBytesPerSec; false once the node closes.
func (f *FSM) pace(n int64) bool {
	if f.paceHook != nil {
		return f.paceHook(n)
	}
	t := time.NewTimer(time.Duration(n) * time.Second / relocateBytesPerSec)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-f.closing:
		return false
	}
}

// compact deletes the log up to to, as raft's compaction after the
// snapshot would have had the pin allowed it (the pin still bounds it:
// holdingLogs). Raft compacts only when it snapshots, and a backlog
// being consumed may not bring the next snapshot for long.
func (f *FSM) compact(to uint64) {
	if f.storage == nil || f.storage.logs == nil {
		return
	}
	logs := f.storage.logs
	first, err := logs.FirstIndex()
	if err != nil {
		return
	}
	last, err := logs.LastIndex()
	if err != nil || first == 0 || first > to || to >= last {
		return
	}
	if err := logs.DeleteRange(first, to); err != nil {
		f.log.Warn("compacting the log behind the relocated bodies", "err", err)
	}
}
