package serving

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"

	"k8s.io/client-go/util/cert"
)

// TLSConfig returns the TLS configuration of a secure endpoint: the certificate and key
// of certFile and keyFile (PEM), or, when both are empty, a self-signed pair made now for
// host, localhost and 127.0.0.1, as kube components make one when given no certificate.
// A self-signed certificate changes at every start: clients skip its verification (the
// bearer token, not the certificate, is what the server checks) or are given one to trust.
// Files are read once; a rotated certificate takes effect at the next start.
func TLSConfig(certFile, keyFile, host string) (*tls.Config, error) {
	var pair tls.Certificate
	var err error
	switch {
	case certFile != "" && keyFile != "":
		pair, err = tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("serving certificate: %w", err)
		}
	case certFile != "" || keyFile != "":
		return nil, errors.New("serving certificate: give both the certificate and the private key, or neither")
	default:
		certPEM, keyPEM, err := cert.GenerateSelfSignedCertKey(host, []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, []string{"localhost"})
		if err != nil {
			return nil, fmt.Errorf("self-signed serving certificate: %w", err)
		}
		if pair, err = tls.X509KeyPair(certPEM, keyPEM); err != nil {
			return nil, fmt.Errorf("self-signed serving certificate: %w", err)
		}
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}, nil
}
