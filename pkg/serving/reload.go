package serving

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"os"
	"sync"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// CertCheckInterval is how often, at most, a handshake reads the certificate files again:
// a rotated certificate (cert-manager renews it in its Secret, the kubelet swaps the
// mounted files) is served within this long of the swap, with no restart.
const CertCheckInterval = 10 * time.Second

// certReloader serves the certificate and key of two PEM files, and reads them again at
// a handshake once checkEvery has passed since the last read. A pair that does not load
// (the files caught half way through a copy, a key that does not match) leaves the last
// good one in service, and is read again at the next check.
type certReloader struct {
	certFile, keyFile string
	clock             clock.PassiveClock
	checkEvery        time.Duration

	mu        sync.Mutex
	pair      *tls.Certificate
	certPEM   []byte
	keyPEM    []byte
	checkedAt time.Time
}

// newCertReloader loads the pair now: a start with files that do not load fails.
func newCertReloader(certFile, keyFile string, c clock.PassiveClock, checkEvery time.Duration) (*certReloader, error) {
	r := &certReloader{certFile: certFile, keyFile: keyFile, clock: c, checkEvery: checkEvery}
	if err := r.load(); err != nil {
		return nil, err
	}
	return r, nil
}

// GetCertificate is tls.Config.GetCertificate.
func (r *certReloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.clock.Since(r.checkedAt) >= r.checkEvery {
		if err := r.load(); err != nil {
			klog.ErrorS(err, "Serving certificate files changed but do not load; serving the previous one", "certFile", r.certFile)
		}
	}
	return r.pair, nil
}

// load reads both files and, when either changed, parses them and puts the new pair in
// service. The caller holds mu (or is the constructor).
func (r *certReloader) load() error {
	r.checkedAt = r.clock.Now()
	certPEM, err := os.ReadFile(r.certFile)
	if err != nil {
		return fmt.Errorf("serving certificate: %w", err)
	}
	keyPEM, err := os.ReadFile(r.keyFile)
	if err != nil {
		return fmt.Errorf("serving certificate: %w", err)
	}
	if r.pair != nil && bytes.Equal(certPEM, r.certPEM) && bytes.Equal(keyPEM, r.keyPEM) {
		return nil
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return fmt.Errorf("serving certificate: %w", err)
	}
	if r.pair != nil {
		klog.InfoS("Serving certificate reloaded", "certFile", r.certFile)
	}
	r.pair, r.certPEM, r.keyPEM = &pair, certPEM, keyPEM
	return nil
}
