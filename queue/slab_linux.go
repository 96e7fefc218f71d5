package queue

import "syscall"

func mapSlab(n int) ([]byte, error) {
	return syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS)
}

func unmapSlab(b []byte) {
	if err := syscall.Munmap(b); err != nil {
		panic("queue: munmap: " + err.Error())
	}
}

// releaseMem gives a free block's pages back to the kernel; they read as
// zeros when the block is used again.
func releaseMem(b []byte) { _ = syscall.Madvise(b, syscall.MADV_DONTNEED) }

// poisonMem makes a freed block fault on any access.
func poisonMem(b []byte) {
	if err := syscall.Mprotect(b, syscall.PROT_NONE); err != nil {
		releaseMem(b)
	}
}
