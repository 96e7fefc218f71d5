//go:build !linux

package anonmem

// Map is not supported here: the caller keeps its data on the heap.
func Map(int) ([]byte, error) { return nil, ErrUnsupported }

// Unmap, Release and Poison have nothing to do where Map maps nothing.
func Unmap([]byte)   {}
func Release([]byte) {}
func Poison([]byte)  {}
