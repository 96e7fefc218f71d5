package group

import (
	"os"
	"syscall"
)

// writeBack starts the writeback of n bytes of f from off and does not
// wait for it (sync_file_range with SYNC_FILE_RANGE_WRITE). A failure
// changes nothing: the file's sync writes it all the same.
func writeBack(f *os.File, off, n int64) {
	const syncFileRangeWrite = 2
	_, _, _ = syscall.Syscall6(syscall.SYS_SYNC_FILE_RANGE, f.Fd(), uintptr(off), uintptr(n), syncFileRangeWrite, 0, 0)
}

// writeBackWait writes back n bytes of f from off and waits until they
// are written (sync_file_range with SYNC_FILE_RANGE_WAIT_BEFORE, _WRITE
// and _WAIT_AFTER): the data is on the device, though not the metadata
// a sync would add. A failure changes nothing: the file's sync writes it
// all the same.
func writeBackWait(f *os.File, off, n int64) {
	if n <= 0 {
		return
	}
	const waitWriteWait = 1 | 2 | 4
	_, _, _ = syscall.Syscall6(syscall.SYS_SYNC_FILE_RANGE, f.Fd(), uintptr(off), uintptr(n), waitWriteWait, 0, 0)
}
