package plugin

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/kubefence/kubefence/pkg/plugin/agentpb"
)

// serveInProcess serves impl with mutual TLS on a free port until the test ends.
func serveInProcess(t *testing.T, impl Agent, cfg *tls.Config) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serveListener(ctx, impl, lis, cfg) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return lis.Addr().String()
}

func newRemoteHost(t *testing.T, spec AgentSpec) (*Host, Agent) {
	t.Helper()
	h, err := NewHost(HostConfig{Dir: t.TempDir(), Agents: map[string]AgentSpec{"remote": spec}, Logger: hclog.NewNullLogger()})
	if err != nil {
		t.Fatalf("new host: %v", err)
	}
	t.Cleanup(h.Close)
	a, err := h.Agent("remote")
	if err != nil {
		t.Fatal(err)
	}
	return h, a
}

// countingAgent answers every method and counts the calls that reached it.
func countingAgent(calls *atomic.Int32) *fakeAgent {
	res := Result{State: StateOff, Evidence: "read off"}
	return &fakeAgent{
		describe: func(context.Context) (Description, error) {
			calls.Add(1)
			return Description{Name: "remote", Version: "1", Actions: []Action{ActionOff}}, nil
		},
		validate: func(context.Context, map[string]string) error { calls.Add(1); return nil },
		fence:    func(context.Context, Request, Action) (Result, error) { calls.Add(1); return res, nil },
		status:   func(context.Context, Request) (Result, error) { calls.Add(1); return res, nil },
		unfence: func(context.Context, Request) (Result, error) {
			calls.Add(1)
			return Result{}, Errorf(KindUnsupported, "no unfence")
		},
	}
}

func TestRemoteCallsEveryMethod(t *testing.T) {
	f := NewRemoteFixture(t)
	var calls atomic.Int32
	addr := serveInProcess(t, countingAgent(&calls), f.ServerTLS(t))
	h, a := newRemoteHost(t, f.Spec(addr))
	ctx := t.Context()
	req := Request{Node: "n", Target: "t", Secrets: map[string]string{"password": "p"}}

	if d, err := a.Describe(ctx); err != nil || d.Name != "remote" {
		t.Errorf("describe = %+v, %v", d, err)
	}
	if err := a.Validate(ctx, map[string]string{"x": "y"}); err != nil {
		t.Errorf("validate: %v", err)
	}
	if res, err := a.Fence(ctx, req, ActionOff); err != nil || res.State != StateOff {
		t.Errorf("fence = %+v, %v", res, err)
	}
	if res, err := a.Status(ctx, req); err != nil || res.State != StateOff {
		t.Errorf("status = %+v, %v", res, err)
	}
	if _, err := a.Unfence(ctx, req); KindOf(err) != KindUnsupported || errors.Is(err, ErrAgentDied) {
		t.Errorf("unfence = %v, want the agent's typed error", err)
	}
	if err := h.Healthy(ctx, "remote"); err != nil {
		t.Errorf("healthy: %v", err)
	}
	if got := calls.Load(); got != 6 {
		t.Errorf("agent saw %d calls, want 6", got)
	}
}

func TestRemoteRefusesUntrustedClients(t *testing.T) {
	f := NewRemoteFixture(t)
	var calls atomic.Int32
	addr := serveInProcess(t, countingAgent(&calls), f.ServerTLS(t))
	rogue := NewPKI(t, "rogue")
	rogueCert, rogueKey := rogue.Issue(t, "controller", false)
	serverCA := x509.NewCertPool()
	pem, err := os.ReadFile(f.Server.CAFile)
	if err != nil || !serverCA.AppendCertsFromPEM(pem) {
		t.Fatalf("read server ca: %v", err)
	}
	clientPair, err := tls.LoadX509KeyPair(f.ClientCert, f.ClientKey)
	if err != nil {
		t.Fatal(err)
	}

	tests := map[string]*tls.Config{
		"certificate from another ca": mustClientTLS(t, rogueCert, rogueKey, f.Server.CAFile),
		"no certificate":              {RootCAs: serverCA, MinVersion: tls.VersionTLS12},
		"tls 1.2 only": {RootCAs: serverCA, Certificates: []tls.Certificate{clientPair},
			MinVersion: tls.VersionTLS12, MaxVersion: tls.VersionTLS12},
		"server not trusted by the client": mustClientTLS(t, f.ClientCert, f.ClientKey, rogue.CAFile),
	}
	for name, cfg := range tests {
		t.Run(name, func(t *testing.T) {
			conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			_, err = agentpb.NewAgentClient(conn).Describe(ctx, &agentpb.DescribeRequest{})
			if err == nil {
				t.Fatal("describe succeeded")
			}
			t.Logf("refused: %v", err)
		})
	}
	t.Run("host with a rogue certificate", func(t *testing.T) {
		spec := f.Spec(addr)
		spec.CertFile, spec.KeyFile = rogueCert, rogueKey
		h, a := newRemoteHost(t, spec)
		if _, err := a.Status(t.Context(), Request{Target: "t"}); err == nil {
			t.Fatal("status succeeded")
		}
		if err := h.Healthy(t.Context(), "remote"); err == nil {
			t.Fatal("healthy with a rogue certificate")
		}
	})
	if got := calls.Load(); got != 0 {
		t.Errorf("untrusted clients reached the agent %d times", got)
	}
}

func mustClientTLS(t *testing.T, cert, key, ca string) *tls.Config {
	t.Helper()
	cfg, err := LoadClientTLS(cert, key, ca, "")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestServeRemoteRefusesWeakConfig(t *testing.T) {
	f := NewRemoteFixture(t)
	good := f.ServerTLS(t)
	noCA := good.Clone()
	noCA.ClientCAs = nil
	noCert := good.Clone()
	noCert.Certificates = nil
	tests := map[string]struct {
		cfg  *tls.Config
		want string
	}{
		"nil":          {cfg: nil, want: "must be set"},
		"no client ca": {cfg: noCA, want: "no client CA"},
		"no cert":      {cfg: noCert, want: "no server certificate"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := ServeRemote(t.Context(), &fakeAgent{}, "127.0.0.1:0", tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
	if _, err := LoadServerTLS(f.ServerCert, f.ServerKey, f.ServerKey); err == nil ||
		!strings.Contains(err.Error(), "client ca") {
		t.Errorf("load server tls with a key as ca = %v, want a client ca error", err)
	}
}

// TestRemoteAgentKilledMidCallAndRestarted kills a remote agent process during
// a fence, then restarts it on the same address: the call in flight fails with
// ErrAgentDied, calls while it is down too, and the first call after the
// restart works without anything being reset by hand.
func TestRemoteAgentKilledMidCallAndRestarted(t *testing.T) {
	f := NewRemoteFixture(t)
	srv := StartServe(t, f, "127.0.0.1:0")
	h, a := newRemoteHost(t, f.Spec(srv.Addr))
	stateDir := t.TempDir()
	req := testRequest(stateDir)
	if _, err := a.Status(t.Context(), req); err != nil {
		t.Fatalf("warm up: %v", err)
	}

	blocking := testRequest(stateDir)
	blocking.Params["block"] = "true"
	errc := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err := a.Fence(ctx, blocking, ActionOff)
		errc <- err
	}()
	eventually(t, 10*time.Second, "the fence call to reach the agent", func() bool {
		_, err := os.Stat(filepath.Join(stateDir, "inflight"))
		return err == nil
	})
	oldPID := srv.PID()
	srv.Kill(t)
	select {
	case err := <-errc:
		if !errors.Is(err, ErrAgentDied) || !strings.Contains(err.Error(), "remote") {
			t.Fatalf("err = %v, want ErrAgentDied naming the agent", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("fence call did not return after the agent was killed")
	}
	if _, err := a.Status(t.Context(), req); !errors.Is(err, ErrAgentDied) {
		t.Errorf("status while down = %v, want ErrAgentDied", err)
	}
	if err := h.Healthy(t.Context(), "remote"); err == nil {
		t.Errorf("healthy while down")
	}

	srv = StartServe(t, f, srv.Addr)
	res, err := a.Status(t.Context(), req)
	if err != nil {
		t.Fatalf("status after restart: %v", err)
	}
	if strings.Contains(res.Evidence, "by pid "+strconv.Itoa(oldPID)) || !strings.Contains(res.Evidence, "by pid "+strconv.Itoa(srv.PID())) {
		t.Errorf("evidence %q: want the restarted pid %d", res.Evidence, srv.PID())
	}
	if err := h.Healthy(t.Context(), "remote"); err != nil {
		t.Errorf("healthy after restart: %v", err)
	}
	if err := srv.Stop(t); err != nil {
		t.Errorf("serve after SIGTERM: %v, want a clean exit", err)
	}
	// The remote process got its secrets inside requests only.
	if strings.Contains(srv.Logs(), testPassword) {
		t.Errorf("remote agent log contains the password:\n%s", srv.Logs())
	}
	if !processGone(oldPID) {
		t.Errorf("killed agent %d still exists", oldPID)
	}
}

func TestRemoteSpecValidate(t *testing.T) {
	remote := AgentSpec{Address: "10.0.0.9:7443", CertFile: "c.pem", KeyFile: "k.pem", CAFile: "ca.pem"}
	tests := map[string]struct {
		spec AgentSpec
		want []string
	}{
		"remote ok": {spec: remote},
		"both modes": {
			spec: AgentSpec{Address: remote.Address, CertFile: "c", KeyFile: "k", CAFile: "ca", SHA256: agentSum},
			want: []string{`agents["a"]: set either address (remote agent) or binary and sha256`},
		},
		"neither mode": {spec: AgentSpec{}, want: []string{`agents["a"].sha256: must be 64 hex digits`}},
		"bad address and no tls files": {
			spec: AgentSpec{Address: "10.0.0.9"},
			want: []string{`agents["a"].address: "10.0.0.9" is not host:port`, `agents["a"].certFile: must be set`,
				`agents["a"].keyFile: must be set`, `agents["a"].caFile: must be set`},
		},
		"tls files without address": {
			spec: AgentSpec{SHA256: agentSum, CAFile: "ca.pem"},
			want: []string{`agents["a"]: certFile, keyFile, caFile and serverName apply only with address`},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := HostConfig{Dir: "/x", Agents: map[string]AgentSpec{"a": tc.spec}}.Validate()
			if len(tc.want) == 0 && err != nil {
				t.Fatalf("validate: %v", err)
			}
			for _, w := range tc.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("err = %v, want it to mention %s", err, w)
				}
			}
		})
	}
}
