package clock

import (
	"log/slog"
	"time"

	"github.com/raftmq/raftmq/proto"
)

// Config is what a node gives its time: its clock and limits, and what it
// knows of the cluster, asked at each round and never kept.
type Config struct {
	// Self is this node's id.
	Self  string
	Clock Clock
	// MaxOffset is how far this node's wall clock may be from the
	// quorum's before it refuses to lead; it is also the stamper's slew
	// window.
	MaxOffset time.Duration
	// SampleInterval is how often the voters' clocks are read.
	SampleInterval time.Duration
	// LeaderWait bounds how long a term waits for a reading of the
	// quorum's clocks before it stamps by the log's clock alone.
	LeaderWait time.Duration
	Logger     *slog.Logger

	// Voters lists the voters of the latest raft configuration, false
	// when it cannot be read.
	Voters func() ([]string, bool)
	// Peer is the internal service of voter id while it is a live member
	// this node can call (false: none, its reading is forgotten).
	Peer func(id string) (proto.InternalClient, bool)
	// Leading reports whether this node leads a ready term.
	Leading func() bool
	// HandOver transfers leadership to voter id.
	HandOver func(id string) error
}

// Time is the node's time: the stamper that hands out log time and the
// voters' clock readings it is anchored to (quorum.go).
type Time struct {
	cfg   Config
	stamp *Stamper
	q     *quorumClock
}

// New returns the time of a node; Run reads the voters' clocks.
func New(cfg Config) *Time {
	q := newQuorumClock(cfg)
	return &Time{cfg: cfg, stamp: newStamper(cfg.Clock, q, cfg.MaxOffset), q: q}
}

// Stamper is the node's stamper: the only place that reads time for the
// log.
func (t *Time) Stamper() *Stamper { return t.stamp }
