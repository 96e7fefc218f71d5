package amqp

import (
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/raftmq/raftmq/internal/procstat"
	"github.com/raftmq/raftmq/proto"
)

// TestDiskAlarm_BlocksUntilSpaceReturns: free space below the limit
// blocks publishers with "low on disk"; the memory alarm raised too keeps
// them blocked after the disk alarm clears; clearing both lets the held
// publish through. The free space is injected: no disk is filled.
func TestDiskAlarm_BlocksUntilSpaceReturns(t *testing.T) {
	ts := startServer(t, Config{})
	pubConn, pub := openChannel(t, ts)
	blocked := pubConn.NotifyBlocked(make(chan amqp091.Blocking, 4))
	var free atomic.Uint64
	free.Store(5 << 30)
	disk := NewDiskWatcher(ts.srv, t.TempDir(), 1<<30, func(string) (uint64, error) { return free.Load(), nil })
	if disk.Check() {
		t.Fatal("alarm with 5 GiB free")
	}
	if f, l, a, ok := disk.State(); f != 5<<30 || l != 1<<30 || a || !ok {
		t.Fatalf("state %d %d %v %v", f, l, a, ok)
	}

	free.Store(1<<30 - 1)
	if !disk.Check() {
		t.Fatal("no alarm below the limit")
	}
	if b := <-blocked; !b.Active || b.Reason != "low on disk" {
		t.Fatalf("blocked = %+v", b)
	}
	if got := ts.srv.Alarms(); !slices.Equal(got, []string{AlarmDisk}) {
		t.Fatalf("alarms %v", got)
	}
	mem := NewMemoryWatcher(ts.srv, 1000, func() uint64 { return 2000 })
	if u, l, a := mem.State(); u != 0 || l != 1000 || a {
		t.Fatalf("memory state before a check: %d %d %v", u, l, a)
	}
	mem.Check()
	// The reading the alarm compared is the one the surfaces show.
	if u, l, a := mem.State(); u != 2000 || l != 1000 || !a {
		t.Fatalf("memory state: %d %d %v", u, l, a)
	}
	if got := ts.srv.Alarms(); !slices.Equal(got, []string{AlarmDisk, AlarmMemory}) {
		t.Fatalf("alarms %v", got)
	}
	if err := pub.Publish("", "q", false, false, amqp091.Publishing{Body: []byte("held")}); err != nil {
		t.Fatal(err)
	}

	// Space returns; memory is still high: still blocked.
	free.Store(1 << 30)
	if disk.Check() {
		t.Fatal("alarm with the space back")
	}
	select {
	case b := <-blocked:
		t.Fatalf("notified %+v while the memory alarm holds", b)
	default:
	}
	if n := len(commandsOf(ts.broker, (*proto.Command).GetPublish)); n != 0 {
		t.Fatalf("%d publishes reached the log while blocked", n)
	}
	mem.read = func() uint64 { return 10 }
	mem.Check()
	if b := <-blocked; b.Active {
		t.Fatalf("unblocked = %+v", b)
	}
	eventually(t, 5*time.Second, "the held publish", func() bool {
		return len(commandsOf(ts.broker, (*proto.Command).GetPublish)) == 1
	})

	// A folder that cannot be read keeps the alarm as it was.
	disk.free = func(string) (uint64, error) { return 0, errors.New("gone") }
	if disk.Check() || len(ts.srv.Alarms()) != 0 {
		t.Fatal("an unreadable folder raised the alarm")
	}
}

// TestAlarm_ReasonNamesEveryResource: while both alarms are raised the
// reason connecting clients are told names both, in RabbitMQ's words;
// clearing one leaves the other's.
func TestAlarm_ReasonNamesEveryResource(t *testing.T) {
	ts := startServer(t, Config{})
	reason := func() string {
		ts.srv.mu.Lock()
		defer ts.srv.mu.Unlock()
		return ts.srv.blocked
	}
	ts.srv.SetAlarm(AlarmMemory, true)
	ts.srv.SetAlarm(AlarmDisk, true)
	if got := reason(); got != "low on disk & memory" {
		t.Fatalf("reason %q", got)
	}
	ts.srv.SetAlarm(AlarmDisk, false)
	if got := reason(); got != "low on memory" {
		t.Fatalf("reason %q", got)
	}
	ts.srv.SetAlarm(AlarmMemory, false)
	if got := reason(); got != "" {
		t.Fatalf("reason %q after both cleared", got)
	}
}

func TestDiskFree_ReadsTheFileSystem(t *testing.T) {
	free, err := DiskFree(t.TempDir())
	if err != nil {
		t.Skipf("free space cannot be read here: %v", err)
	}
	if free == 0 {
		t.Fatal("0 bytes free in the test's temporary folder")
	}
	if _, err := DiskFree("/nonexistent/raftmq"); err == nil {
		t.Fatal("no error for a missing folder")
	}
}

// A watcher given no reader compares the process's resident memory: with
// a limit of one byte the alarm is raised and the reading is the
// process's, not the Go heap's objects alone.
func TestMemoryWatcher_ReadsResidentMemory(t *testing.T) {
	ts := startServer(t, Config{})
	w := NewMemoryWatcher(ts.srv, 1, nil)
	if !w.Check() {
		t.Fatal("no alarm above a one-byte limit")
	}
	used, _, _ := w.State()
	if rss := procstat.ResidentMemory(); used == 0 || used > 2*rss || rss > 2*used {
		t.Fatalf("the watcher read %d bytes, the resident memory is %d", used, rss)
	}
}
