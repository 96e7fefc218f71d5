// Package certchain verifies a peer's certificate chain against a cluster's
// CA without the host name check of crypto/tls: nodes are reached by IP
// address as often as by name, and a node's certificate names the node id.
// It stands apart from package cluster so that a client (raftmqctl) can make
// the same check without linking the cluster's raft and memberlist.
package certchain

import (
	"crypto/x509"
	"errors"
	"fmt"
)

// Verify verifies a peer's certificates (leaf first) against roots for the
// given usage, ignoring host names, and returns the leaf.
func Verify(roots *x509.CertPool, certs []*x509.Certificate, usage x509.ExtKeyUsage) (*x509.Certificate, error) {
	if len(certs) == 0 {
		return nil, errors.New("cluster: the peer presented no certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	_, err := certs[0].Verify(x509.VerifyOptions{
		Roots:         roots,
		Intermediates: inter,
		KeyUsages:     []x509.ExtKeyUsage{usage},
	})
	if err != nil {
		return nil, fmt.Errorf("cluster: peer certificate: %w", err)
	}
	return certs[0], nil
}
