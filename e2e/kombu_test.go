package e2e

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestCluster_Kombu drives a placing cluster with kombu (Debian's
// python3-kombu, over py-amqp) as its users do, publishing with confirms
// through one node and consuming through another: direct, topic and
// exchange-to-exchange routing, unbinding, mandatory returns,
// serializers, headers and properties, SimpleQueue, ack/reject/requeue,
// TTL and dead-lettering, x-expires, auto-delete, purge and delete; then
// a failover Connection over all three nodes whose node the test kills
// with SIGKILL between its publishes (testdata/kombu_cluster.py says what
// each check expects).
func TestCluster_Kombu(t *testing.T) {
	skipShort(t)
	py := pythonWithModule(t, "kombu", "python3-kombu")
	c := placed3.start(t)
	onLine, killed := nodeKiller(t, c, func(n *Node) {
		// The script declares its queue client-local, in a group the node
		// it is connected to is meant to lead; whether it does tells how
		// much the kill takes away.
		where := "kombu-failover not listed"
		if rows, err := queuesOn(t, n); err != nil {
			where = err.Error()
		} else if r, ok := rows["kombu-failover"]; ok {
			where = fmt.Sprintf("kombu-failover in group %s led by %s", r.Group, r.Leader)
		}
		t.Logf("killing %s, the node kombu's failover connection is on (%s)", n.ID, where)
	})
	if !runPythonClient(t, py, "kombu_cluster.py", 3*time.Minute, nil, onLine,
		c.Nodes[0].AMQPURL(), c.Nodes[1].AMQPURL(), c.Nodes[2].AMQPURL()) {
		return
	}
	if killed() != 2 {
		t.Fatalf("the script asked to kill node index %d, want 2 (the first of its failover URLs)", killed())
	}
}

// celeryWorkerName is the worker's node name (-n), which the client
// addresses its control commands to.
const celeryWorkerName = "raftmq-e2e@localhost"

// TestCluster_Celery runs a real `celery worker` (Debian's python3-celery)
// against a placing cluster through one node and sends it tasks from a
// client connected through another, with results over the rpc://
// backend's reply queues: plain results, an error, a task Celery retries
// with a countdown (ETA messages), a task that expires before its ETA and
// is revoked, the control commands ping and inspect active_queues (the
// pidbox fanout exchange and its reply queues), and a task sent behind
// more countdown tasks than the worker's prefetch (which the worker
// raises with basic.qos while it holds them). The worker then stops on
// SIGTERM.
func TestCluster_Celery(t *testing.T) {
	skipShort(t)
	py := pythonWithModule(t, "celery", "python3-celery")
	c := placed3.start(t)
	w := startCeleryWorker(t, py, celeryBrokerURLs(c, 0, 1, 2))
	w.waitReady(t, 90*time.Second)
	// Celery logs the broker it connected to, the first of its URLs.
	if want := "Connected to amqp://guest:**@" + c.Nodes[0].AMQPAddr + "//"; !strings.Contains(w.log(), want) {
		t.Fatalf("the worker's log does not say %q:\n%s", want, w.log())
	}
	clientPort := ""
	// On a failed check the worker is still stopped and its log read.
	runPythonClient(t, py, "celery_client.py", 3*time.Minute,
		[]string{"RAFTMQ_BROKER_URLS=" + celeryBrokerURLs(c, 1, 2, 0)}, func(line string) string {
			if p, ok := strings.CutPrefix(line, "client connected to port "); ok {
				clientPort = p
			}
			return ""
		}, celeryWorkerName)
	if _, p, _ := net.SplitHostPort(c.Nodes[1].AMQPAddr); clientPort != p {
		t.Errorf("the client sent its tasks through port %q, want %s (%s, the first of its URLs)", clientPort, p, c.Nodes[1].ID)
	}
	w.stop(t, 60*time.Second)
	log := w.log()
	for _, bad := range []string{"Connection to broker lost", "Cannot connect to", "Unrecoverable error", "CRITICAL/"} {
		if strings.Contains(log, bad) {
			t.Errorf("the worker's log says %q:\n%s", bad, log)
		}
	}
}

// celeryBrokerURLs is Celery's failover broker_url: the nodes' AMQP URLs in the
// order given, separated by semicolons.
func celeryBrokerURLs(c *Cluster, order ...int) string {
	urls := make([]string, len(order))
	for i, n := range order {
		urls[i] = c.Nodes[n].AMQPURL()
	}
	return strings.Join(urls, ";")
}

// pythonWithModule is a python3 that imports module, or skips the test naming
// the Debian package that provides it. Debian's python3-* packages
// install for the system interpreter, which may not be the first python3
// on PATH.
func pythonWithModule(t *testing.T, module, pkg string) string {
	t.Helper()
	for _, cand := range []string{"/usr/bin/python3", "python3"} {
		if p, err := exec.LookPath(cand); err == nil && exec.Command(p, "-c", "import "+module).Run() == nil {
			return p
		}
	}
	t.Skipf("no python3 with %s (Debian package %s)", module, pkg)
	return ""
}

// pythonClientEnv is the environment of the test's python processes: they
// import the app module from testdata, and must leave no __pycache__
// there.
func pythonClientEnv(extra []string) ([]string, error) {
	dir, err := filepath.Abs("testdata")
	if err != nil {
		return nil, err
	}
	env := append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1", "PYTHONPATH="+dir, "PYTHONUNBUFFERED=1")
	return append(env, extra...), nil
}

// runPythonClient runs testdata/script with py, args and env added to the
// test's environment (runClient); it reports whether the script passed.
func runPythonClient(t *testing.T, py, script string, timeout time.Duration, env []string, onLine func(string) string, args ...string) bool {
	t.Helper()
	cmd := exec.Command(py, append([]string{testdataPath(t, script)}, args...)...)
	var err error
	if cmd.Env, err = pythonClientEnv(env); err != nil {
		t.Fatal(err)
	}
	_, _, ok := runClient(t, script, cmd, timeout, onLine)
	return ok
}

// celeryWorker is a `celery worker` process of a test.
type celeryWorker struct {
	cmd     *exec.Cmd
	done    chan struct{}
	logPath string
	outPath string
}

// startCeleryWorker starts `celery -A celery_tasks worker` with the
// broker URLs, its log and output in a temporary folder, and makes sure
// it is gone when the test ends, passed or failed.
func startCeleryWorker(t *testing.T, py, brokers string) *celeryWorker {
	t.Helper()
	dir := t.TempDir()
	w := &celeryWorker{
		done:    make(chan struct{}),
		logPath: filepath.Join(dir, "worker.log"),
		outPath: filepath.Join(dir, "worker.out"),
	}
	out, err := os.Create(w.outPath)
	if err != nil {
		t.Fatal(err)
	}
	// The threads pool runs the tasks in the worker's own process: there
	// is no pool child to outlive it.
	w.cmd = exec.Command(py, "-m", "celery", "-A", "celery_tasks", "worker",
		"--pool=threads", "--concurrency=2", "--loglevel=INFO",
		"--logfile="+w.logPath, "-n", celeryWorkerName)
	w.cmd.Dir = dir
	if w.cmd.Env, err = pythonClientEnv([]string{"RAFTMQ_BROKER_URLS=" + brokers}); err != nil {
		t.Fatal(err)
	}
	w.cmd.Stdout, w.cmd.Stderr = out, out
	w.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := w.cmd.Start(); err != nil {
		out.Close()
		t.Fatal(err)
	}
	go func() {
		_ = w.cmd.Wait()
		out.Close()
		close(w.done)
	}()
	t.Cleanup(func() {
		w.kill(30 * time.Second)
		if t.Failed() {
			t.Logf("---- celery worker log ----\n%s", w.log())
		}
	})
	return w
}

func (w *celeryWorker) running() bool {
	select {
	case <-w.done:
		return false
	default:
		return true
	}
}

// log is the worker's log file followed by what it wrote to stdout and
// stderr.
func (w *celeryWorker) log() string {
	var b strings.Builder
	for _, p := range []string{w.logPath, w.outPath} {
		data, err := os.ReadFile(p)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			fmt.Fprintf(&b, "%s: %v\n", filepath.Base(p), err)
		}
		b.Write(data)
	}
	return b.String()
}

var errWorkerExited = errors.New("the celery worker exited")

// waitReady waits for the worker's "ready." line, which it logs once it
// consumes from its queues.
func (w *celeryWorker) waitReady(t *testing.T, timeout time.Duration) {
	t.Helper()
	start := time.Now()
	err := Eventually(timeout, func() error {
		data, _ := os.ReadFile(w.logPath)
		if strings.Contains(string(data), celeryWorkerName+" ready.") {
			return nil
		}
		if !w.running() {
			return errWorkerExited
		}
		return errors.New("the celery worker is not ready")
	}, errWorkerExited)
	if err != nil {
		t.Fatalf("%v after %v:\n%s", err, time.Since(start).Round(time.Millisecond), w.log())
	}
	t.Logf("celery worker ready after %v", time.Since(start).Round(time.Millisecond))
}

// stop is the warm shutdown a service manager asks for: SIGTERM, and
// the worker must exit 0 within timeout.
func (w *celeryWorker) stop(t *testing.T, timeout time.Duration) {
	t.Helper()
	start := time.Now()
	_ = w.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-w.done:
	case <-time.After(timeout):
		w.kill(0)
		t.Fatalf("the celery worker was still running %v after SIGTERM:\n%s", timeout, w.log())
	}
	if code := w.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("the celery worker exited with %d after SIGTERM:\n%s", code, w.log())
	}
	t.Logf("celery worker stopped %v after SIGTERM", time.Since(start).Round(time.Millisecond))
}

// kill ends the worker's process group: SIGTERM first, SIGKILL when it is
// still running after grace.
func (w *celeryWorker) kill(grace time.Duration) {
	pgid := w.cmd.Process.Pid
	if w.running() && grace > 0 {
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-w.done:
		case <-time.After(grace):
		}
	}
	if w.running() {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
	<-w.done
}
