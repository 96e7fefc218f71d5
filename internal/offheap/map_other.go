//go:build !unix

package offheap

func mapBytes(int) ([]byte, bool) { return nil, false }

func unmapBytes([]byte) {}
