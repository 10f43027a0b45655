package serving

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	"k8s.io/client-go/util/cert"
	"k8s.io/utils/clock"
)

// TLSConfig returns the TLS configuration of a secure endpoint: the certificate and key
// of certFile and keyFile (PEM), or, when both are empty, a self-signed pair made now for
// host, localhost and 127.0.0.1, as kube components make one when given no certificate.
// A self-signed certificate changes at every start: clients skip its verification (the
// bearer token, not the certificate, is what the server checks) or are given one to trust.
// Given files are read again at a handshake every CertCheckInterval at most, so that a
// rotated certificate is served without a restart.
func TLSConfig(certFile, keyFile, host string) (*tls.Config, error) {
	return tlsConfig(certFile, keyFile, host, clock.RealClock{}, CertCheckInterval)
}

func tlsConfig(certFile, keyFile, host string, c clock.PassiveClock, checkEvery time.Duration) (*tls.Config, error) {
	switch {
	case certFile != "" && keyFile != "":
		r, err := newCertReloader(certFile, keyFile, c, checkEvery)
		if err != nil {
			return nil, err
		}
		return &tls.Config{GetCertificate: r.GetCertificate, MinVersion: tls.VersionTLS12}, nil
	case certFile != "" || keyFile != "":
		return nil, errors.New("serving certificate: give both the certificate and the private key, or neither")
	}
	certPEM, keyPEM, err := cert.GenerateSelfSignedCertKey(host, []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, []string{"localhost"})
	if err != nil {
		return nil, fmt.Errorf("self-signed serving certificate: %w", err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("self-signed serving certificate: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}, nil
}
