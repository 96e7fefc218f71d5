package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/raftmq/raftmq/cluster/linksec"

	"github.com/raftmq/raftmq/api/client"
	"github.com/raftmq/raftmq/api/grpcadmin"
	"github.com/raftmq/raftmq/internal/testpki"
)

func TestConfig_ClusterSecurity(t *testing.T) {
	c, err := parseConfig(nil, envMap(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Cluster != (clusterSecurity{AdminAuth: "auto"}) {
		t.Fatalf("defaults: %+v", c.Cluster)
	}
	key := "MDEyMzQ1Njc4OWFiY2RlZg==" // 16 bytes
	env := envMap(map[string]string{
		"RAFTMQ_GOSSIP_KEY":       key,
		"RAFTMQ_CLUSTER_TLS_CERT": "n.pem",
		"RAFTMQ_CLUSTER_TLS_KEY":  "n.key",
		"RAFTMQ_CLUSTER_TLS_CA":   "ca.pem",
		"RAFTMQ_ADMIN_PLAINTEXT":  "true",
	})
	c, err = parseConfig([]string{"--admin-auth", "always"}, env, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := clusterSecurity{TLSCert: "n.pem", TLSKey: "n.key", TLSCA: "ca.pem", GossipKey: key, AdminAuth: "always", AdminPlaintext: true}
	if c.Cluster != want {
		t.Fatalf("got %+v, want %+v", c.Cluster, want)
	}
	for _, args := range [][]string{
		{"--cluster-tls-cert", "n.pem"},
		{"--cluster-tls-cert", "n.pem", "--cluster-tls-key", "n.key"},
		{"--gossip-key", "c2hvcnQ="},
		{"--gossip-key", "not base64"},
		{"--admin-auth", "sometimes"},
	} {
		if _, err := parseConfig(args, envMap(nil), io.Discard); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
}

func TestClusterSecurity_Load(t *testing.T) {
	ca := testpki.New(t, "test CA")
	f := ca.WriteFiles(t, t.TempDir(), "n1", ca.Issue(t, testpki.Server|testpki.Client, "n1", "n1", "127.0.0.1"))
	s := clusterSecurity{
		TLSCert: f.Cert, TLSKey: f.Key, TLSCA: f.CA,
		GossipKey: "MDEyMzQ1Njc4OWFiY2RlZg==", AdminAuth: "never",
	}
	sec, err := s.load(t.TempDir(), "n1", false)
	if err != nil {
		t.Fatal(err)
	}
	if sec.tls == nil || len(sec.keys) != 1 || sec.auth.Mode() != grpcadmin.AuthNever {
		t.Fatalf("loaded %+v", sec)
	}
	s.TLSCA = s.TLSKey // not a certificate
	if _, err := s.load(t.TempDir(), "n1", false); err == nil {
		t.Fatal("a key as the CA was accepted")
	}
}

const secret32 = "0123456789abcdef0123456789abcdef"

func TestConfig_ClusterSecretRules(t *testing.T) {
	// A lone node needs nothing.
	if _, err := parseConfig(nil, envMap(nil), io.Discard); err != nil {
		t.Fatalf("lone node: %v", err)
	}
	// A node that forms or joins a cluster needs the secret or TLS, and the
	// refusal says what to set.
	for _, args := range [][]string{
		{"--bootstrap-expect", "3"},
		{"--join", "10.0.0.1:7946"},
	} {
		_, err := parseConfig(args, envMap(nil), io.Discard)
		if err == nil {
			t.Fatalf("%v without a secret: accepted", args)
		}
		for _, want := range []string{"--cluster-secret", "RAFTMQ_CLUSTER_SECRET", "--cluster-secret-file", "--cluster-tls-cert", "openssl rand"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%v: %q does not mention %s", args, err, want)
			}
		}
	}
	for _, tc := range []struct {
		args []string
		env  map[string]string
	}{
		{args: []string{"--bootstrap-expect", "3", "--cluster-secret", secret32}},
		{args: []string{"--join", "a:7946"}, env: map[string]string{"RAFTMQ_CLUSTER_SECRET": secret32}},
		{args: []string{"--join", "a:7946"}, env: map[string]string{"RAFTMQ_CLUSTER_SECRET_FILE": "/run/secrets/raftmq"}},
		{args: []string{"--join", "a:7946", "--cluster-tls-cert", "n.pem", "--cluster-tls-key", "n.key", "--cluster-tls-ca", "ca.pem"}},
	} {
		if _, err := parseConfig(tc.args, envMap(tc.env), io.Discard); err != nil {
			t.Errorf("args %v env %v: %v", tc.args, tc.env, err)
		}
	}
	c, err := parseConfig(nil, envMap(map[string]string{"RAFTMQ_CLUSTER_SECRET": secret32}), io.Discard)
	if err != nil || c.Cluster.Secret != secret32 {
		t.Fatalf("RAFTMQ_CLUSTER_SECRET: %+v, %v", c, err)
	}
	_, err = parseConfig([]string{"--cluster-secret", "short"}, envMap(nil), io.Discard)
	if err == nil || !strings.Contains(err.Error(), "at least 16") {
		t.Fatalf("a 5-byte secret: %v", err)
	}
	if _, err := parseConfig([]string{"--cluster-secret", secret32, "--cluster-secret-file", "f"}, envMap(nil), io.Discard); err == nil {
		t.Fatal("both a secret and a secret file: accepted")
	}
}

func TestClusterSecurity_LoneNodeGeneratesItsSecretOnce(t *testing.T) {
	dir := t.TempDir()
	var s clusterSecurity
	first, err := s.load(dir, "n1", true)
	if err != nil {
		t.Fatal(err)
	}
	if !first.tls.FromSecret() || len(first.keys) != 1 || first.generated == "" {
		t.Fatalf("first start: %+v", first)
	}
	st, err := os.Stat(filepath.Join(dir, generatedSecretFile))
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("secret file mode %v, want 0600", st.Mode().Perm())
	}
	raw, _ := os.ReadFile(filepath.Join(dir, generatedSecretFile))
	if len(strings.TrimSpace(string(raw))) < 16 {
		t.Fatalf("generated secret %q", raw)
	}
	again, err := s.load(dir, "n1", true)
	if err != nil {
		t.Fatal(err)
	}
	if again.generated != "" || !bytes.Equal(again.tls.CAPEM(), first.tls.CAPEM()) || !bytes.Equal(again.keys[0], first.keys[0]) {
		t.Fatal("the second start did not reuse the generated secret")
	}
	// The generated file is what another node passes as its secret file.
	other, err := (&clusterSecurity{SecretFile: filepath.Join(dir, generatedSecretFile)}).load(t.TempDir(), "n2", false)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(other.tls.CAPEM(), first.tls.CAPEM()) {
		t.Fatal("the secret file gives another CA than the node that generated it")
	}
	ca, err := os.ReadFile(first.caFile)
	if err != nil || !bytes.Equal(ca, first.tls.CAPEM()) {
		t.Fatalf("derived CA file: %v", err)
	}
	// Another data dir, another secret.
	fresh, err := s.load(t.TempDir(), "n1", true)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(fresh.tls.CAPEM(), first.tls.CAPEM()) {
		t.Fatal("two lone nodes generated the same secret")
	}
}

func TestClusterSecurity_SecretSources(t *testing.T) {
	want, err := linksec.SecretTLS([]byte(secret32), "x")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "secret")
	if err := os.WriteFile(file, []byte("  "+secret32+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, s := range []clusterSecurity{{Secret: secret32}, {SecretFile: file}} {
		sec, err := s.load(t.TempDir(), "n1", false)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(sec.tls.CAPEM(), want.CAPEM()) {
			t.Fatalf("%+v: another CA", s)
		}
		if sec.generated != "" {
			t.Fatalf("%+v: generated a secret", s)
		}
	}
	// --gossip-key wins over the derived key.
	sec, err := (&clusterSecurity{Secret: secret32, GossipKey: "MDEyMzQ1Njc4OWFiY2RlZg=="}).load(t.TempDir(), "n1", false)
	if err != nil || string(sec.keys[0]) != "0123456789abcdef" {
		t.Fatalf("gossip key: %v %v", sec, err)
	}
	short := filepath.Join(dir, "short")
	if err := os.WriteFile(short, []byte("short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := (&clusterSecurity{SecretFile: short}).load(t.TempDir(), "n1", false); err == nil || !strings.Contains(err.Error(), "at least 16") {
		t.Fatalf("a short secret file: %v", err)
	}
	// A node that is to join others never runs without a secret.
	if _, err := (&clusterSecurity{}).load(t.TempDir(), "n1", false); err == nil {
		t.Fatal("a joining node without a secret loaded")
	}
}

// TestClusterSecurity_AdminSecret: a node whose admin auth takes the local
// secret makes it in its data dir at the first start and keeps it; one
// that takes passwords only makes none; a secret file others may read
// stops the node.
func TestClusterSecurity_AdminSecret(t *testing.T) {
	secret32 := strings.Repeat("s", 32)
	for _, mode := range []string{"auto", "loopback"} {
		dir := t.TempDir()
		s := clusterSecurity{Secret: secret32, AdminAuth: mode}
		sec, err := s.load(dir, "n1", false)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, client.SecretFileName)
		if sec.adminSecret != path {
			t.Fatalf("%s: generated %q, want %q", mode, sec.adminSecret, path)
		}
		fi, err := os.Stat(path)
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v %v", mode, fi, err)
		}
		if sec, err = s.load(dir, "n1", false); err != nil || sec.adminSecret != "" {
			t.Fatalf("%s, second start: %q %v", mode, sec.adminSecret, err)
		}
		if err := os.Chmod(path, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := s.load(dir, "n1", false); err == nil || !strings.Contains(err.Error(), "chmod 600") {
			t.Fatalf("%s, world-readable secret: %v", mode, err)
		}
	}
	for _, mode := range []string{"always", "never"} {
		dir := t.TempDir()
		if _, err := (&clusterSecurity{Secret: secret32, AdminAuth: mode}).load(dir, "n1", false); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(dir, client.SecretFileName)); !os.IsNotExist(err) {
			t.Fatalf("%s: admin secret made: %v", mode, err)
		}
	}
}
