package e2e

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
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

// TestMemoryAlarm_ResidentMemory: the memory alarm compares the process's
// resident memory, the figure every surface shows, with
// --vm-memory-high-watermark. A node whose mark lies between its Go heap
// (a few MB at rest) and its resident memory (the heap plus stacks, the
// runtime and the binary's pages: tens of MB) raises the alarm and blocks
// publishers; /api/nodes, the metrics and raftmqctl status, run by the
// node's OS user, show the alarm and a memory figure at or above the mark,
// while the Go heap stays below it.
func TestMemoryAlarm_ResidentMemory(t *testing.T) {
	skipShort(t)
	const mark = 10 << 20
	c := StartClusterWith(t, 1, func(_ int, n *Node) {
		n.ExtraArgs = append(n.ExtraArgs, "--vm-memory-high-watermark", fmt.Sprint(mark))
	})
	n := c.Nodes[0]

	// A publisher is told it is blocked, with RabbitMQ's reason. The node
	// says so right after connection.open-ok, before a NotifyBlocked
	// could be registered, so the test reads it on the wire.
	wire := &recordingConn{}
	conn, err := amqp.DialConfig(n.AMQPURL(), amqp.Config{Dial: func(network, addr string) (net.Conn, error) {
		c, err := net.Dial(network, addr)
		wire.Conn = c
		return wire, err
	}})
	if err != nil {
		t.Fatal(err)
	}
	// The node stops reading a blocked publisher, so connection.close
	// would wait for ever behind the held publish: the test drops the
	// socket instead.
	defer wire.Close()
	if err := Eventually(30*time.Second, func() error {
		if reason, ok := wire.blocked(); !ok || reason != "low on memory" {
			return fmt.Errorf("connection.blocked: %v %q", ok, reason)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// Its publishes are not read: no confirm comes.
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, 1))
	if err := ch.Publish("", "q", false, false, amqp.Publishing{Body: []byte("held")}); err != nil {
		t.Fatal(err)
	}
	select {
	case cf := <-confirms:
		t.Fatalf("a publish during the memory alarm was confirmed: %+v", cf)
	case <-time.After(2 * time.Second):
	}

	// The management API shows the alarm and the figure it compared.
	var node struct {
		MemUsed  uint64 `json:"mem_used"`
		MemLimit uint64 `json:"mem_limit"`
		MemAlarm bool   `json:"mem_alarm"`
	}
	mgmtJSON(t, n, "/api/nodes/"+n.ID, &node)
	if !node.MemAlarm || node.MemLimit != mark || node.MemUsed < mark {
		t.Fatalf("/api/nodes: mem_alarm %v, mem_used %d, mem_limit %d (mark %d)", node.MemAlarm, node.MemUsed, node.MemLimit, mark)
	}

	// The metrics: the alarm, the resident memory at or above the mark,
	// and the Go heap below it (the heap alone would raise no alarm).
	metric := map[string]float64{}
	for _, m := range []string{"rabbitmq_alarms_memory_used_watermark", "rabbitmq_resident_memory_limit_bytes",
		"rabbitmq_process_resident_memory_bytes", "go_memstats_heap_alloc_bytes"} {
		metric[m] = scrape(t, n, m)
	}
	if metric["rabbitmq_alarms_memory_used_watermark"] != 1 || metric["rabbitmq_resident_memory_limit_bytes"] != mark ||
		metric["rabbitmq_process_resident_memory_bytes"] < mark {
		t.Fatalf("memory metrics: %v", metric)
	}
	if heap := metric["go_memstats_heap_alloc_bytes"]; heap <= 0 || heap >= mark {
		t.Fatalf("the Go heap is %v bytes, not below the mark %d: the test no longer tells the resident memory from the heap", heap, mark)
	}

	// raftmqctl status, with the node's admin secret and no password.
	out := ctl(t, n, "status")
	for _, want := range []string{"\nAlarms\n\nMemory alarm on node " + n.ID + "\n", "\nCalculation strategy: rss\n",
		fmt.Sprintf("\nMemory high watermark setting: %.4f gb, computed to: %.4f gb\n", float64(mark)/1e9, float64(mark)/1e9)} {
		if !strings.Contains(out, want) {
			t.Fatalf("raftmqctl status lacks %q:\n%s", want, out)
		}
	}
	var st struct {
		Memory struct {
			Total struct{ RSS uint64 } `json:"total"`
		} `json:"memory"`
		Alarms []string `json:"alarms"`
	}
	if err := json.Unmarshal([]byte(ctl(t, n, "--formatter", "json", "status")), &st); err != nil {
		t.Fatal(err)
	}
	if st.Memory.Total.RSS < mark || len(st.Alarms) != 1 || st.Alarms[0] != "memory" {
		t.Fatalf("raftmqctl status: memory %d, alarms %v", st.Memory.Total.RSS, st.Alarms)
	}

	// All three show the alarm's reading: read within one of its checks
	// (every second), they show one number.
	if err := Eventually(30*time.Second, func() error {
		mgmtJSON(t, n, "/api/nodes/"+n.ID, &node)
		if err := json.Unmarshal([]byte(ctl(t, n, "--formatter", "json", "status")), &st); err != nil {
			return err
		}
		m := scrape(t, n, "rabbitmq_process_resident_memory_bytes")
		if node.MemUsed != st.Memory.Total.RSS || float64(node.MemUsed) != m {
			return fmt.Errorf("/api/nodes %d, raftmqctl status %d, metrics %v", node.MemUsed, st.Memory.Total.RSS, m)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// recordingConn keeps what the server sent, to find methods a client
// library hands on only to listeners registered in time.
type recordingConn struct {
	net.Conn
	mu  sync.Mutex
	got []byte
}

func (c *recordingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	c.got = append(c.got, p[:n]...)
	c.mu.Unlock()
	return n, err
}

// blocked finds a connection.blocked among the frames received and
// returns its reason.
func (c *recordingConn) blocked() (reason string, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.got
	for len(b) >= 7 {
		size := int(binary.BigEndian.Uint32(b[3:7]))
		if len(b) < 7+size+1 {
			return "", false
		}
		payload := b[7 : 7+size]
		// A method frame (type 1) on channel 0 of class 10 (connection),
		// method 60 (blocked): a short string, the reason.
		if b[0] == 1 && binary.BigEndian.Uint16(b[1:3]) == 0 && size >= 5 &&
			binary.BigEndian.Uint16(payload[0:2]) == 10 && binary.BigEndian.Uint16(payload[2:4]) == 60 {
			n := int(payload[4])
			if 5+n <= len(payload) {
				return string(payload[5 : 5+n]), true
			}
		}
		b = b[7+size+1:]
	}
	return "", false
}
