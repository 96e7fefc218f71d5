package e2e

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// RunExclusive runs a package's tests while holding a lock on the
// machine that every package of real clusters takes (this one and
// e2e/fault), and returns m.Run's exit code; call it from TestMain.
//
// `go test ./...` runs two test binaries at once on two cores. These
// packages' clusters are three real processes each, with timeouts set
// for production (a 250 ms leader lease): side by side, the fault
// suite's three containers and a 72 MiB publish between three
// race-enabled processes starved each other, leaders lost their lease
// mid-replication and the publish was nacked attempt after attempt. The
// tests measure a cluster on a machine it shares with one test, not with
// another suite; everything else still runs beside them. With -short
// nothing here starts a process, so nothing is locked.
func RunExclusive(m *testing.M) int {
	flag.Parse()
	if testing.Short() {
		return m.Run()
	}
	release, err := lockMachine(filepath.Join(os.TempDir(), "raftmq-e2e.lock"))
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v; running without it\n", err)
		return m.Run()
	}
	defer release()
	return m.Run()
}

// lockMachine takes an exclusive flock on path, saying on stderr when it
// has to wait for another holder. The kernel drops the lock if the
// process dies, so a killed test run leaves nothing to clean up.
func lockMachine(path string) (release func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		if err != syscall.EWOULDBLOCK {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		start := time.Now()
		fmt.Fprintf(os.Stderr, "e2e: another package's clusters are running; waiting for %s\n", path)
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		fmt.Fprintf(os.Stderr, "e2e: waited %v for %s\n", time.Since(start).Round(time.Second), path)
	}
	return func() { f.Close() }, nil
}
