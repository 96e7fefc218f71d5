// Package anonmem maps anonymous memory outside the Go heap for a caller
// that frees it itself: memory, like the heap's, and no I/O, so the pure
// packages (queue) may hold their pointer-free records in it while the
// collector neither scans it nor doubles it in its target.
package anonmem

import "errors"

// ErrUnsupported is Map's answer where the system has no anonymous
// mappings this package knows (the caller keeps its data on the heap).
var ErrUnsupported = errors.ErrUnsupported
