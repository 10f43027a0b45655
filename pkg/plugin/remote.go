package plugin

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/kubefence/kubefence/pkg/plugin/agentpb"
)

// stopGrace bounds how long a remote agent lets in-flight calls finish after it
// is told to stop; the controller re-issues whatever was cut short.
const stopGrace = 5 * time.Second

// ServeRemote serves impl on the TCP address addr with mutual TLS until ctx
// ends, for an agent that runs in a network the controller cannot launch
// processes in. It serves the same gRPC service as Serve. Whatever tlsCfg says,
// clients must present a certificate that verifies against tlsCfg.ClientCAs, and
// nothing older than TLS 1.3 is spoken.
func ServeRemote(ctx context.Context, impl Agent, addr string, tlsCfg *tls.Config) error {
	if _, err := remoteServerTLS(tlsCfg); err != nil {
		return err
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("serve remote agent on %s: %w", addr, err)
	}
	return serveListener(ctx, impl, lis, tlsCfg)
}

// serveListener is ServeRemote on a listener the caller opened; it closes lis.
func serveListener(ctx context.Context, impl Agent, lis net.Listener, tlsCfg *tls.Config) error {
	cfg, err := remoteServerTLS(tlsCfg)
	if err != nil {
		_ = lis.Close()
		return err
	}
	if impl == nil {
		_ = lis.Close()
		return errors.New("serve remote agent: no implementation")
	}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(cfg)))
	agentpb.RegisterAgentServer(srv, &grpcServer{impl: impl})

	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	select {
	case err := <-served:
		return fmt.Errorf("serve remote agent on %s: %w", lis.Addr(), err)
	case <-ctx.Done():
	}
	stopped := make(chan struct{})
	go func() {
		srv.GracefulStop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(stopGrace):
		srv.Stop()
		<-stopped
	}
	<-served
	return nil
}

// remoteServerTLS returns a copy of cfg that demands and verifies client
// certificates and TLS 1.3, or an error if cfg cannot do that.
func remoteServerTLS(cfg *tls.Config) (*tls.Config, error) {
	if cfg == nil {
		return nil, errors.New("serve remote agent: tls config: must be set")
	}
	if len(cfg.Certificates) == 0 && cfg.GetCertificate == nil {
		return nil, errors.New("serve remote agent: tls config: no server certificate")
	}
	if cfg.ClientCAs == nil {
		return nil, errors.New("serve remote agent: tls config: no client CA; every client must present a certificate")
	}
	c := cfg.Clone()
	c.ClientAuth = tls.RequireAndVerifyClientCert
	c.MinVersion = tls.VersionTLS13
	return c, nil
}

// LoadServerTLS reads a remote agent's certificate and key and the CA that
// signs its clients' certificates, all PEM, into a config for ServeRemote.
func LoadServerTLS(certFile, keyFile, clientCAFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("load server certificate %s and key %s: %w", certFile, keyFile, err)
	}
	pool, err := loadCAPool(clientCAFile)
	if err != nil {
		return nil, fmt.Errorf("client ca: %w", err)
	}
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS13,
	}, nil
}

// LoadClientTLS reads the controller's client certificate and key and the CA
// that signs remote agents' certificates, all PEM. serverName is the name the
// agent's certificate must carry; empty means the host part of the address.
func LoadClientTLS(certFile, keyFile, serverCAFile, serverName string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("load client certificate %s and key %s: %w", certFile, keyFile, err)
	}
	pool, err := loadCAPool(serverCAFile)
	if err != nil {
		return nil, fmt.Errorf("server ca: %w", err)
	}
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		RootCAs:      pool,
		ServerName:   serverName,
		MinVersion:   tls.VersionTLS13,
	}, nil
}

func loadCAPool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no PEM certificate found", file)
	}
	return pool, nil
}

// healthTimeout bounds Healthy: an agent that cannot describe itself this fast
// is in no shape to fence.
const healthTimeout = 3 * time.Second

func (s AgentSpec) remote() bool { return s.Address != "" }

// validateRemote checks the fields of an agent reached by address.
func (s AgentSpec) validateRemote(field string) []error {
	var errs []error
	if s.Binary != "" || s.SHA256 != "" {
		errs = append(errs, fmt.Errorf("%s: set either address (remote agent) or binary and sha256 (local agent), not both", field))
	}
	host, port, err := net.SplitHostPort(s.Address)
	if n, perr := strconv.Atoi(port); err != nil || perr != nil || host == "" || n < 1 || n > 65535 {
		errs = append(errs, fmt.Errorf("%s.address: %q is not host:port", field, s.Address))
	}
	for _, f := range []struct{ name, value string }{
		{"certFile", s.CertFile}, {"keyFile", s.KeyFile}, {"caFile", s.CAFile},
	} {
		if f.value == "" {
			errs = append(errs, fmt.Errorf("%s.%s: must be set for a remote agent", field, f.name))
		}
	}
	return errs
}

// dial connects to the remote agent name. Certificates are read on every dial,
// so rotated files take effect at the next reconnect. The connection is lazy:
// an agent that is down fails the first call with ErrAgentDied.
func (h *Host) dial(name string) (*process, error) {
	spec := h.specs[name]
	cfg, err := LoadClientTLS(spec.CertFile, spec.KeyFile, spec.CAFile, spec.ServerName)
	if err != nil {
		return nil, fmt.Errorf("agent %s: %w", name, &Error{Kind: KindPermanent, Message: err.Error()})
	}
	conn, err := grpc.NewClient(spec.Address, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		return nil, fmt.Errorf("agent %s: dial %s: %w", name, spec.Address, &Error{Kind: KindPermanent, Message: err.Error()})
	}
	h.logger.Named(name).Info("remote agent connection opened", "address", spec.Address)
	return &process{conn: conn, agent: &grpcClient{client: agentpb.NewAgentClient(conn)}}, nil
}

// Healthy asks the named agent to describe itself within a short deadline,
// launching or connecting to it if need be. A nil error means it answered.
func (h *Host) Healthy(ctx context.Context, name string) error {
	a, err := h.Agent(name)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, healthTimeout)
	defer cancel()
	d, err := a.Describe(ctx)
	if err != nil {
		return fmt.Errorf("health check: %w", err)
	}
	if d.Name == "" {
		return fmt.Errorf("health check: agent %s: %w", name, errors.New("describe returned no name"))
	}
	return nil
}
