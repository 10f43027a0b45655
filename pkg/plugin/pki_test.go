package plugin

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

// PKI is a throwaway certificate authority whose files live in a test's temp
// dir. It is exported to the external tests of this package.
type PKI struct {
	// CAFile is the PEM certificate of the CA.
	CAFile string
	dir    string
	cert   *x509.Certificate
	key    *ecdsa.PrivateKey
	serial int64
}

// NewPKI makes a CA named name.
func NewPKI(t testing.TB, name string) *PKI {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("create ca %s: %v", name, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	p := &PKI{dir: t.TempDir(), cert: cert, key: key, serial: 1}
	p.CAFile = p.write(t, name+"-ca.pem", "CERTIFICATE", der)
	return p
}

// Issue signs a certificate for name, valid for 127.0.0.1 and localhost when
// server is set, for client authentication otherwise, and returns its files.
func (p *PKI) Issue(t testing.TB, name string, server bool) (certFile, keyFile string) {
	t.Helper()
	key := newKey(t)
	p.serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(p.serial),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.DNSNames = []string{"localhost"}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.cert, &key.PublicKey, p.key)
	if err != nil {
		t.Fatalf("issue %s: %v", name, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return p.write(t, name+".pem", "CERTIFICATE", der), p.write(t, name+"-key.pem", "PRIVATE KEY", keyDER)
}

func (p *PKI) write(t testing.TB, file, typ string, der []byte) string {
	t.Helper()
	path := filepath.Join(p.dir, file)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// RemoteFixture is a server CA and a client CA with one certificate each: what
// a remote agent and the controller that reaches it are configured with.
type RemoteFixture struct {
	Server, Client        *PKI
	ServerCert, ServerKey string
	ClientCert, ClientKey string
}

// NewRemoteFixture issues the certificates of one remote agent and its client.
func NewRemoteFixture(t testing.TB) *RemoteFixture {
	t.Helper()
	f := &RemoteFixture{Server: NewPKI(t, "agents"), Client: NewPKI(t, "controllers")}
	f.ServerCert, f.ServerKey = f.Server.Issue(t, "agent", true)
	f.ClientCert, f.ClientKey = f.Client.Issue(t, "controller", false)
	return f
}

// ServerTLS is the agent side's config, as "serve" loads it.
func (f *RemoteFixture) ServerTLS(t testing.TB) *tls.Config {
	t.Helper()
	cfg, err := LoadServerTLS(f.ServerCert, f.ServerKey, f.Client.CAFile)
	if err != nil {
		t.Fatalf("load server tls: %v", err)
	}
	return cfg
}

// Spec is the controller side's agent config for a remote agent at addr.
func (f *RemoteFixture) Spec(addr string) AgentSpec {
	return AgentSpec{Address: addr, CertFile: f.ClientCert, KeyFile: f.ClientKey, CAFile: f.Server.CAFile}
}
