// Package testpki makes throwaway certificate authorities and certificates
// for tests: ECDSA P-256 keys, valid from an hour ago for a day.
//
// It is for tests and test support only; nothing in a server imports it.
package testpki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
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

// CA is a self-signed certificate authority.
type CA struct {
	// Cert is the CA's certificate.
	Cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

// New creates a CA whose subject Common Name is name.
func New(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          newSerial(t),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
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
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &CA{Cert: cert, key: key, pool: pool}
}

// Pool is a pool that trusts the CA alone.
func (ca *CA) Pool() *x509.CertPool { return ca.pool }

// PEM is the CA's certificate in PEM.
func (ca *CA) PEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Raw})
}

// Usage is what a leaf certificate is for: Server, Client or both.
type Usage int

const (
	// Server certificates authenticate TLS servers (ExtKeyUsageServerAuth).
	Server Usage = 1 << iota
	// Client certificates authenticate TLS clients (ExtKeyUsageClientAuth).
	Client
)

// Issue signs a leaf certificate for usage whose subject Common Name is cn.
// Each host is a subject alternative name: an IP address if it parses as
// one, a DNS name otherwise. The result has its Leaf set.
func (ca *CA) Issue(t testing.TB, usage Usage, cn string, hosts ...string) tls.Certificate {
	t.Helper()
	tmpl := &x509.Certificate{
		SerialNumber: newSerial(t),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
	if usage&Server != 0 {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	if usage&Client != 0 {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	if len(tmpl.ExtKeyUsage) == 0 {
		t.Fatalf("testpki: certificate for %q with no usage", cn)
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	key := newKey(t)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
}

// EncodePEM is c's certificate (its first, as Issue makes them) and its
// key (PKCS #8) in PEM.
func EncodePEM(t testing.TB, c tls.Certificate) (certPEM, keyPEM []byte) {
	t.Helper()
	kder, err := x509.MarshalPKCS8PrivateKey(c.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Certificate[0]}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})
}

// Files are the paths of PEM files written by WriteFiles.
type Files struct{ Cert, Key, CA string }

// WriteFiles writes c as dir/name.pem, its key as dir/name.key and the
// CA's certificate as dir/ca.pem. Each file is written whole and renamed
// into place, so a process reloading them never reads half a file.
func (ca *CA) WriteFiles(t testing.TB, dir, name string, c tls.Certificate) Files {
	t.Helper()
	certPEM, keyPEM := EncodePEM(t, c)
	f := Files{Cert: filepath.Join(dir, name+".pem"), Key: filepath.Join(dir, name+".key"), CA: filepath.Join(dir, "ca.pem")}
	writeFile(t, f.CA, ca.PEM())
	writeFile(t, f.Key, keyPEM)
	writeFile(t, f.Cert, certPEM)
	return f
}

func writeFile(t testing.TB, path string, b []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func newSerial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}
