package fsm

import (
	"sync/atomic"
)

// A queue group's leader keeps the group's log in line with what the
// metadata places in the group (cluster's mirror). Comparing every queue
// of both machines took most of each group leader's CPU once a cluster
// held 10,000 queues and more were declared, and held both machines'
// locks while it walked, so every other queue on the node waited. So each
// machine keeps, not as state, the names of the queues it declared or
// deleted, numbered: a mirror that read both machines at some numbers
// need only look again at the queues named since. What else the mirror
// reads (vhosts, policies, whether queues are placed) is rarer and moves
// SettingsGen instead, after which the mirror compares everything.
//
// The numbers come from one counter of the process, so a number a
// machine showed before a restore is never one it shows after, and a log
// that starts afresh (a new machine, a restore, a log grown past
// maxQueueChanges) says so by where it starts: QueueChanges of a number
// before that is not ok, and its reader compares everything.

// queueChangeNumbers numbers the queue changes of every machine of the
// process.
var queueChangeNumbers atomic.Uint64

// maxQueueChanges bounds a machine's log of queue changes; a mirror reads
// it every few milliseconds, so it fills only when no mirror reads it.
const maxQueueChanges = 4096

// QueueKey names a queue: its vhost and name.
type QueueKey struct{ Vhost, Name string }

// queueChange is one entry of the log: queue key changed at number n.
type queueChange struct {
	n   uint64
	key QueueKey
}

// queueChangeLog holds the queue changes numbered from since on, each
// one of them; head is the last number given.
type queueChangeLog struct {
	since, head uint64
	changes     []queueChange
}

// restart empties the log: it holds every change from now on.
func (l *queueChangeLog) restart() {
	l.since = queueChangeNumbers.Add(1)
	l.head = l.since
	l.changes = l.changes[:0]
}

// note logs that queue name of vhost was declared or deleted.
func (l *queueChangeLog) note(vhost, name string) {
	if len(l.changes) >= maxQueueChanges {
		l.restart()
	}
	l.head = queueChangeNumbers.Add(1)
	l.changes = append(l.changes, queueChange{n: l.head, key: QueueKey{Vhost: vhost, Name: name}})
}

// QueueChangeHead is the number of this machine's last queue change: a
// reader that saw it has seen every change.
func (m *Machine) QueueChangeHead() uint64 { return m.queueChanges.head }

// QueueChanges lists the queues declared or deleted on this machine after
// number seen (a QueueChangeHead read earlier), in order, a queue as often
// as it changed. ok is false when the log no longer reaches back to seen
// (a restore, a full log, a number of another machine): the reader must
// compare everything.
func (m *Machine) QueueChanges(seen uint64) (keys []QueueKey, ok bool) {
	return m.queueChanges.read(seen)
}

func (l *queueChangeLog) read(seen uint64) (keys []QueueKey, ok bool) {
	if seen < l.since || seen > l.head {
		return nil, false
	}
	i := len(l.changes)
	for i > 0 && l.changes[i-1].n > seen {
		i--
	}
	for _, c := range l.changes[i:] {
		keys = append(keys, c.key)
	}
	return keys, true
}
