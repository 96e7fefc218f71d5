// Package broadcast wakes every waiter at each signal: a waiter takes the
// channel (Wait) before it looks at what it waits for, so a change made
// after it looked closes the channel it holds.
package broadcast

import "sync"

// Broadcast wakes every waiter at each signal.
type Broadcast struct {
	mu sync.Mutex
	ch chan struct{}
}

// New returns a Broadcast no one waits on yet.
func New() *Broadcast { return &Broadcast{ch: make(chan struct{})} }

// Wait returns a channel closed at the next Signal.
func (b *Broadcast) Wait() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ch
}

// Signal wakes everyone who waits now.
func (b *Broadcast) Signal() {
	b.mu.Lock()
	close(b.ch)
	b.ch = make(chan struct{})
	b.mu.Unlock()
}
