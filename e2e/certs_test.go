package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// clusterCA is a throw-away certificate authority whose files live in dir.
type clusterCA struct {
	cert   *x509.Certificate
	key    *ecdsa.PrivateKey
	dir    string
	CAFile string
}

// newClusterCA creates a self-signed CA and writes its certificate to
// dir/ca.pem.
func newClusterCA(t *testing.T, name string) *clusterCA {
	t.Helper()
	key := clusterKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          clusterSerial(t),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &clusterCA{cert: cert, key: key, dir: t.TempDir()}
	ca.CAFile = clusterWritePEM(t, filepath.Join(ca.dir, "ca.pem"), "CERTIFICATE", der)
	return ca
}

// clusterCertFiles are a certificate and its key on disk.
type clusterCertFiles struct{ Cert, Key string }

// issue signs a certificate for client and server use naming name (Common
// Name and DNS name) and writes it and its key next to the CA.
func (ca *clusterCA) issue(t *testing.T, name string) clusterCertFiles {
	t.Helper()
	key := clusterKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: clusterSerial(t),
		Subject:      pkix.Name{CommonName: name},
		DNSNames:     []string{name},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return clusterCertFiles{
		Cert: clusterWritePEM(t, filepath.Join(ca.dir, name+".pem"), "CERTIFICATE", der),
		Key:  clusterWritePEM(t, filepath.Join(ca.dir, name+".key"), "PRIVATE KEY", kder),
	}
}

// nodeArgs are the raftmq flags that give a node a certificate naming id.
func (ca *clusterCA) nodeArgs(t *testing.T, id string) []string {
	t.Helper()
	f := ca.issue(t, id)
	return []string{"--cluster-tls-cert", f.Cert, "--cluster-tls-key", f.Key, "--cluster-tls-ca", ca.CAFile}
}

// ctlArgs are the raftmqctl flags of an operator's client certificate.
func (ca *clusterCA) ctlArgs(t *testing.T) []string {
	t.Helper()
	f := ca.issue(t, "e2e-operator")
	return []string{"--tls-ca", ca.CAFile, "--tls-cert", f.Cert, "--tls-key", f.Key}
}

func clusterKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func clusterSerial(t *testing.T) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func clusterWritePEM(t *testing.T, path, typ string, der []byte) string {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
