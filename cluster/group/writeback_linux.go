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
