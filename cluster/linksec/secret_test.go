package linksec

import (
	"bytes"
	"crypto/x509"
	"testing"

	"github.com/raftmq/raftmq/internal/certchain"
)

var (
	testSecret  = []byte("correct horse battery staple 42")
	otherSecret = []byte("another cluster's secret, 32 b.")
)

func TestSecret_DerivationIsDeterministicAndDistinct(t *testing.T) {
	secretTLS := func(t *testing.T, secret []byte, name string) *TLS {
		sec, err := SecretTLS(secret, name)
		if err != nil {
			t.Fatalf("SecretTLS(%q): %v", name, err)
		}
		return sec
	}
	a, b := secretTLS(t, testSecret, "n1"), secretTLS(t, testSecret, "n2")
	if !bytes.Equal(a.CAPEM(), b.CAPEM()) || len(a.CAPEM()) == 0 {
		t.Fatal("two nodes with one secret derived different CAs")
	}
	if o := secretTLS(t, otherSecret, "n1"); bytes.Equal(o.CAPEM(), a.CAPEM()) {
		t.Fatal("two secrets derived the same CA")
	}
	// Each leaf verifies against the other node's pool, and not against
	// another secret's.
	leaf := b.Certificate.Leaf
	if _, err := certchain.Verify(a.CA, []*x509.Certificate{leaf}, x509.ExtKeyUsageClientAuth); err != nil {
		t.Fatalf("n2's leaf against n1's CA: %v", err)
	}
	if _, err := certchain.Verify(secretTLS(t, otherSecret, "x").CA, []*x509.Certificate{leaf}, x509.ExtKeyUsageClientAuth); err == nil {
		t.Fatal("a leaf of one secret verified against another secret's CA")
	}
	if names := CertNames(leaf); len(names) != 1 || names[0] != "n2" {
		t.Fatalf("leaf names %v", names)
	}
	k1, _ := SecretGossipKey(testSecret)
	k2, _ := SecretGossipKey(testSecret)
	k3, _ := SecretGossipKey(otherSecret)
	if len(k1) != 32 || !bytes.Equal(k1, k2) || bytes.Equal(k1, k3) {
		t.Fatalf("gossip keys %x %x %x", k1, k2, k3)
	}
	if _, err := SecretTLS([]byte("too short"), "n1"); err == nil {
		t.Fatal("a 9-byte secret was accepted")
	}
}
