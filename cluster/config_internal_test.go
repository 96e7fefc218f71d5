package cluster

import (
	"testing"
	"time"
)

// A live follower of an idle group hears from its leader, and answers it,
// only every two fifths of the heartbeat timeout: with a NodeDownAfter
// shorter than the timeout, live nodes count themselves cut off and are
// declared down. Left
// unset, it follows a long heartbeat timeout; set too short, the node
// does not start.
func TestConfig_NodeDownAfterOutlastsAnIdleGroupsSilences(t *testing.T) {
	for _, c := range []struct {
		hb, down, want time.Duration
		refused        bool
	}{
		{hb: 0, down: 0, want: DefaultNodeDownAfter},                        // the library's defaults (1 s)
		{hb: 500 * time.Millisecond, down: 0, want: DefaultNodeDownAfter},   // raftmq's
		{hb: 5 * time.Second, down: 0, want: 5 * time.Second},               // a long timeout, NodeDownAfter unset
		{hb: 5 * time.Second, down: 5 * time.Second, want: 5 * time.Second}, // at the least
		{hb: 500 * time.Millisecond, down: 500 * time.Millisecond, want: 500 * time.Millisecond},
		{hb: 5 * time.Second, down: DefaultNodeDownAfter, refused: true},
		{hb: 5 * time.Second, down: 3 * time.Second, refused: true},
		{hb: 500 * time.Millisecond, down: 499 * time.Millisecond, refused: true},
	} {
		cfg := Config{NodeID: "n1", DataDir: t.TempDir()}
		cfg.RaftAddr, cfg.GossipAddr, cfg.HeartbeatTimeout = "127.0.0.1:1", "127.0.0.1:2", c.hb
		cfg.NodeDownAfter = c.down
		err := cfg.setDefaults()
		switch {
		case c.refused && err == nil:
			t.Errorf("HeartbeatTimeout %v, NodeDownAfter %v: accepted", c.hb, c.down)
		case !c.refused && err != nil:
			t.Errorf("HeartbeatTimeout %v, NodeDownAfter %v: %v", c.hb, c.down, err)
		case !c.refused && cfg.NodeDownAfter != c.want:
			t.Errorf("HeartbeatTimeout %v, NodeDownAfter %v: became %v, want %v", c.hb, c.down, cfg.NodeDownAfter, c.want)
		}
	}
}
