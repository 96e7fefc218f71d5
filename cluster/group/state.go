package group

import (
	"sync"

	"github.com/raftmq/raftmq/fsm"
)

// State is a group's state machine under its lock: the FSM applies and
// restores under it, and every read of the machine takes it too.
type State struct {
	mu sync.Mutex
	m  *fsm.Machine
}

// NewState is an empty state (fsm.New).
func NewState() *State { return &State{m: fsm.New()} }

// Lock takes the state lock; Unlock gives it back.
func (s *State) Lock()   { s.mu.Lock() }
func (s *State) Unlock() { s.mu.Unlock() }

// Machine is the state machine; only under the lock, and not kept past
// it (a restore replaces it).
func (s *State) Machine() *fsm.Machine { return s.m }

// View runs fn with the machine under the lock.
func (s *State) View(fn func(m *fsm.Machine)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fn(s.m)
}
