package main

import (
	"io"
	"testing"

	"github.com/raftmq/raftmq/api"
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
	sec, err := s.load()
	if err != nil {
		t.Fatal(err)
	}
	if sec.tls == nil || len(sec.keys) != 1 || sec.auth.Mode() != api.AuthNever {
		t.Fatalf("loaded %+v", sec)
	}
	s.TLSCA = s.TLSKey // not a certificate
	if _, err := s.load(); err == nil {
		t.Fatal("a key as the CA was accepted")
	}
}
