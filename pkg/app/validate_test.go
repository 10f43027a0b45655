package app

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestValidateGettingStartedConfig: the configuration docs/getting-started.md shows passes
// --validate-config as written, on a machine without its certificate files, and says that
// the remote agent was not checked and why.
func TestValidateGettingStartedConfig(t *testing.T) {
	doc, err := os.ReadFile("../../docs/getting-started.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "<!-- checked by TestGettingStartedConfig")
	if !ok {
		t.Fatal("docs/getting-started.md lost its checked configuration")
	}
	_, rest, _ = strings.Cut(rest, "```yaml\n")
	cfgText, _, _ := strings.Cut(rest, "```")
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(cfgText), 0o600); err != nil {
		t.Fatal(err)
	}
	warnings, err := ValidateConfig(context.Background(), path, ValidateOptions{Agents: true})
	if err != nil {
		t.Fatalf("the documented configuration is refused: %v", err)
	}
	want := "agents[0] (ipmi-dc2): tls.certFile /tls/tls.crt, tls.keyFile /tls/tls.key, tls.caFile /tls/ca.crt not on this machine: read where the controller runs (agent not checked)"
	if len(warnings) != 1 || warnings[0] != want {
		t.Errorf("warnings %q, want [%q]", warnings, want)
	}
}

// TestValidateRemoteAgentFiles: a remote agent's certificate files are read when they are
// on this machine, so a bad one is an error naming it; good files and an agent that does
// not answer are a warning; files not here are a warning that names them, and an error
// with --require-files.
func TestValidateRemoteAgentFiles(t *testing.T) {
	dir := t.TempDir()
	good := writeCert(t, dir, "good")
	garbage := filepath.Join(dir, "garbage.crt")
	if err := os.WriteFile(garbage, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A port nothing listens on: the dial is refused at once.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	address := l.Addr().String()
	l.Close()
	for name, tc := range map[string]struct {
		cert, key, ca string
		require       bool // --require-files
		warning, err  string
	}{
		"good files, agent down": {cert: good.cert, key: good.key, ca: good.cert,
			warning: "agents[0] (dc2): agent dc2: validate: agent process died: connection error"},
		"a certificate that is not one": {cert: garbage, key: good.key, ca: good.cert,
			err: "agents[0]: Invalid value: agent dc2: Permanent: load client certificate " + garbage},
		"a CA that is not one": {cert: good.cert, key: good.key, ca: garbage,
			err: "agents[0]: Invalid value: agent dc2: Permanent: server ca: " + garbage + ": no PEM certificate found"},
		"only the key missing": {cert: good.cert, key: filepath.Join(dir, "nokey"), ca: good.cert,
			warning: "agents[0] (dc2): tls.keyFile " + filepath.Join(dir, "nokey") + " not on this machine: read where the controller runs (agent not checked)"},
		"the key missing where it must be": {cert: good.cert, key: filepath.Join(dir, "nokey"), ca: good.cert, require: true,
			err: "agents[0]: Invalid value: agent dc2: Permanent: load client certificate " + good.cert + " and key " + filepath.Join(dir, "nokey")},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := fmt.Sprintf(`apiVersion: config.kubefence.io/v1alpha1
kind: FenceControllerConfiguration
agents:
- name: dc2
  address: %s
  tls: {certFile: %s, keyFile: %s, caFile: %s}
  target: {annotation: example.com/bmc}
policies:
- name: default
  levels: [{agents: [dc2]}]
`, address, tc.cert, tc.key, tc.ca)
			path := filepath.Join(t.TempDir(), "config.yaml")
			if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
				t.Fatal(err)
			}
			warnings, err := ValidateConfig(context.Background(), path, ValidateOptions{Agents: true, RequireFiles: tc.require})
			switch {
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("error %v, want one with %q", err, tc.err)
			case tc.err == "" && err != nil:
				t.Fatalf("error %v, want none", err)
			case tc.warning != "" && (len(warnings) != 1 || !strings.Contains(warnings[0], tc.warning)):
				t.Fatalf("warnings %q, want one with %q", warnings, tc.warning)
			}
		})
	}
}

type certFiles struct{ cert, key string }

// writeCert writes a self-signed certificate and its key, PEM, as name.crt and name.key.
func writeCert(t *testing.T, dir, name string) certFiles {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		BasicConstraintsValid: true, IsCA: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	f := certFiles{cert: filepath.Join(dir, name+".crt"), key: filepath.Join(dir, name+".key")}
	for path, block := range map[string]*pem.Block{f.cert: {Type: "CERTIFICATE", Bytes: der}, f.key: {Type: "EC PRIVATE KEY", Bytes: keyDER}} {
		if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return f
}
