package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// prometheusServer is a Prometheus process scraping a test cluster: the
// binary of Debian's prometheus package, run with its own configuration
// and data directory on a free loopback port, killed when the test ends.
type prometheusServer struct {
	t    *testing.T
	addr string
}

func startPrometheus(t *testing.T, c *Cluster) *prometheusServer {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Skip("prometheus is not installed (Debian: apt-get install prometheus): the dashboard expressions are not evaluated by Prometheus")
	}
	dir := t.TempDir()
	var targets []string
	for _, n := range c.Nodes {
		targets = append(targets, strconv.Quote(n.HTTPAddr))
	}
	// A short scrape interval: the test waits for a scrape after the
	// state settles. The timeout is the interval's: a node slowed down
	// (a -race build on a busy machine) may take longer than a second.
	cfg := fmt.Sprintf("global:\n  scrape_interval: 2s\n  scrape_timeout: 2s\n  evaluation_interval: 2s\n"+
		"scrape_configs:\n  - job_name: raftmq\n    static_configs:\n      - targets: [%s]\n", strings.Join(targets, ", "))
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := FreeAddr(t)
	logf, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("prometheus log:\n%s", b)
		}
	})
	p := &prometheusServer{t: t, addr: addr}
	// Every target up.
	if err := Eventually(60*time.Second, func() error {
		v, err := p.query(`sum(up{job="raftmq"})`)
		if err != nil {
			return err
		}
		if len(v) != 1 || v[0].value != float64(len(c.Nodes)) {
			return fmt.Errorf("targets up: %v", v)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return p
}

// sample is one element of an instant vector.
type sample struct {
	metric map[string]string
	at     float64 // unix seconds
	value  float64
}

// query evaluates expr now through Prometheus' HTTP API.
func (p *prometheusServer) query(expr string) ([]sample, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+p.addr+"/api/v1/query?query="+url.QueryEscape(expr), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, err
	}
	if body.Status != "success" {
		return nil, fmt.Errorf("%s: %s", expr, body.Error)
	}
	if body.Data.ResultType != "vector" {
		return nil, fmt.Errorf("%s: a %s, not a vector", expr, body.Data.ResultType)
	}
	var out []sample
	for _, r := range body.Data.Result {
		at, _ := r.Value[0].(float64)
		s, _ := r.Value[1].(string)
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: value %v", expr, r.Value)
		}
		out = append(out, sample{metric: r.Metric, at: at, value: v})
	}
	return out, nil
}

// mgmtJSON GETs a management API path of n as guest into v.
func mgmtJSON(t *testing.T, n *Node, path string, v any) {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+n.ManagementAddr+path, nil)
	req.SetBasicAuth("guest", "guest")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d", path, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
}

// TestPrometheus_OverviewDashboard: Prometheus scrapes the three nodes of
// a cluster, and the expressions of Grafana's RabbitMQ-Overview dashboard
// (written out by hand, its cluster variable set to raftmq's cluster name)
// evaluate to what the management API shows at the same moment: a queue of
// 200 messages with a consumer of prefetch 30 (and look-ahead) attached
// shows 170 ready and 30 unacknowledged in both, the object counts and
// message counters agree, and each node's memory, file descriptors and
// free disk are its own, as /api/nodes reports them.
func TestPrometheus_OverviewDashboard(t *testing.T) {
	if _, err := exec.LookPath("prometheus"); err != nil {
		t.Skip("prometheus is not installed (Debian: apt-get install prometheus): the dashboard expressions are not evaluated by Prometheus")
	}
	c := StartCluster(t, 3)
	node := followerOf(t, c)

	conn, err := amqp.Dial(node.AMQPURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	pub, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	const queue = "prom-depth"
	if _, err := pub.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := pub.Confirm(false); err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		dc, err := pub.PublishWithDeferredConfirm("", queue, false, false, amqp.Publishing{Body: []byte(strconv.Itoa(i))})
		if err != nil {
			t.Fatal(err)
		}
		if i == 199 {
			if ok, err := dc.WaitContext(context.Background()); err != nil || !ok {
				t.Fatalf("confirm: %v %v", ok, err)
			}
		}
	}
	// A consumer with prefetch 30 that acknowledges nothing: it is
	// assigned prefetch × (1 + look-ahead), sees 30.
	cons, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := cons.Qos(30, 0, false); err != nil {
		t.Fatal(err)
	}
	deliveries, err := cons.Consume(queue, "prom", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 30 {
		select {
		case <-deliveries:
		case <-time.After(30 * time.Second):
			t.Fatal("the consumer got fewer than 30 messages")
		}
	}
	if err := Eventually(30*time.Second, func() error {
		var q map[string]any
		mgmtJSON(t, node, "/api/queues/%2F/"+queue, &q)
		if q["messages_ready"] != float64(170) || q["messages_unacknowledged"] != float64(30) {
			return fmt.Errorf("ready %v unacked %v", q["messages_ready"], q["messages_unacknowledged"])
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	settled := float64(time.Now().UnixMilli()) / 1000

	p := startPrometheus(t, c)
	// A scrape of every node after the state settled.
	if err := Eventually(30*time.Second, func() error {
		v, err := p.query(`timestamp(rabbitmq_identity_info)`)
		if err != nil {
			return err
		}
		if len(v) != len(c.Nodes) {
			return fmt.Errorf("identities %v", v)
		}
		for _, s := range v {
			if s.value <= settled {
				return fmt.Errorf("%s last scraped at %v, before %v", s.metric["instance"], s.value, settled)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	// The state no longer moves, so Prometheus' last scrape and the API
	// now describe the same moment. A scrape that failed under load
	// (its series are then stale, without a value) is waited out.
	var last error
	attempts := 0
	if err := Eventually(60*time.Second, func() error {
		last = dashboardAgrees(t, p, node, len(c.Nodes))
		if attempts++; last != nil && attempts == 1 {
			t.Logf("the first evaluation disagreed (retrying): %v", last)
		}
		return last
	}); err != nil {
		t.Fatal(last)
	}
}

// dashboardAgrees evaluates RabbitMQ-Overview's expressions and compares
// them with the management API of node, saying every disagreement.
func dashboardAgrees(t *testing.T, p *prometheusServer, node *Node, members int) error {
	var ov struct {
		ClusterName  string         `json:"cluster_name"`
		ObjectTotals map[string]int `json:"object_totals"`
		QueueTotals  map[string]any `json:"queue_totals"`
		MessageStats map[string]any `json:"message_stats"`
	}
	mgmtJSON(t, node, "/api/overview", &ov)
	var problems []string
	bad := func(format string, a ...any) { problems = append(problems, fmt.Sprintf(format, a...)) }
	// RabbitMQ-Overview's join: each series times rabbitmq_identity_info
	// of the chosen cluster (and namespace, empty outside Kubernetes).
	join := func(series string) string {
		return fmt.Sprintf(`sum(%s * on(instance) group_left(rabbitmq_cluster) rabbitmq_identity_info{rabbitmq_cluster=%q, namespace=""})`, series, ov.ClusterName)
	}
	for _, tc := range []struct {
		panel, expr string
		want        float64
	}{
		{"Ready messages", join("rabbitmq_queue_messages_ready"), 170},
		{"Unacknowledged messages", join("rabbitmq_queue_messages_unacked"), 30},
		{"Queues", join("rabbitmq_queues"), float64(ov.ObjectTotals["queues"])},
		{"Connections", join("rabbitmq_connections"), float64(ov.ObjectTotals["connections"])},
		{"Consumers", join("rabbitmq_consumers"), float64(ov.ObjectTotals["consumers"])},
		{"Publishers", join("rabbitmq_channels") + " - " + join("rabbitmq_channel_consumers"),
			float64(ov.ObjectTotals["channels"] - ov.ObjectTotals["consumers"])},
		{"Channels", join("rabbitmq_channels"), float64(ov.ObjectTotals["channels"])},
		{"published (counter)", join("rabbitmq_channel_messages_published_total"), ov.MessageStats["publish"].(float64)},
		{"delivered (counter)", join("rabbitmq_channel_messages_delivered_ack_total"), ov.MessageStats["deliver_get"].(float64)},
	} {
		v, err := p.query(tc.expr)
		switch {
		case err != nil:
			bad("%s: %v", tc.panel, err)
		case len(v) != 1:
			bad("%s: %d values in Prometheus (%s)", tc.panel, len(v), tc.expr)
		case v[0].value != tc.want:
			bad("%s: Prometheus %v, management API %v (%s)", tc.panel, v[0].value, tc.want, tc.expr)
		}
	}
	if ov.QueueTotals["messages_ready"] != float64(170) || ov.QueueTotals["messages_unacknowledged"] != float64(30) {
		bad("overview queue totals %v", ov.QueueTotals)
	}

	// Per node: the dashboard's memory and disk panels join on
	// rabbitmq_node; /api/nodes of the follower reports every member's
	// own figures.
	perNode := func(series string) string {
		return fmt.Sprintf(`%s * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster=%q, namespace=""}`, series, ov.ClusterName)
	}
	byNode := func(expr string) map[string]float64 {
		v, err := p.query(expr)
		if err != nil {
			bad("%v", err)
		}
		out := map[string]float64{}
		for _, s := range v {
			out[s.metric["rabbitmq_node"]] = s.value
		}
		return out
	}
	memAvail := byNode("(" + perNode("rabbitmq_resident_memory_limit_bytes") + ") - (" + perNode("rabbitmq_process_resident_memory_bytes") + ")")
	memUsed := byNode(perNode("rabbitmq_process_resident_memory_bytes"))
	fds := byNode(perNode("rabbitmq_process_open_fds"))
	disk := byNode(perNode("rabbitmq_disk_space_available_bytes"))
	var nodes []map[string]any
	mgmtJSON(t, node, "/api/nodes", &nodes)
	if len(nodes) != members || len(memUsed) != members {
		bad("%d nodes in the API, %d in Prometheus", len(nodes), len(memUsed))
	}
	// Memory and descriptors move between the scrape and the API call:
	// near, not equal. Free disk is the last check's on both sides.
	near := func(a, b, tol float64) bool { return math.Abs(a-b) <= tol*math.Max(math.Abs(a), math.Abs(b)) }
	for _, n := range nodes {
		name := n["name"].(string)
		used, _ := n["mem_used"].(float64)
		limit, _ := n["mem_limit"].(float64)
		if used == 0 || !near(memUsed[name], used, 0.25) || !near(memAvail[name], limit-used, 0.05) {
			bad("%s: memory used %v / available %v in Prometheus, %v / %v in the API", name, memUsed[name], memAvail[name], used, limit-used)
		}
		if fu, _ := n["fd_used"].(float64); fu == 0 || math.Abs(fds[name]-fu) > 10 {
			bad("%s: open fds %v in Prometheus, %v in the API", name, fds[name], n["fd_used"])
		}
		if df, _ := n["disk_free"].(float64); df == 0 || !near(disk[name], df, 0.01) {
			bad("%s: free disk %v in Prometheus, %v in the API", name, disk[name], n["disk_free"])
		}
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "\n"))
	}
	return nil
}
