//go:build unix

package amqp

import "syscall"

// DiskFree returns the bytes of dir's file system available to an
// unprivileged user (df's "Avail"), as RabbitMQ's disk monitor reads it.
func DiskFree(dir string) (uint64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return uint64(st.Bavail) * uint64(st.Bsize), nil
}
