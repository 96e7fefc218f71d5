//go:build !unix

package amqp

import "errors"

// DiskFree cannot read free space on this platform: the disk alarm is
// never raised.
func DiskFree(string) (uint64, error) {
	return 0, errors.New("free disk space is not read on this platform")
}
