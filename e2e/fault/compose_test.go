package fault

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/raftmq/raftmq/api/client"
	"github.com/raftmq/raftmq/e2e"
	"github.com/raftmq/raftmq/proto"
)

// The cluster's first user, set through the compose file's variables.
const (
	user     = "fault"
	password = "fault-pass"
	image    = "raftmq:e2e-fault"
)

// skipWithoutDocker skips a fault scenario with -short and where no
// docker engine answers, saying which.
func skipWithoutDocker(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("fault suite: skipped with -short")
	}
	if why := dockerReady(); why != "" {
		t.Skipf("fault suite needs docker: %s", why)
	}
}

// dockerReady reports why docker cannot run the suite ("" when it can).
func dockerReady() string {
	if _, err := exec.LookPath("docker"); err != nil {
		return "no docker command"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		return fmt.Sprintf("no docker engine answers (%v: %s)", err, strings.TrimSpace(string(out)))
	}
	if len(composeCommand()) == 0 {
		return "neither 'docker compose' nor docker-compose is installed"
	}
	return ""
}

// composeCommand is the compose tool: the docker plugin where it exists,
// else the standalone docker-compose.
var composeCommand = sync.OnceValue(func() []string {
	if exec.Command("docker", "compose", "version").Run() == nil {
		return []string{"docker", "compose"}
	}
	if _, err := exec.LookPath("docker-compose"); err == nil {
		return []string{"docker-compose"}
	}
	return nil
})

// buildImage builds cmd/raftmq and cmd/raftmqctl statically and the deploy/Dockerfile image
// around it, once per test binary.
var buildImage = sync.OnceValues(func() (string, error) {
	root, err := e2e.ModuleRoot()
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "raftmq-fault-image")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	build := exec.Command("go", "build", "-trimpath", "-o", dir+string(filepath.Separator), "./cmd/raftmq", "./cmd/raftmqctl")
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	img := exec.Command("docker", "build", "-q", "-t", image, "-f", filepath.Join(root, "deploy", "Dockerfile"), dir)
	if out, err := img.CombinedOutput(); err != nil {
		return "", fmt.Errorf("docker build: %v\n%s", err, out)
	}
	return root, nil
})

// node is one container of the compose cluster.
type node struct {
	id        string // raft id, the compose service name
	container string // container id
	ip        string
}

func (n *node) amqpURL() string {
	return fmt.Sprintf("amqp://%s:%s@%s/", user, password, net.JoinHostPort(n.ip, "5672"))
}

// cluster is deploy/docker-compose.yml brought up under its own project
// name, network and host ports.
type cluster struct {
	t       *testing.T
	project string
	args    []string // compose command with -p and -f
	env     []string
	network string
	nodes   []*node
	// notBack says which nodes did not come back after the fault.
	notBack []string
	// ledAgain is how long after a node went down (sitOut) every group
	// had a leader on another node; 0 if not while it was down.
	ledAgain    time.Duration
	ledMeasured bool
	// noProcess is how long fewer than a majority of the nodes' processes
	// ran in the fault, when the scenario stopped them all (noMajority).
	noProcess time.Duration
	// groups are the queue groups whose digests must agree too.
	groups []string
}

// startCluster brings up the compose cluster and waits until every node is
// ready. The restart policy is turned off so that a killed node stays down
// until the scenario starts it.
func startCluster(t *testing.T, name string) *cluster { return startClusterOf(t, name, 3, nil) }

// placedGroups are the queue groups of a cluster started with placedEnv:
// every node a member of each, and new queues placed into them.
var (
	placedGroups = []string{"q1", "q2", "q3"}
	placedEnv    = []string{`RAFTMQ_QUEUE_GROUPS: "3"`, `RAFTMQ_PLACE_QUEUES: "true"`}
)

// startClusterOf is startCluster with size nodes: the compose file's
// three, and more defined like them in the override (their ports are not
// published: the test reaches every node at its address). env are more
// lines of every node's environment ("NAME: value").
func startClusterOf(t *testing.T, name string, size int, env []string) *cluster {
	t.Helper()
	root, err := buildImage()
	if err != nil {
		t.Fatal(err)
	}
	override := filepath.Join(t.TempDir(), "override.yml")
	if err := os.WriteFile(override, []byte(composeOverride(size, env)), 0o644); err != nil {
		t.Fatal(err)
	}
	c := &cluster{t: t, project: fmt.Sprintf("raftmqfault%d%s", os.Getpid(), name)}
	c.args = append(composeCommand(), "-p", c.project,
		"-f", filepath.Join(root, "deploy", "docker-compose.yml"), "-f", override)
	c.network = c.project + "_raftmq"
	t.Cleanup(func() {
		if t.Failed() {
			c.dumpLogs()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, c.args[0], append(c.args[1:], "down", "-v", "--remove-orphans", "-t", "2")...)
		cmd.Env = c.env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Logf("compose down: %v\n%s", err, out)
		}
	})

	// A /24 of its own, moved when the engine says it overlaps another.
	var up error
	secret := e2e.NewSecret(t) // the compose file requires one
	for attempt := 0; attempt < 5; attempt++ {
		subnet := fmt.Sprintf("172.30.%d", 100+rand.IntN(150))
		// The test calls the admin API on the containers' addresses
		// without TLS: the compose file takes credentials in clear only
		// when told to. The compose file runs a queue group per node;
		// the scenarios without placedEnv keep every queue in the
		// metadata log, which a node started without flags runs, and
		// placedEnv's lines in the override win over these.
		c.env = append(os.Environ(), "RAFTMQ_IMAGE="+image, "RAFTMQ_SUBNET="+subnet,
			"RAFTMQ_USER="+user, "RAFTMQ_PASSWORD="+password, "RAFTMQ_CLUSTER_SECRET="+secret,
			"RAFTMQ_ADMIN_PLAINTEXT=true", "RAFTMQ_QUEUE_GROUPS=0", "RAFTMQ_PLACE_QUEUES=false")
		for i := 1; i <= 3; i++ {
			for _, p := range []string{"AMQP", "GRPC", "HTTP", "MANAGEMENT"} {
				_, port, _ := net.SplitHostPort(e2e.FreeAddr(t))
				c.env = append(c.env, fmt.Sprintf("RAFTMQ%d_%s_PORT=%s", i, p, port))
			}
		}
		var out string
		out, up = c.compose("up", "-d")
		if up == nil {
			break
		}
		// Host ports are picked free and bound later: another process
		// can take one in between.
		if !strings.Contains(out, "overlap") && !strings.Contains(out, "address already in use") &&
			!strings.Contains(out, "port is already allocated") {
			t.Fatalf("compose up: %v\n%s", up, out)
		}
		c.compose("down", "-v", "--remove-orphans", "-t", "1")
	}
	if up != nil {
		t.Fatalf("compose up: %v", up)
	}
	for i := 1; i <= size; i++ {
		svc := fmt.Sprintf("raftmq%d", i)
		out, err := c.compose("ps", "-q", svc)
		if err != nil || strings.TrimSpace(out) == "" {
			t.Fatalf("compose ps %s: %v %s", svc, err, out)
		}
		id := strings.TrimSpace(out)
		ip := c.docker("inspect", "-f", `{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}`, id)
		c.nodes = append(c.nodes, &node{id: svc, container: id, ip: strings.TrimSpace(ip)})
	}
	for i := range c.nodes {
		c.waitReady(i)
	}
	c.waitMembers()
	return c
}

// composeOverride turns the compose file's restart policy off and, for a
// cluster of more than its three nodes, defines the others as the file
// defines its own, every node joining and expecting all of them; env are
// added to every node's environment.
func composeOverride(size int, env []string) string {
	var o strings.Builder
	o.WriteString("services:\n")
	join := make([]string, size)
	for i := range join {
		join[i] = fmt.Sprintf("raftmq%d:7946", i+1)
	}
	for i := 1; i <= size; i++ {
		fmt.Fprintf(&o, "  raftmq%d:\n    restart: \"no\"\n", i)
		if size == 3 {
			if len(env) > 0 {
				o.WriteString("    environment:\n")
			}
			for _, e := range env {
				fmt.Fprintf(&o, "      %s\n", e)
			}
			continue
		}
		if i > 3 {
			fmt.Fprintf(&o, `    image: ${RAFTMQ_IMAGE}
    hostname: raftmq%[1]d
    networks:
      raftmq: {ipv4_address: "${RAFTMQ_SUBNET}.%[2]d"}
    healthcheck:
      test: ["CMD", "/raftmq", "probe", "http://127.0.0.1:15692/readyz"]
      interval: 2s
      timeout: 2s
      retries: 30
    volumes: ["raftmq%[1]d:/data"]
`, i, 10+i)
		}
		fmt.Fprintf(&o, "    environment:\n      RAFTMQ_JOIN: %s\n      RAFTMQ_BOOTSTRAP_EXPECT: \"%d\"\n", strings.Join(join, ","), size)
		if i > 3 {
			fmt.Fprintf(&o, `      RAFTMQ_NODE_ID: raftmq%d
      RAFTMQ_CLUSTER_SECRET: ${RAFTMQ_CLUSTER_SECRET}
      RAFTMQ_ADMIN_PLAINTEXT: ${RAFTMQ_ADMIN_PLAINTEXT}
      RAFTMQ_DEFAULT_USER: ${RAFTMQ_USER}
      RAFTMQ_DEFAULT_PASSWORD: ${RAFTMQ_PASSWORD}
`, i)
		}
		for _, e := range env {
			fmt.Fprintf(&o, "      %s\n", e)
		}
	}
	if size > 3 {
		o.WriteString("volumes:\n")
		for i := 4; i <= size; i++ {
			fmt.Fprintf(&o, "  raftmq%d: {}\n", i)
		}
	}
	return o.String()
}

func (c *cluster) compose(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.args[0], append(c.args[1:], args...)...)
	cmd.Env = c.env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// docker runs a docker command that must succeed.
func (c *cluster) docker(args ...string) string {
	c.t.Helper()
	out, err := runDocker(args...)
	if err != nil {
		c.t.Fatal(err)
	}
	return out
}

// runDocker runs docker with args, for at most 2 minutes, and returns
// what it printed; the error names the command and holds its output.
func runDocker(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "docker", args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("docker %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// kill sends SIGKILL to node i's process (kill -9).
func (c *cluster) kill(i int) { c.docker("kill", "-s", "KILL", c.nodes[i].container) }

// stop stops node i with SIGTERM, as an operator would.
func (c *cluster) stop(i int) { c.docker("stop", "-t", "20", c.nodes[i].container) }

// start starts node i again and waits until it is ready; a node that does
// not come back is recorded (notBack) for the checker.
func (c *cluster) start(i int) {
	c.docker("start", c.nodes[i].container)
	c.comeBack(i)
}

// killAll kills the three nodes at once (a power cut).
func (c *cluster) killAll() {
	args := []string{"kill", "-s", "KILL"}
	for _, n := range c.nodes {
		args = append(args, n.container)
	}
	c.docker(args...)
}

// startNodes starts every node again and waits until each is ready.
func (c *cluster) startNodes() {
	args := []string{"start"}
	for _, n := range c.nodes {
		args = append(args, n.container)
	}
	c.docker(args...)
	for i := range c.nodes {
		c.comeBack(i)
	}
}

// freeze stops node i's processes (docker pause, the cgroup freezer);
// thaw resumes them. The freezer gives up on a task it cannot stop
// within its retries, as one in a long fsync on a loaded disk can be
// (runc's "unable to freeze", moby/moby#48205); runc thaws the container
// again then, so the pause is tried again.
func (c *cluster) freeze(i int) {
	c.t.Helper()
	for attempt := 1; ; attempt++ {
		out, err := runDocker("pause", c.nodes[i].container)
		if err == nil {
			return
		}
		if attempt < freezeAttempts && strings.Contains(out, "unable to freeze") {
			c.t.Logf("docker pause of %s, attempt %d: %s", c.nodes[i].id, attempt, strings.TrimSpace(out))
			continue
		}
		c.t.Fatal(err)
	}
}

func (c *cluster) thaw(i int) { c.docker("unpause", c.nodes[i].container) }

// freezeAttempts is how many times a pause the freezer gave up on is
// tried.
const freezeAttempts = 5

// comeBack waits until node i is ready again; one that exits or stays
// unready is recorded in notBack with its log.
func (c *cluster) comeBack(i int) {
	if err := c.ready(i); err != nil {
		n := c.nodes[i]
		out, _ := exec.Command("docker", "logs", "--tail", "40", n.container).CombinedOutput()
		c.notBack = append(c.notBack, fmt.Sprintf("%s did not come back: %v\n---- %s log tail ----\n%s", n.id, err, n.id, out))
	}
}

// isolate cuts node i off from its peers and leaves it reachable from
// the test: every packet between it and another node's address is
// dropped (raft, gossip, forwarding, replies), while the host, which
// reaches each node through the network's gateway, keeps talking to its
// AMQP, admin and HTTP ports. The cut is silent, as a switch that fails
// or a firewall rule would make it: nothing refuses, nothing resets.
//
// The rules go into node i's own network namespace (iptables run through
// nsenter from the host: the image, built FROM scratch, has no iptables)
// and name only the addresses of this project's network, so nothing
// outside the cluster is touched. A network disconnect would have taken
// the AMQP port away from the clients too, and the node would never
// face a client it can no longer serve. rejoin removes the rules.
func (c *cluster) isolate(i int) { c.peerRules(i, "-I") }
func (c *cluster) rejoin(i int)  { c.peerRules(i, "-D") }

// peerRules inserts (-I) or deletes (-D) the DROP rules between node i
// and its peers in node i's network namespace: dropping both directions
// at one end cuts the link.
func (c *cluster) peerRules(i int, op string) {
	c.t.Helper()
	n := c.nodes[i]
	pid := strings.TrimSpace(c.docker("inspect", "-f", "{{.State.Pid}}", n.container))
	if pid == "" || pid == "0" {
		c.t.Fatalf("%s has no process to cut off (pid %q)", n.id, pid)
	}
	for j, peer := range c.nodes {
		if j == i {
			continue
		}
		for _, rule := range [][]string{
			{"INPUT", "-s", peer.ip + "/32"},
			{"OUTPUT", "-d", peer.ip + "/32"},
		} {
			args := append([]string{"-t", pid, "-n", "iptables", "-w", op}, rule...)
			args = append(args, "-j", "DROP")
			if out, err := exec.Command("nsenter", args...).CombinedOutput(); err != nil {
				c.t.Fatalf("nsenter %s: %v\n%s", strings.Join(args, " "), err, out)
			}
		}
	}
}

// partitionReady reports why isolate cannot work here ("" when it can):
// entering a container's network namespace and changing its firewall
// takes root on the docker host and the host's nsenter and iptables.
func partitionReady() string {
	if os.Geteuid() != 0 {
		return "cutting a node off needs root (nsenter into its network namespace)"
	}
	for _, tool := range []string{"nsenter", "iptables"} {
		if _, err := exec.LookPath(tool); err != nil {
			return "cutting a node off needs " + tool + " on the docker host"
		}
	}
	return ""
}

// stopAll and startAll stop (SIGTERM, as an operator would) and start
// the whole cluster, every node at once. They call docker, not the compose
// tool: its own start-up, a second or more of it on a loaded machine each
// time, would count in the pause the scenario measures.
func (c *cluster) stopAll() { c.dockerEach("stop", "-t", "20") }

// noMajority reads from docker when each node's container last exited
// and started, and returns how long fewer than a majority of them ran
// (withoutMajority): after a stop of all, the time docker took to stop
// and start containers whose processes had already exited or not yet
// begun, as far as it kept the cluster from a majority.
func (c *cluster) noMajority() time.Duration {
	c.t.Helper()
	var starts, exits []time.Time
	for _, n := range c.nodes {
		out := strings.TrimSpace(c.docker("inspect", "-f", "{{.State.StartedAt}} {{.State.FinishedAt}}", n.container))
		started, finished, ok := strings.Cut(out, " ")
		s, err1 := time.Parse(time.RFC3339Nano, started)
		f, err2 := time.Parse(time.RFC3339Nano, finished)
		if !ok || err1 != nil || err2 != nil {
			c.t.Fatalf("docker inspect %s: %q: want two times", n.container, out)
		}
		starts, exits = append(starts, s), append(exits, f)
	}
	return withoutMajority(exits, starts)
}

// withoutMajority is how long fewer than a majority of the nodes'
// processes ran while all were stopped and then started again (each
// node's exit and start; every exit before every start): from the exit
// that left fewer than a majority running to the start that made a
// majority again. No log commits without a majority, so no confirm can
// come sooner however quickly the broker serves: docker starting the
// containers one by one is docker's time.
func withoutMajority(exits, starts []time.Time) time.Duration {
	n := len(exits)
	if n == 0 || len(starts) != n {
		return 0
	}
	q := n/2 + 1
	exits, starts = slices.Clone(exits), slices.Clone(starts)
	slices.SortFunc(exits, func(a, b time.Time) int { return a.Compare(b) })
	slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
	return max(starts[q-1].Sub(exits[n-q]), 0)
}

func (c *cluster) startAll() {
	c.dockerEach("start")
	for i := range c.nodes {
		c.comeBack(i)
	}
}

// dockerEach runs a docker command on every node's container at once.
func (c *cluster) dockerEach(args ...string) {
	c.t.Helper()
	errs := make([]error, len(c.nodes))
	var wg sync.WaitGroup
	for i, n := range c.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = runDocker(append(append([]string{}, args...), n.container)...)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		c.t.Fatal(err)
	}
}

// waitReady waits until node i answers /readyz with 200.
func (c *cluster) waitReady(i int) {
	c.t.Helper()
	if err := c.ready(i); err != nil {
		c.t.Fatalf("%s not ready: %v", c.nodes[i].id, err)
	}
}

// errExited ends the wait for a container that is no longer running.
var errExited = errors.New("container exited")

// ready waits until node i answers /readyz with 200, and gives up at once
// when its container exits.
func (c *cluster) ready(i int) error {
	n := c.nodes[i]
	return e2e.Eventually(90*time.Second, func() error {
		state, err := exec.Command("docker", "inspect", "-f", "{{.State.Status}} {{.State.ExitCode}}", n.container).Output()
		if err == nil && strings.HasPrefix(string(state), "exited") {
			return fmt.Errorf("%w (%s)", errExited, strings.TrimSpace(string(state)))
		}
		return c.readyz(i)
	}, errExited)
}

// readyz asks node i's /readyz once: nil when it is ready to serve
// clients, the reason it gives otherwise.
func (c *cluster) readyz(i int) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+net.JoinHostPort(c.nodes[i].ip, "15692")+"/readyz", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s /readyz: %s %s", c.nodes[i].id, resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

// admin dials node i's admin API as the cluster's first user (an
// administrator): the test is not on the nodes' loopback.
func (c *cluster) admin(i int) (proto.AdminClient, func()) {
	cc, err := grpc.NewClient(net.JoinHostPort(c.nodes[i].ip, "5680"),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(client.BasicCredentials{Username: user, Password: password}))
	if err != nil {
		c.t.Fatal(err)
	}
	return proto.NewAdminClient(cc), func() { cc.Close() }
}

// status asks node i for the cluster's status.
func (c *cluster) status(i int) (*proto.ClusterStatusResponse, error) {
	a, done := c.admin(i)
	defer done()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return a.ClusterStatus(ctx, &proto.ClusterStatusRequest{})
}

// waitMembers waits until every node sees one leader and all three
// members alive.
func (c *cluster) waitMembers() {
	c.t.Helper()
	err := e2e.Eventually(60*time.Second, func() error {
		var leader string
		for i := range c.nodes {
			st, err := c.status(i)
			if err != nil {
				return err
			}
			if st.LeaderId == "" || (leader != "" && st.LeaderId != leader) {
				return fmt.Errorf("%s sees leader %q, another sees %q", c.nodes[i].id, st.LeaderId, leader)
			}
			leader = st.LeaderId
			for _, m := range st.Nodes {
				if m.Health != "alive" {
					return fmt.Errorf("%s sees %s %s", c.nodes[i].id, m.Id, m.Health)
				}
			}
			if len(st.Nodes) != len(c.nodes) {
				return fmt.Errorf("%s sees %d members", c.nodes[i].id, len(st.Nodes))
			}
			// A node that resumed from a pause may still be about to
			// find it was cut off, and close its clients' connections.
			if err := c.readyz(i); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		c.t.Fatalf("cluster not whole: %v", err)
	}
}

// leader returns the index of the current leader.
func (c *cluster) leader() int {
	c.t.Helper()
	var idx = -1
	err := e2e.Eventually(30*time.Second, func() error {
		for i := range c.nodes {
			st, err := c.status(i)
			if err != nil || st.LeaderId == "" {
				continue
			}
			for j, n := range c.nodes {
				if n.id == st.LeaderId {
					idx = j
					return nil
				}
			}
		}
		return errors.New("no node names a leader")
	})
	if err != nil {
		c.t.Fatal(err)
	}
	return idx
}

// digestsAgree waits until the three nodes report the same state digest at
// the same applied index.
func (c *cluster) digestsAgree(timeout time.Duration) error {
	return e2e.Eventually(timeout, func() error {
		for _, g := range append([]string{""}, c.groups...) {
			var first *proto.DigestResponse
			members := 0
			for i := range c.nodes {
				a, done := c.admin(i)
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				d, err := a.Digest(ctx, &proto.DigestRequest{Group: g})
				cancel()
				done()
				if g != "" && status.Code(err) == codes.NotFound && len(c.nodes) > 3 {
					// Past three nodes a queue group has three members:
					// this node is not one of them.
					continue
				}
				if err != nil {
					return fmt.Errorf("group %q: %w", g, err)
				}
				members++
				if first == nil {
					first = d
					continue
				}
				if d.AppliedIndex != first.AppliedIndex || d.Digest != first.Digest {
					return fmt.Errorf("group %q: %s: index %d digest %.12s; %s: index %d digest %.12s", g,
						first.NodeId, first.AppliedIndex, first.Digest, d.NodeId, d.AppliedIndex, d.Digest)
				}
			}
			if want := min(3, len(c.nodes)); g != "" && members < want {
				return fmt.Errorf("group %q: %d members answer, want %d", g, members, want)
			}
		}
		return nil
	})
}

// logQueues logs the queues as each node lists them: where a drain
// stopped, what holds the messages.
func (c *cluster) logQueues() {
	for i, n := range c.nodes {
		a, done := c.admin(i)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := a.ListQueues(ctx, &proto.ListQueuesRequest{Vhost: "/"})
		cancel()
		done()
		if err != nil {
			c.t.Logf("%s: list queues: %v", n.id, err)
			continue
		}
		var b strings.Builder
		for _, q := range resp.GetQueues() {
			fmt.Fprintf(&b, "  %s group=%s ready=%d unacked=%d consumers=%d\n", q.GetName(), q.GetRaftGroup(), q.GetReady(), q.GetUnacked(), q.GetConsumers())
		}
		ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
		cons, err := a.ListConsumers(ctx, &proto.ListRequest{Vhost: "/"})
		cancel()
		if err == nil {
			for _, x := range cons.GetConsumers() {
				r := x.GetConsumer()
				fmt.Fprintf(&b, "  consumer %s/%s/%d/%s of %s unacked=%d\n", r.GetChannel().GetNode(), r.GetChannel().GetConnection(),
					r.GetChannel().GetChannel(), r.GetTag(), x.GetQueue(), x.GetUnacked())
			}
		}
		c.t.Logf("%s's queues:\n%s", n.id, b.String())
	}
}

// nodeLogs are the whole logs of the cluster's nodes, by node.
func (c *cluster) nodeLogs() []string {
	logs := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		out, _ := exec.Command("docker", "logs", n.container).CombinedOutput()
		logs[i] = string(out)
	}
	return logs
}

// logCourse logs the fault's course in logs (faultCourse), if it has one.
func (c *cluster) logCourse(logs []string) {
	if course := faultCourse(logs); len(course) > 0 {
		c.t.Logf("---- the fault's course: elections, leaderships, silences, nodes declared down, failed hand-offs ----\n%s",
			strings.Join(course, "\n"))
	}
}

func (c *cluster) dumpLogs() {
	logs := c.nodeLogs()
	// RAFTMQ_FAULT_LOGS names a folder to keep every node's whole log in,
	// for a failure whose cause is older than the tail.
	if dir := os.Getenv("RAFTMQ_FAULT_LOGS"); dir != "" {
		for i, n := range c.nodes {
			name := filepath.Join(dir, strings.ReplaceAll(c.t.Name(), "/", "_")+"-"+n.id+".log")
			if err := os.WriteFile(name, []byte(logs[i]), 0o644); err != nil {
				c.t.Logf("keeping %s's log: %v", n.id, err)
			}
		}
	}
	// First the fault's course, which a late death or a slow election is
	// measured against, from every node in one timeline: CI repeats only
	// a failure's first lines, and the tails below run long. Then the
	// events older than the tails that the scenario's checks ask about: a
	// lease that ran out, a queue's deletion.
	c.logCourse(logs)
	for i, n := range c.nodes {
		var leases []string
		for _, l := range strings.Split(logs[i], "\n") {
			if strings.Contains(l, "lease ran out") {
				leases = append(leases, l)
			}
		}
		if len(leases) > 0 {
			c.t.Logf("---- %s: leases that ran out ----\n%s", n.id, strings.Join(leases, "\n"))
		}
	}
	for _, n := range c.nodes {
		out, _ := exec.Command("docker", "logs", "--tail", "60", n.container).CombinedOutput()
		c.t.Logf("---- %s (%s) log tail ----\n%s", n.id, n.ip, out)
	}
}

// courseEvents are the log messages that make up a fault's course.
var courseEvents = []string{
	"entering candidate state", "entering leader state", "lost leadership",
	"has not answered raft", "declared node down", "node-down proposal failed",
	"handing off a group's outbox failed",
}

// faultCourse merges the course events of the nodes' logs (slog's text
// lines) into one list in time order, each shortened to its time, node,
// group, message and error: a line a reader takes in at a glance.
func faultCourse(logs []string) []string {
	type event struct {
		at   time.Time
		line string
	}
	var events []event
	for _, log := range logs {
		for _, l := range e2e.LinesNaming(log, courseEvents) {
			// A line whose time does not parse sorts first.
			at, _ := time.Parse(time.RFC3339Nano, logFields(l)["time"])
			events = append(events, event{at, shortLine(at, l)})
		}
	}
	slices.SortStableFunc(events, func(a, b event) int { return a.at.Compare(b.at) })
	course := make([]string, len(events))
	for i, e := range events {
		course[i] = e.line
	}
	return course
}

// shortLine keeps of a slog text line logged at at its time of day, node,
// group, message (raft's own prefix cut), the id of the node it names and
// its error.
func shortLine(at time.Time, l string) string {
	f := logFields(l)
	group := f["group"]
	if group == "" {
		group = "meta"
	}
	parts := []string{at.UTC().Format("15:04:05.000"), f["node"], group, strings.TrimPrefix(f["msg"], "raft: ")}
	for _, k := range []string{"id", "silent", "index", "retry", "err"} {
		if v := f[k]; v != "" {
			parts = append(parts, k+"="+v)
		}
	}
	return strings.Join(parts, " ")
}

// logFields reads a slog text line's key=value fields from left to right,
// values unquoted (slog quotes with strconv.Quote), so that a key=
// inside a quoted value (raft's messages carry node=...) is not taken for
// a field of the line.
func logFields(l string) map[string]string {
	f := map[string]string{}
	for l != "" {
		key, rest, ok := strings.Cut(strings.TrimLeft(l, " "), "=")
		if !ok {
			break
		}
		v := rest
		if q, err := strconv.QuotedPrefix(rest); err == nil {
			v, _ = strconv.Unquote(q)
			rest = rest[len(q):]
		} else {
			v, rest, _ = strings.Cut(rest, " ")
		}
		if _, seen := f[key]; !seen {
			f[key] = v
		}
		l = rest
	}
	return f
}

// sitOut keeps node i down for d, the fault's fixed spell, and meanwhile
// measures how long it takes until every group (the metadata group and
// each queue group) names a leader other than node i, as the nodes that
// run each group report it: the time it takes the cluster to lead again.
func (c *cluster) sitOut(i int, d time.Duration) {
	start := time.Now()
	end := start.Add(d)
	c.ledAgain, c.ledMeasured = 0, true
	// One client per other node for the whole spell: a connection per
	// poll would add its handshake to every reading.
	admins := map[int]proto.AdminClient{}
	for j := range c.nodes {
		if j != i {
			a, done := c.admin(j)
			defer done()
			admins[j] = a
		}
	}
	for time.Now().Before(end) {
		if c.ledElsewhere(i, admins) {
			c.ledAgain = time.Since(start)
			break
		}
		time.Sleep(min(50*time.Millisecond, time.Until(end)))
	}
	time.Sleep(time.Until(end))
}

// ledElsewhere reports whether each group has a leader other than node i,
// by the accounts of the other nodes, through their admins (ListGroups:
// the groups each runs).
func (c *cluster) ledElsewhere(i int, admins map[int]proto.AdminClient) bool {
	led := map[string]bool{}
	for _, a := range admins {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		resp, err := a.ListGroups(ctx, &proto.ListGroupsRequest{})
		cancel()
		if err != nil {
			continue
		}
		for _, g := range resp.GetGroups() {
			if l := g.GetLeader(); l != "" && l != c.nodes[i].id {
				led[g.GetId()] = true
			}
		}
	}
	for _, g := range append([]string{""}, c.groups...) {
		if !led[g] {
			return false
		}
	}
	return true
}
