//go:build unix

package offheap

import "golang.org/x/sys/unix"

func mapBytes(n int) ([]byte, bool) {
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return nil, false
	}
	return b, true
}

func unmapBytes(b []byte) { _ = unix.Munmap(b) }
