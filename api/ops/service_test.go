package ops_test

import (
	"strings"
	"testing"

	"github.com/raftmq/raftmq/api/ops"
	"github.com/raftmq/raftmq/api/ops/opstest"
	"github.com/raftmq/raftmq/proto"
)

// TestService_ClusterStatusCarriesAlarms: each node reports its own alarms
// and disk space in ClusterStatus, which the management API asks every
// member for.
func TestService_ClusterStatusCarriesAlarms(t *testing.T) {
	box := &opstest.ResourceBox{R: ops.Resources{DiskAlarm: true, DiskFree: 10, DiskFreeLimit: 100}}
	node := opstest.NewNode("n1")
	admin := ops.New(ops.Deps{Node: node, Resources: box.Get})
	t.Cleanup(func() { _ = admin.Close() })
	r, err := admin.ClusterStatus(opstest.Context(t), &proto.ClusterStatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(r.GetAlarms(), ",") != "disk" || r.GetDiskFree() != 10 || r.GetDiskFreeLimit() != 100 {
		t.Fatalf("status %v", r)
	}
}
