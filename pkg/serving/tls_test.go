package serving

import (
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/util/cert"
)

func TestTLSConfig(t *testing.T) {
	dir := t.TempDir()
	certPEM, keyPEM, err := cert.GenerateSelfSignedCertKey("metrics.example", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		cert, key, wantErr string
	}{
		"self-signed":      {},
		"given":            {cert: certFile, key: keyFile},
		"certificate only": {cert: certFile, wantErr: "both"},
		"missing file":     {cert: filepath.Join(dir, "none"), key: keyFile, wantErr: "no such file"},
	} {
		t.Run(name, func(t *testing.T) {
			cfg, err := TLSConfig(tc.cert, tc.key, "localhost")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.MinVersion != tls.VersionTLS12 {
				t.Errorf("MinVersion %x, want TLS 1.2", cfg.MinVersion)
			}
			srv := httptest.NewUnstartedServer(ok)
			srv.TLS = cfg
			srv.StartTLS()
			defer srv.Close()
			client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, MaxVersion: tls.VersionTLS11}}}
			if resp, err := client.Get(srv.URL); err == nil {
				resp.Body.Close()
				t.Errorf("a TLS 1.1 client was served")
			}
			client = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
			resp, err := client.Get(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		})
	}
}
