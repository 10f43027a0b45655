package sim

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
)

// RemoteAgent is an agent binary serving over TCP with mutual TLS, as installed in a
// datacenter's management network, and the controller-side TLS files to reach it.
type RemoteAgent struct {
	Address string
	TLS     v1alpha1.AgentTLS
	*Replica
}

// StartRemoteAgent runs the named agent binary (e.g. "fence-agent-ipmi") in serve mode on
// a free loopback port, with a fresh CA, server and client certificates under dir.
func (h *Harness) StartRemoteAgent(ctx context.Context, name, binary string) (*RemoteAgent, error) {
	dir := filepath.Join(h.dir, "remote-"+name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	caKey, ca, err := newCA()
	if err != nil {
		return nil, err
	}
	files := map[string]string{}
	for _, leaf := range []struct {
		name   string
		server bool
	}{{"server", true}, {"client", false}} {
		if err := writeLeaf(dir, leaf.name, leaf.server, caKey, ca); err != nil {
			return nil, err
		}
		files[leaf.name] = filepath.Join(dir, leaf.name)
	}
	caFile := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(caFile, pemBlock("CERTIFICATE", ca.Raw), 0o600); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	p, err := startProcess(dir, name, filepath.Join(h.bin, binary), []string{"serve", "--listen", addr,
		"--cert", files["server"] + ".crt", "--key", files["server"] + ".key", "--client-ca", caFile})
	if err != nil {
		return nil, err
	}
	h.track(p)
	r := &RemoteAgent{Address: addr, Replica: &Replica{p: p},
		TLS: v1alpha1.AgentTLS{CertFile: files["client"] + ".crt", KeyFile: files["client"] + ".key", CAFile: caFile}}
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return strings.Contains(r.Log(), "serving on"), nil
	})
	if err != nil {
		return nil, fmt.Errorf("remote agent %s did not start serving: %s", name, r.Log())
	}
	return r, nil
}

// writeLeaf writes dir/name.crt and dir/name.key, signed by ca, for 127.0.0.1.
func writeLeaf(dir, name string, server bool, caKey crypto.Signer, ca *x509.Certificate) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		return err
	}
	usage := x509.ExtKeyUsageClientAuth
	if server {
		usage = x509.ExtKeyUsageServerAuth
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: "kubefence-" + name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		return fmt.Errorf("sign %s certificate: %w", name, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, name+".crt"), pemBlock("CERTIFICATE", der), 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, name+".key"), pemBlock("PRIVATE KEY", keyDER), 0o600)
}
