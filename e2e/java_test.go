package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// javaJars are the jars testdata/java/ClientCheck.java needs, each with
// the Debian package that installs it and the places it installs it to.
var javaJars = []struct {
	pkg        string
	candidates []string
}{
	{"librabbitmq-client-java", []string{"/usr/share/java/amqp-client.jar", "/usr/share/java/amqp-client-5.0.0.jar"}},
	// The client logs through slf4j and cannot load without its API.
	{"libslf4j-java", []string{"/usr/share/java/slf4j-api.jar"}},
}

// javaQuietLogger, when present, is slf4j's binding that discards: without
// a binding slf4j warns on stderr in every run. ClientCheck prints the
// client's recovery errors itself.
var javaQuietLogger = []string{"/usr/share/java/slf4j-nop.jar"}

// TestCluster_Java drives a three-node cluster that places its queues
// with the RabbitMQ Java client (testdata/java/ClientCheck.java), each
// check publishing through one node and consuming through another:
// confirms and every property and header type round-tripping with the
// type the client decodes, prefetch, nack, reject and TTL into dead-letter
// exchanges with x-death, direct reply-to, refusals that close only the
// channel, a 1 MiB body, and automatic connection and topology recovery
// through a kill -9 of the node the client is connected to, losing no
// confirmed message.
func TestCluster_Java(t *testing.T) {
	skipShort(t)
	javac, java, classpath := javaToolchain(t)
	classes := compileClientCheck(t, javac, classpath)
	c := placed3.start(t)
	onLine, killed := nodeKiller(t, c, nil)
	stdout, stderr, _ := runClientCheck(t, java, classes, classpath, onLine, amqpAddrs(c)...)
	reportChecks(t, "Java", stdout, stderr)
	if killed() < 0 {
		t.Errorf("ClientCheck never asked for its node to be killed: recovery was not exercised")
	}
}

// javaToolchain returns javac, java and the classpath of the client's
// jars, or skips the test naming the Debian packages that are missing.
func javaToolchain(t *testing.T) (javac, java, classpath string) {
	t.Helper()
	var tc toolchain
	javac = tc.program("default-jdk-headless", "javac")
	java = tc.program("default-jdk-headless", "java")
	var jars []string
	for _, j := range javaJars {
		jars = append(jars, tc.file(j.pkg, j.candidates...))
	}
	tc.skipIfMissing(t, "Java")
	if q := firstRegularFile(javaQuietLogger...); q != "" {
		jars = append(jars, q)
	}
	return javac, java, strings.Join(jars, string(os.PathListSeparator))
}

// compileClientCheck compiles testdata/java into a temporary folder, so
// that no build output lands in the source tree, and returns the folder.
func compileClientCheck(t *testing.T, javac, classpath string) string {
	t.Helper()
	src, err := filepath.Abs(filepath.Join("testdata", "java", "ClientCheck.java"))
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	cmd := exec.Command(javac, "-encoding", "UTF-8", "-Xlint:unchecked", "-cp", classpath, "-d", out, src)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("javac ClientCheck.java: %v\n%s", err, b)
	}
	return out
}

// runClientCheck runs ClientCheck with args (runClient): its own waits
// are bounded, and a hang past those bounds is killed.
func runClientCheck(t *testing.T, java, classes, classpath string, onLine func(string) string, args ...string) (stdout, stderr string, ok bool) {
	t.Helper()
	// Serial GC and the quick compiler: the cluster's nodes share the
	// machine's cores with the JVM, which runs for seconds only.
	jvm := []string{"-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
		"-cp", classes + string(os.PathListSeparator) + classpath, "ClientCheck"}
	return runClient(t, "ClientCheck", exec.Command(java, append(jvm, args...)...), 5*time.Minute, onLine)
}
