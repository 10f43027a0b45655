package sim

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki holds the paths of every credential the control plane needs. All of it is generated in
// Go at start so a test machine needs neither openssl nor a fixed set of checked-in keys.
type pki struct {
	caCert     string // CA that signed the apiserver serving cert; clients trust it
	caPEM      []byte
	serverCert string
	serverKey  string
	saKey      string // RSA private key: signs service-account tokens (apiserver, KCM)
	saPub      string // its public half: verifies them
	tokenFile  string // static token file for --token-auth-file
	token      string // bearer token of a system:masters user
	// nodeTokens are the kubelets' bearer tokens by node name (system:node:<name>).
	nodeTokens map[string]string
}

// writePKI creates a CA, an apiserver serving certificate for loopback, addr and the
// in-cluster names, a service-account key pair, an admin token and one token per node
// under dir.
func writePKI(dir, addr string, nodes []string) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create pki dir: %w", err)
	}
	p := &pki{
		caCert:     filepath.Join(dir, "ca.crt"),
		serverCert: filepath.Join(dir, "apiserver.crt"),
		serverKey:  filepath.Join(dir, "apiserver.key"),
		saKey:      filepath.Join(dir, "sa.key"),
		saPub:      filepath.Join(dir, "sa.pub"),
		tokenFile:  filepath.Join(dir, "tokens.csv"),
	}
	caKey, caCert, err := newCA()
	if err != nil {
		return nil, err
	}
	p.caPEM = pemBlock("CERTIFICATE", caCert.Raw)
	if err := os.WriteFile(p.caCert, p.caPEM, 0o600); err != nil {
		return nil, fmt.Errorf("write ca cert: %w", err)
	}
	if err := writeServingCert(p, caKey, caCert, addr); err != nil {
		return nil, err
	}
	if err := writeServiceAccountKeys(p); err != nil {
		return nil, err
	}
	if err := writeTokens(p, nodes); err != nil {
		return nil, err
	}
	return p, nil
}

func newCA() (crypto.Signer, *x509.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate ca key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "kubefence-sim-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(7 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, fmt.Errorf("sign ca cert: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, fmt.Errorf("parse ca cert: %w", err)
	}
	return key, cert, nil
}

func writeServingCert(p *pki, caKey crypto.Signer, ca *x509.Certificate, addr string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generate apiserver key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(7 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{"localhost", "kubernetes", "kubernetes.default",
			"kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		// 10.0.0.1 is the first address of --service-cluster-ip-range: the kubernetes Service.
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.0.0.1")},
	}
	if ip := net.ParseIP(addr); ip != nil && !ip.IsLoopback() {
		tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		return fmt.Errorf("sign apiserver cert: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("encode apiserver key: %w", err)
	}
	if err := os.WriteFile(p.serverCert, pemBlock("CERTIFICATE", der), 0o600); err != nil {
		return fmt.Errorf("write apiserver cert: %w", err)
	}
	if err := os.WriteFile(p.serverKey, pemBlock("PRIVATE KEY", keyDER), 0o600); err != nil {
		return fmt.Errorf("write apiserver key: %w", err)
	}
	return nil
}

func writeServiceAccountKeys(p *pki) error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return fmt.Errorf("generate service-account key: %w", err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return fmt.Errorf("encode service-account public key: %w", err)
	}
	priv := pemBlock("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(key))
	if err := os.WriteFile(p.saKey, priv, 0o600); err != nil {
		return fmt.Errorf("write service-account key: %w", err)
	}
	if err := os.WriteFile(p.saPub, pemBlock("PUBLIC KEY", pub), 0o600); err != nil {
		return fmt.Errorf("write service-account public key: %w", err)
	}
	return nil
}

func writeTokens(p *pki, nodes []string) error {
	var err error
	if p.token, err = newToken(); err != nil {
		return err
	}
	lines := fmt.Sprintf("%s,kubefence-sim-admin,kubefence-sim-admin,\"system:masters\"\n", p.token)
	p.nodeTokens = make(map[string]string, len(nodes))
	for _, n := range nodes {
		tok, err := newToken()
		if err != nil {
			return err
		}
		p.nodeTokens[n] = tok
		lines += fmt.Sprintf("%s,system:node:%s,node-%s,\"system:nodes\"\n", tok, n, n)
	}
	if err := os.WriteFile(p.tokenFile, []byte(lines), 0o600); err != nil {
		return fmt.Errorf("write token file: %w", err)
	}
	return nil
}

func newToken() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generate token: %w", err)
	}
	return hex.EncodeToString(b), nil
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}
