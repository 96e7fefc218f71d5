package e2e

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// tryLock reports whether another open file could take path's lock now.
func tryLock(t *testing.T, path string) bool {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	return true
}

func TestLockMachine_HeldUntilReleasedAndWaitedFor(t *testing.T) {
	path := filepath.Join(t.TempDir(), "e2e.lock")
	release, err := lockMachine(path)
	if err != nil {
		t.Fatal(err)
	}
	if tryLock(t, path) {
		t.Fatal("the lock could be taken while held")
	}

	second := make(chan func(), 1)
	go func() {
		r, err := lockMachine(path)
		if err != nil {
			t.Error(err)
			r = func() {}
		}
		second <- r
	}()
	release()
	select {
	case r := <-second:
		if tryLock(t, path) {
			t.Fatal("the lock could be taken while the second holder held it")
		}
		r()
	case <-time.After(time.Minute):
		t.Fatal("the waiting holder did not get the lock once it was released")
	}
	if !tryLock(t, path) {
		t.Fatal("the lock is still held after both released it")
	}
}
