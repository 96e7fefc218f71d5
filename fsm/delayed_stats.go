package fsm

// ReleaseLatenessBucketsMs are the upper bounds, in ms of log time, of
// ReleaseStats.Late; the last count of Late is above them all.
var ReleaseLatenessBucketsMs = [...]int64{0, 1, 5, 10, 50, 100, 500, 1000, 5000, 10000, 60000, 600000, 3600000}

// ReleaseStats count the delayed messages this replica released and how
// late in log time (the release entry's stamp minus the due time). They
// are not state: not in the snapshot or the digest, so a restore starts
// them from zero and a restart counts the log it replays again; every
// replica applies the same releases, so any node's counts describe the
// cluster.
type ReleaseStats struct {
	Released  uint64
	LateSumMs uint64
	// Late counts releases by lateness: Late[i] those at most
	// ReleaseLatenessBucketsMs[i] ms late and more than the bound before.
	Late [len(ReleaseLatenessBucketsMs) + 1]uint64
}

func (r *ReleaseStats) observe(late int64) {
	late = max(late, 0)
	r.Released++
	r.LateSumMs += uint64(late)
	i := 0
	for i < len(ReleaseLatenessBucketsMs) && late > ReleaseLatenessBucketsMs[i] {
		i++
	}
	r.Late[i]++
}

// Releases returns the release counts of this replica.
func (m *Machine) Releases() ReleaseStats { return m.releases }

// KeepReleases carries the release counts of the machine m replaces, so
// that a restore does not set a node's counters back.
func (m *Machine) KeepReleases(old *Machine) { m.releases = old.releases }
