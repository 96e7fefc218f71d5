// Package deploy holds the deployment files; its tests check their
// defaults are the safe ones.
package deploy

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// portLine is an entry of a compose service's ports.
var portLine = regexp.MustCompile(`(?m)^\s+- "([^"]*:\d+)"\s*$`)

// Every published port is on the host's loopback unless the operator
// names another address, and the secrets have no default: compose
// refuses to start without them, and the admin API takes passwords in
// clear only when told to.
func TestCompose_SafeDefaults(t *testing.T) {
	s := read(t, "docker-compose.yml")
	ports := portLine.FindAllStringSubmatch(s, -1)
	if len(ports) != 12 {
		t.Fatalf("%d published ports, want 4 for each of 3 nodes", len(ports))
	}
	for _, p := range ports {
		if !strings.HasPrefix(p[1], "${RAFTMQ_PUBLISH_ADDR:-127.0.0.1}:") {
			t.Errorf("port %q is not published on loopback by default", p[1])
		}
	}
	for _, want := range []string{
		"RAFTMQ_DEFAULT_PASSWORD: ${RAFTMQ_PASSWORD:?",
		"RAFTMQ_CLUSTER_SECRET: ${RAFTMQ_CLUSTER_SECRET:?",
		"RAFTMQ_ADMIN_PLAINTEXT: ${RAFTMQ_ADMIN_PLAINTEXT:-false}",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("docker-compose.yml lacks %q", want)
		}
	}
}

// The compose tool itself agrees: no password, no start; with one, the
// ports are bound to 127.0.0.1.
func TestCompose_ConfigRefusesWithoutPassword(t *testing.T) {
	var tool []string
	if exec.Command("docker", "compose", "version").Run() == nil {
		tool = []string{"docker", "compose"}
	} else if p, err := exec.LookPath("docker-compose"); err == nil {
		tool = []string{p}
	} else {
		t.Skip("neither 'docker compose' nor docker-compose is installed")
	}
	config := func(env ...string) (string, error) {
		cmd := exec.Command(tool[0], append(tool[1:], "-f", "docker-compose.yml", "config")...)
		cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}, env...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := config("RAFTMQ_CLUSTER_SECRET=s"); err == nil || !strings.Contains(out, "RAFTMQ_PASSWORD") {
		t.Fatalf("config without RAFTMQ_PASSWORD: %v\n%s", err, out)
	}
	out, err := config("RAFTMQ_CLUSTER_SECRET=s", "RAFTMQ_PASSWORD=p")
	if err != nil {
		t.Fatalf("config: %v\n%s", err, out)
	}
	if !regexp.MustCompile(`127\.0\.0\.1:5672:5672|host_ip: 127\.0\.0\.1`).MatchString(out) {
		t.Fatalf("AMQP not published on loopback:\n%s", out)
	}
	if strings.Contains(out, "0.0.0.0") {
		t.Fatalf("a port is published on every interface:\n%s", out)
	}
	// Queue groups per node unless the operator says otherwise.
	everyNode := func(out, name, value string) {
		t.Helper()
		re := regexp.MustCompile(`(?m)^\s+` + name + `: ['"]?` + value + `['"]?\s*$`)
		if c := len(re.FindAllString(out, -1)); c != 3 {
			t.Errorf("%s=%s on %d nodes, want 3:\n%s", name, value, c, out)
		}
	}
	everyNode(out, "RAFTMQ_QUEUE_GROUPS", "per-node")
	everyNode(out, "RAFTMQ_PLACE_QUEUES", "true")
	out, err = config("RAFTMQ_CLUSTER_SECRET=s", "RAFTMQ_PASSWORD=p", "RAFTMQ_QUEUE_GROUPS=0", "RAFTMQ_PLACE_QUEUES=false")
	if err != nil {
		t.Fatalf("config: %v\n%s", err, out)
	}
	everyNode(out, "RAFTMQ_QUEUE_GROUPS", "0")
	everyNode(out, "RAFTMQ_PLACE_QUEUES", "false")
}

// The Kubernetes manifest ships no password: the first user's
// credentials, like the cluster secret, come from a Secret the operator
// creates.
func TestKubernetes_CredentialsFromSecrets(t *testing.T) {
	s := read(t, "kubernetes/raftmq.yaml")
	if regexp.MustCompile(`(?m)^kind:\s*Secret\s*$`).MatchString(s) {
		t.Fatal("the manifest defines a Secret: its values would be a default every cluster shares")
	}
	for _, v := range []string{"RAFTMQ_CLUSTER_SECRET", "RAFTMQ_DEFAULT_USER", "RAFTMQ_DEFAULT_PASSWORD"} {
		re := regexp.MustCompile(`(?m)^\s+- name: ` + v + `\n\s+valueFrom:\n\s+secretKeyRef: \{name: raftmq-[a-z-]+, key: [a-z]+\}`)
		if !re.MatchString(s) {
			t.Errorf("%s is not read from a Secret", v)
		}
	}
	if strings.Contains(s, "{name: RAFTMQ_DEFAULT_PASSWORD, value:") {
		t.Error("a literal default password")
	}
}

// Every deployment of three nodes runs a queue group per node with new
// queues placed into them, and compose lets the operator turn both off.
func TestDeployments_QueueGroupsPerNode(t *testing.T) {
	for _, c := range []struct{ file, groups, place string }{
		{"docker-compose.yml", "RAFTMQ_QUEUE_GROUPS: ${RAFTMQ_QUEUE_GROUPS:-per-node}", "RAFTMQ_PLACE_QUEUES: ${RAFTMQ_PLACE_QUEUES:-true}"},
		{"kubernetes/raftmq.yaml", "{name: RAFTMQ_QUEUE_GROUPS, value: per-node}", `{name: RAFTMQ_PLACE_QUEUES, value: "true"}`},
		{"systemd/raftmq.env", "\nRAFTMQ_QUEUE_GROUPS=per-node\n", "\nRAFTMQ_PLACE_QUEUES=true\n"},
	} {
		s := read(t, c.file)
		for _, want := range []string{c.groups, c.place} {
			if strings.Count(s, want) != 1 {
				t.Errorf("%s: %q appears %d times, want once", c.file, want, strings.Count(s, want))
			}
		}
	}
}
