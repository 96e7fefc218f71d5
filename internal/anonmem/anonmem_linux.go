package anonmem

import "syscall"

// Map maps n bytes of zeroed, private, anonymous memory.
func Map(n int) ([]byte, error) {
	return syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS)
}

// Unmap unmaps b, which Map returned whole.
func Unmap(b []byte) {
	if err := syscall.Munmap(b); err != nil {
		panic("anonmem: munmap: " + err.Error())
	}
}

// Release gives b's pages back to the kernel; they read as zeros when
// used again.
func Release(b []byte) { _ = syscall.Madvise(b, syscall.MADV_DONTNEED) }

// Poison makes b fault on any access (or, where it cannot, releases it).
func Poison(b []byte) {
	if err := syscall.Mprotect(b, syscall.PROT_NONE); err != nil {
		Release(b)
	}
}
