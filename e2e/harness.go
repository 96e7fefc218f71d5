package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Node is one raftmq process of a test cluster.
type Node struct {
	ID         string
	AMQPAddr   string
	GRPCAddr   string
	RaftAddr   string
	GossipAddr string
	HTTPAddr   string
	DataDir    string
	LogPath    string
	// ExtraArgs are appended to the node's command line and Env to its
	// environment on every Start (set them from a Setup hook, or before a
	// restart).
	ExtraArgs []string
	Env       []string
	// Bin, when set, is the raftmq binary the node runs instead of the
	// one built from this checkout (another release's, for an upgrade).
	Bin string

	// ManagementAddr serves RabbitMQ's management HTTP API.
	ManagementAddr string

	cmd  *exec.Cmd
	done chan struct{}
}

// PID is the node's process id while it runs (0 before its first Start).
func (n *Node) PID() int {
	if n.cmd == nil || n.cmd.Process == nil {
		return 0
	}
	return n.cmd.Process.Pid
}

// AMQPURL is the node's AMQP URL for the default guest user.
func (n *Node) AMQPURL() string { return "amqp://guest:guest@" + n.AMQPAddr + "/" }

// AMQPSpecURL is AMQPURL for clients that read URLs as the AMQP URI spec
// does (rabbitmq-c, Bunny), where the path "/" names the vhost "" and "/"
// is named by its escape.
func (n *Node) AMQPSpecURL() string { return "amqp://guest:guest@" + n.AMQPAddr + "/%2F" }

// Running reports whether the process is alive.
func (n *Node) Running() bool {
	if n.cmd == nil {
		return false
	}
	select {
	case <-n.done:
		return false
	default:
		return true
	}
}

// Cluster is a set of raftmq processes on loopback started by a test.
type Cluster struct {
	t    testing.TB
	bin  string
	join string
	// Secret is the cluster secret every node gets through
	// RAFTMQ_CLUSTER_SECRET, as the README's example sets it (a node's Env
	// may override it).
	Secret string
	Nodes  []*Node
	// root holds the nodes' folders and logs. It is made before the
	// cluster's cleanup is registered, so that it is removed after that
	// cleanup has dumped the logs of a failed test (cleanups run last
	// registered first; a TempDir made later would be gone by then).
	root string
}

// NewSecret returns a random cluster secret, as `openssl rand -base64 32`
// makes one.
func NewSecret(t testing.TB) string {
	t.Helper()
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(b)
}

// built caches the binaries a test binary built, by package.
var built sync.Map // package path -> *buildResult

type buildResult struct {
	once sync.Once
	path string
	err  error
}

// Binary builds cmd/raftmq once per test binary and returns its path.
func Binary(t testing.TB) string { return buildCmd(t, "raftmq") }

// CtlBinary builds cmd/raftmqctl once per test binary and returns its path.
func CtlBinary(t testing.TB) string { return buildCmd(t, "raftmqctl") }

func buildCmd(t testing.TB, name string) string {
	t.Helper()
	v, _ := built.LoadOrStore(name, &buildResult{})
	r := v.(*buildResult)
	r.once.Do(func() {
		root, err := ModuleRoot()
		if err != nil {
			r.err = err
			return
		}
		dir, err := os.MkdirTemp("", "raftmq-e2e-bin")
		if err != nil {
			r.err = err
			return
		}
		r.path = filepath.Join(dir, name)
		cmd := exec.Command("go", "build", "-o", r.path, "./cmd/"+name)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			r.err = fmt.Errorf("go build ./cmd/%s: %v\n%s", name, err, out)
		}
	})
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.path
}

// ModuleRoot is the folder of the raftmq module the tests run in.
func ModuleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("not inside the raftmq module")
	}
	return filepath.Dir(mod), nil
}

// handedOut are the addresses FreeAddr gave in this process: the kernel
// may give a port that was just released again at once, and two nodes
// of one cluster were handed the same one (the second exited, "address
// already in use", three starts in a row).
var handedOut = struct {
	sync.Mutex
	addrs map[string]bool
}{addrs: map[string]bool{}}

// FreeAddr returns a loopback address with a port that was free a moment
// ago and that no other FreeAddr of this process returned.
func FreeAddr(t testing.TB) string {
	t.Helper()
	handedOut.Lock()
	defer handedOut.Unlock()
	for range 1000 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		_ = l.Close()
		if !handedOut.addrs[addr] {
			handedOut.addrs[addr] = true
			return addr
		}
	}
	t.Fatal("no loopback port left that this process has not handed out")
	return ""
}

// StartCluster starts n raftmq processes that form one cluster
// (--bootstrap-expect n, each joining the first node's gossip address) and
// waits until every node answers /readyz with 200.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	return StartClusterWith(t, n, nil)
}

// StartClusterWith is StartCluster with setup called for each node after
// its addresses are chosen and before it starts (to set ExtraArgs or Env).
func StartClusterWith(t testing.TB, n int, setup func(i int, node *Node)) *Cluster {
	t.Helper()
	c := &Cluster{t: t, bin: Binary(t), Secret: NewSecret(t), root: t.TempDir()}
	t.Cleanup(func() {
		for i, node := range c.Nodes {
			if node.Running() {
				c.Stop(i)
			}
		}
		if t.Failed() {
			c.DumpLogs()
		}
	})
	// Ports are picked free and released before the nodes bind them, so a
	// parallel test can take one in between: a node that exits because its
	// address is in use makes the whole cluster start again on new ports.
	const attempts = 3
	for attempt := 1; ; attempt++ {
		c.place(t, n)
		for i := range c.Nodes {
			if setup != nil {
				setup(i, c.Nodes[i])
			}
			c.Start(i)
		}
		err := c.waitAllReady(60 * time.Second)
		if err == nil {
			return c
		}
		if attempt == attempts || !c.portTaken() {
			c.DumpLogs()
			t.Fatalf("cluster not ready: %v", err)
		}
		t.Logf("attempt %d: a port was taken by another process (%v); starting again on new ports", attempt, err)
		for i, node := range c.Nodes {
			if node.Running() {
				c.Kill(i)
			}
		}
	}
}

// place gives the cluster n fresh nodes with new addresses and folders.
func (c *Cluster) place(t testing.TB, n int) {
	base := c.dir(t, "cluster")
	c.Nodes = nil
	for i := 0; i < n; i++ {
		c.Nodes = append(c.Nodes, newNode(t, base, fmt.Sprintf("n%d", i+1)))
	}
	c.join = c.Nodes[0].GossipAddr
}

// AddNode appends a node with fresh addresses and folder to the cluster,
// not started: Start(len(c.Nodes)-1) starts it, joining the first node.
func (c *Cluster) AddNode(id string) *Node {
	n := newNode(c.t, c.dir(c.t, id), id)
	c.Nodes = append(c.Nodes, n)
	return n
}

// dir makes a new folder in the cluster's root.
func (c *Cluster) dir(t testing.TB, prefix string) string {
	t.Helper()
	if c.root == "" {
		c.root = t.TempDir()
	}
	d, err := os.MkdirTemp(c.root, prefix)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func newNode(t testing.TB, dir, id string) *Node {
	return &Node{
		ID:         id,
		AMQPAddr:   FreeAddr(t),
		GRPCAddr:   FreeAddr(t),
		RaftAddr:   FreeAddr(t),
		GossipAddr: FreeAddr(t),
		HTTPAddr:   FreeAddr(t),
		DataDir:    filepath.Join(dir, id),
		LogPath:    filepath.Join(dir, id+".log"),

		ManagementAddr: FreeAddr(t),
	}
}

// portTaken reports whether a node's log says one of its addresses was in
// use.
func (c *Cluster) portTaken() bool {
	for _, n := range c.Nodes {
		if b, err := os.ReadFile(n.LogPath); err == nil && bytes.Contains(b, []byte("address already in use")) {
			return true
		}
	}
	return false
}

// waitAllReady waits for every node; it gives up at once when one exits.
func (c *Cluster) waitAllReady(timeout time.Duration) error {
	for i := range c.Nodes {
		if err := c.waitReady(i, timeout); err != nil {
			return err
		}
	}
	return nil
}

// RestartAll kills every node, starts them all again with their data and
// waits up to timeout for each to be ready.
func (c *Cluster) RestartAll(timeout time.Duration) {
	for i := range c.Nodes {
		c.Kill(i)
	}
	for i := range c.Nodes {
		c.Start(i)
	}
	for i := range c.Nodes {
		c.WaitReady(i, timeout)
	}
}

// Start (re)starts node i with its data directory kept.
func (c *Cluster) Start(i int) {
	c.t.Helper()
	n := c.Nodes[i]
	logf, err := os.OpenFile(n.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		c.t.Fatal(err)
	}
	args := []string{
		"--node-id", n.ID,
		"--data-dir", n.DataDir,
		"--amqp-addr", n.AMQPAddr,
		"--grpc-addr", n.GRPCAddr,
		"--raft-addr", n.RaftAddr,
		"--gossip-addr", n.GossipAddr,
		"--http-addr", n.HTTPAddr,
		"--management-addr", n.ManagementAddr,
		"--bootstrap-expect", fmt.Sprint(len(c.Nodes)),
	}
	if len(c.Nodes) > 1 {
		args = append(args, "--join", c.join)
	}
	args = append(args, n.ExtraArgs...)
	bin := c.bin
	if n.Bin != "" {
		bin = n.Bin
	}
	cmd := exec.Command(bin, args...)
	// The node's own Env comes last: of duplicate keys the last one wins.
	cmd.Env = append(append(nodeEnv(os.Environ()), "RAFTMQ_CLUSTER_SECRET="+c.Secret), n.Env...)
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		c.t.Fatalf("start %s: %v", n.ID, err)
	}
	n.cmd = cmd
	n.done = make(chan struct{})
	go func(done chan struct{}) {
		_ = cmd.Wait()
		logf.Close()
		close(done)
	}(n.done)
}

// WaitExit waits up to timeout for node i's process to exit on its own and
// returns its exit status.
func (c *Cluster) WaitExit(i int, timeout time.Duration) (int, error) {
	n := c.Nodes[i]
	if n.cmd == nil {
		return 0, fmt.Errorf("%s was never started", n.ID)
	}
	select {
	case <-n.done:
		return n.cmd.ProcessState.ExitCode(), nil
	case <-time.After(timeout):
		return 0, fmt.Errorf("%s still running after %v", n.ID, timeout)
	}
}

// LogTail is the last max bytes of node i's log.
func (c *Cluster) LogTail(i, max int) string {
	b, err := os.ReadFile(c.Nodes[i].LogPath)
	if err != nil {
		return err.Error()
	}
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return string(bytes.TrimSpace(b))
}

// Kill sends SIGKILL to node i and waits for it to exit.
func (c *Cluster) Kill(i int) { c.signal(i, syscall.SIGKILL) }

// Stop sends SIGTERM to node i and waits for it to exit (SIGKILL after 20 s).
func (c *Cluster) Stop(i int) { c.signal(i, syscall.SIGTERM) }

func (c *Cluster) signal(i int, sig syscall.Signal) {
	c.t.Helper()
	n := c.Nodes[i]
	if !n.Running() {
		return
	}
	_ = n.cmd.Process.Signal(sig)
	select {
	case <-n.done:
	case <-time.After(20 * time.Second):
		_ = n.cmd.Process.Kill()
		<-n.done
	}
}

// WaitReady waits until node i accepts AMQP connections and, when it serves
// HTTP, answers /readyz with 200.
func (c *Cluster) WaitReady(i int, timeout time.Duration) {
	c.t.Helper()
	if err := c.waitReady(i, timeout); err != nil {
		c.DumpLogs()
		c.t.Fatalf("node %s not ready: %v", c.Nodes[i].ID, err)
	}
}

// errExited stops waiting for a node whose process is gone.
var errExited = errors.New("process exited")

func (c *Cluster) waitReady(i int, timeout time.Duration) error {
	n := c.Nodes[i]
	err := Eventually(timeout, func() error {
		if !n.Running() {
			return errExited
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+n.HTTPAddr+"/readyz", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s /readyz: %s", n.ID, resp.Status)
		}
		return nil
	}, errExited)
	if err != nil {
		return fmt.Errorf("%s: %w", n.ID, err)
	}
	return nil
}

// courseEvents are the log messages of a failure's course that happen
// long before its end: leaderships won, lost and handed on, barriers that
// failed, nodes declared down, commands and publishes that failed, and
// the connections and channels the node closed on its clients (a client
// library calls the confirms a closed channel still owed nacks). A log's
// tail is mostly raft's replication chatter.
var courseEvents = []string{
	"entering leader state", "gained leadership", "lost leadership", "barrier failed", "handed a queue group's leadership",
	"has not answered raft", "declared node down", "no quorum of clocks", "queue group closed", "command failed",
	"publish failed", "closing connection", "closing channel", "applied a NodeDown of this node",
	"caught up after a silence",
}

// courseLines are the lines of log that name a course event, the last
// keep of them.
func courseLines(log []byte, keep int) []string {
	out := LinesNaming(string(log), courseEvents)
	return out[max(0, len(out)-keep):]
}

// LinesNaming returns the lines of log that name one of events.
func LinesNaming(log string, events []string) []string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if slices.ContainsFunc(events, func(e string) bool { return strings.Contains(l, e) }) {
			out = append(out, l)
		}
	}
	return out
}

// DumpLogs writes every node's course events (courseLines) and the tail
// of its log to the test log.
func (c *Cluster) DumpLogs() {
	logs := make([][]byte, len(c.Nodes))
	for i, n := range c.Nodes {
		logs[i], _ = os.ReadFile(n.LogPath) // a node never started has none
		if course := courseLines(logs[i], 60); len(course) > 0 {
			c.t.Logf("---- %s: leaderships, barriers, nodes down, failed commands ----\n%s", n.ID, strings.Join(course, "\n"))
		}
	}
	for i, n := range c.Nodes {
		b := logs[i]
		if b == nil {
			continue
		}
		if len(b) > 8192 {
			b = b[len(b)-8192:]
		}
		c.t.Logf("---- %s log (tail) ----\n%s", n.ID, bytes.TrimSpace(b))
	}
}

// Eventually polls cond until it returns nil or timeout passes, and returns
// the last error. It stops at once when cond returns one of the fatal
// errors (compared with errors.Is).
func Eventually(timeout time.Duration, cond func() error, fatal ...error) error {
	deadline := time.Now().Add(timeout)
	wait := 10 * time.Millisecond
	for {
		err := cond()
		if err == nil {
			return nil
		}
		for _, f := range fatal {
			if errors.Is(err, f) {
				return err
			}
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(wait)
		if wait < 200*time.Millisecond {
			wait *= 2
		}
	}
}

// elapsed is how long ago start was by whichever of the wall clock and
// the monotonic clock says more. A node times deaths, leases and delayed
// releases in log time, which follows the wall clocks of the quorum; a
// step of the machine's wall clock moves it, and the monotonic clock
// alone would then see a release due 2,400 ms after the publish arrive
// a few ms short of it (CI saw 2.398 s, most likely after a forward
// step: every release after some moment was early by about as much). A step
// back shortens the wall clock's reading instead, so a test that checks
// that something did not happen too soon takes the longer of the two:
// only a release early by both clocks is early.
func elapsed(start time.Time) time.Duration {
	return max(time.Since(start), time.Now().Round(0).Sub(start.Round(0)))
}

// nodeEnv is the environment a node starts with: environ, the test
// process's, without the RAFTMQ_ variables, which would configure every
// node of every test (a developer's shell may well set
// RAFTMQ_QUEUE_GROUPS): a test sets what its nodes run with itself, on
// the command line or in Node.Env. RAFTMQ_LOG_LEVEL passes, to read a
// test's cluster at debug level.
func nodeEnv(environ []string) []string {
	out := make([]string, 0, len(environ))
	for _, kv := range environ {
		if strings.HasPrefix(kv, "RAFTMQ_") && !strings.HasPrefix(kv, "RAFTMQ_LOG_LEVEL=") {
			continue
		}
		out = append(out, kv)
	}
	return out
}
