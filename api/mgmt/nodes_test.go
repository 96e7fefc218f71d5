package mgmt

import (
	"testing"

	"github.com/prometheus/procfs"

	"github.com/raftmq/raftmq/api/ops"
	"github.com/raftmq/raftmq/api/ops/opstest"
	"github.com/raftmq/raftmq/cluster/clustertest"
)

// TestManagement_NodeResources: /api/nodes reports the process's resident
// memory as mem_used (within 25% of /proc's VmRSS read just after, as it
// moves between the readings), not a figure of the Go runtime's, with the
// memory limit, file descriptors and uptime.
func TestManagement_NodeResources(t *testing.T) {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	c := clustertest.New(t, 1)
	n := c.WaitForLeader(clustertest.Timeout)
	box := &opstest.ResourceBox{R: ops.Resources{MemLimit: 8 << 30}}
	admin := ops.New(ops.Deps{Node: ops.FromCluster(n), Resources: box.Get})
	g := serveOps(t, admin)
	var nodes []map[string]any
	g.getJSON("/api/nodes", &nodes)
	self, err := fs.Self()
	if err != nil {
		t.Fatal(err)
	}
	status, err := self.NewStatus()
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 1 {
		t.Fatalf("nodes %v", nodes)
	}
	nd := nodes[0]
	rss := float64(status.VmRSS)
	if v, _ := nd["mem_used"].(float64); v < rss*3/4 || v > rss*5/4 {
		t.Fatalf("mem_used %v, VmRSS %v", nd["mem_used"], rss)
	}
	if nd["mem_limit"] != float64(8<<30) {
		t.Fatalf("mem_limit %v", nd["mem_limit"])
	}
	if u, _ := nd["fd_used"].(float64); u < 1 || nd["fd_total"].(float64) < u {
		t.Fatalf("fds %v of %v", nd["fd_used"], nd["fd_total"])
	}
	if up, _ := nd["uptime"].(float64); up <= 0 {
		t.Fatalf("uptime %v", nd["uptime"])
	}
}
