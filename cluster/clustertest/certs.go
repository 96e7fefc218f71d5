package clustertest

import (
	"testing"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/linksec"
	"github.com/raftmq/raftmq/internal/testpki"
)

// NodeTLS returns a node's linksec.TLS: a certificate for client and
// server use naming name (Common Name and DNS name, and valid for
// loopback), signed by ca, trusting ca.
func NodeTLS(t testing.TB, ca *testpki.CA, name string) *linksec.TLS {
	t.Helper()
	c, k := testpki.EncodePEM(t, ca.Issue(t, testpki.Server|testpki.Client, name, name, "127.0.0.1"))
	sec, err := linksec.NewTLS(c, k, ca.PEM())
	if err != nil {
		t.Fatal(err)
	}
	return sec
}

// WithTLS gives every node a certificate from ca naming its id.
func WithTLS(t testing.TB, ca *testpki.CA) Option {
	return WithConfig(func(_ int, c *cluster.Config) { c.TLS = NodeTLS(t, ca, c.NodeID) })
}

// WithGossipKeys gives every node the gossip keys.
func WithGossipKeys(keys ...[]byte) Option {
	return WithConfig(func(_ int, c *cluster.Config) { c.GossipKeys = keys })
}

// SecretConfig sets c's TLS and gossip key from a cluster secret, as the
// raftmq command does without cluster TLS.
func SecretConfig(t testing.TB, secret []byte, c *cluster.Config) {
	t.Helper()
	sec, err := linksec.SecretTLS(secret, c.NodeID)
	if err != nil {
		t.Fatal(err)
	}
	key, err := linksec.SecretGossipKey(secret)
	if err != nil {
		t.Fatal(err)
	}
	c.TLS, c.GossipKeys = sec, [][]byte{key}
}

// WithSecret secures every node with the cluster secret (SecretConfig).
func WithSecret(t testing.TB, secret []byte) Option {
	return WithConfig(func(_ int, c *cluster.Config) { SecretConfig(t, secret, c) })
}
