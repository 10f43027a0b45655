package serving

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/util/cert"
	clocktesting "k8s.io/utils/clock/testing"
)

// TestCertificateReloadsWithoutRestart: a server whose certificate files are replaced
// serves the new certificate once the check interval has passed, without a restart; files
// that do not load (a certificate and a key that do not match, as a copy caught half way
// leaves them) keep the last good certificate in service.
func TestCertificateReloadsWithoutRestart(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	write := func(host string) (certPEM, keyPEM []byte) {
		t.Helper()
		certPEM, keyPEM, err := cert.GenerateSelfSignedCertKey(host, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
			t.Fatal(err)
		}
		return certPEM, keyPEM
	}
	write("first.example")
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC))
	cfg, err := tlsConfig(certFile, keyFile, "localhost", clk, CertCheckInterval)
	if err != nil {
		t.Fatal(err)
	}
	// Serve, not httptest: httptest adds a certificate of its own, which Go's TLS
	// prefers to GetCertificate for a client that sends no server name.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, ln, ok, cfg) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	url := "https://" + ln.Addr().String()
	// A new connection, so a new handshake, every time.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true, TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	served := func() string {
		t.Helper()
		resp, err := client.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return strings.Join(resp.TLS.PeerCertificates[0].DNSNames, ",")
	}
	// cert.GenerateSelfSignedCertKey puts the host in the certificate's DNS names.
	same := func(names, host string) bool { return slices.Contains(strings.Split(names, ","), host) }

	if cn := served(); !same(cn, "first.example") {
		t.Fatalf("serves %q, want first.example", cn)
	}
	write("second.example")
	if cn := served(); !same(cn, "first.example") {
		t.Errorf("serves %q before the check interval passed, want still first.example", cn)
	}
	clk.SetTime(clk.Now().Add(CertCheckInterval))
	if cn := served(); !same(cn, "second.example") {
		t.Errorf("serves %q after the files changed and %s passed, want second.example", cn, CertCheckInterval)
	}
	_, oldKey := write("third.example")
	certPEM, _, err := cert.GenerateSelfSignedCertKey("fourth.example", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certFile, certPEM, 0o600); err != nil { // the key is third's: no pair
		t.Fatal(err)
	}
	clk.SetTime(clk.Now().Add(CertCheckInterval))
	if cn := served(); !same(cn, "second.example") {
		t.Errorf("serves %q with a certificate and key that do not match, want the last good one, second.example", cn)
	}
	if err := os.WriteFile(keyFile, oldKey, 0o600); err != nil {
		t.Fatal(err)
	}
	write("fifth.example")
	clk.SetTime(clk.Now().Add(CertCheckInterval))
	if cn := served(); !same(cn, "fifth.example") {
		t.Errorf("serves %q once the files load again, want fifth.example", cn)
	}
}
