package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestDiskAlarm_ShowsClusterWide: a node whose data dir has less free
// space than --disk-free-limit (here a limit no disk meets, so nothing is
// filled) raises the disk alarm, which shows through another node's
// management API and on its own metrics. That the alarm blocks publishers
// is amqp's TestDiskAlarm_BlocksUntilSpaceReturns.
func TestDiskAlarm_ShowsClusterWide(t *testing.T) {
	skipShort(t)
	c := StartClusterWith(t, 3, func(i int, n *Node) {
		if i == 2 {
			n.ExtraArgs = append(n.ExtraArgs, "--disk-free-limit", "1000000TB")
		}
	})
	alarmed, other := c.Nodes[2], c.Nodes[0]
	get := func(n *Node, path string) (int, []byte) {
		req, _ := http.NewRequest("GET", "http://"+n.ManagementAddr+path, nil)
		req.SetBasicAuth("guest", "guest")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	if err := Eventually(30*time.Second, func() error {
		code, body := get(other, "/api/health/checks/alarms")
		if code != http.StatusServiceUnavailable || !strings.Contains(string(body), `{"node":"`+alarmed.ID+`","resource":"disk space"}`) {
			return fmt.Errorf("alarms through %s: %d %s", other.ID, code, body)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if code, body := get(other, "/api/health/checks/local-alarms"); code != http.StatusOK {
		t.Fatalf("local alarms of a node without one: %d %s", code, body)
	}
	_, body := get(other, "/api/nodes")
	var nodes []map[string]any
	if err := json.Unmarshal(body, &nodes); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		want := n["name"] == alarmed.ID
		if n["disk_free_alarm"] != want || n["disk_free_limit"] == nil {
			t.Fatalf("node %v: disk_free_alarm %v, want %v", n["name"], n["disk_free_alarm"], want)
		}
	}

	resp, err := http.Get("http://" + alarmed.HTTPAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	m, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(m), "\nrabbitmq_alarms_free_disk_space_watermark 1\n") ||
		!strings.Contains(string(m), "\nrabbitmq_disk_space_available_limit_bytes 1e+18\n") {
		t.Fatalf("metrics of the alarmed node:\n%s", grepLines(string(m), "disk"))
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
