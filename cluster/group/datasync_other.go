//go:build !linux

package group

import "os"

// datasync is fsync where fdatasync is not at hand.
func datasync(f *os.File) error { return f.Sync() }
