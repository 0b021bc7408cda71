package testenv

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

// TestPKI is a throw-away certificate authority with a server certificate for 127.0.0.1/localhost
// and a client certificate, all PEM files under t.TempDir(), for TLS tests against private servers.
// OtherCAFile is a second, unrelated CA that signed nothing the servers present: a client trusting
// only it must fail verification.
type TestPKI struct {
	CAFile      string
	ServerCert  string
	ServerKey   string
	ClientCert  string
	ClientKey   string
	OtherCAFile string
}

// NewTestPKI generates the CA, server and client key pairs (ECDSA P-256, valid one hour).
func NewTestPKI(t testing.TB) *TestPKI {
	t.Helper()
	dir := t.TempDir()
	p := &TestPKI{
		CAFile:      filepath.Join(dir, "ca.pem"),
		ServerCert:  filepath.Join(dir, "server.pem"),
		ServerKey:   filepath.Join(dir, "server-key.pem"),
		ClientCert:  filepath.Join(dir, "client.pem"),
		ClientKey:   filepath.Join(dir, "client-key.pem"),
		OtherCAFile: filepath.Join(dir, "other-ca.pem"),
	}
	caCert, caKey := tlsSelfSignedCA(t, "servescope test CA")
	tlsWritePEM(t, p.CAFile, "CERTIFICATE", caCert.Raw)
	other, _ := tlsSelfSignedCA(t, "unrelated test CA")
	tlsWritePEM(t, p.OtherCAFile, "CERTIFICATE", other.Raw)

	server := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "127.0.0.1"},
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	tlsIssue(t, server, caCert, caKey, p.ServerCert, p.ServerKey)
	client := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "servescope-test-client"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	tlsIssue(t, client, caCert, caKey, p.ClientCert, p.ClientKey)
	return p
}

func tlsSelfSignedCA(t testing.TB, name string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("generate CA key: %v", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          tlsSerial(t),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Minute),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("create CA certificate: %v", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("parse CA certificate: %v", err)
	}
	return cert, key
}

func tlsIssue(t testing.TB, tmpl, ca *x509.Certificate, caKey *ecdsa.PrivateKey, certPath, keyPath string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("generate key for %s: %v", tmpl.Subject.CommonName, err)
	}
	tmpl.SerialNumber = tlsSerial(t)
	tmpl.NotBefore = time.Now().Add(-time.Minute)
	tmpl.NotAfter = time.Now().Add(time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatalf("issue certificate for %s: %v", tmpl.Subject.CommonName, err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatalf("encode key for %s: %v", tmpl.Subject.CommonName, err)
	}
	tlsWritePEM(t, certPath, "CERTIFICATE", der)
	tlsWritePEM(t, keyPath, "EC PRIVATE KEY", keyDER)
}

func tlsSerial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatalf("certificate serial: %v", err)
	}
	return n
}

func tlsWritePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatalf("write %s: %v", path, err)
	}
}
