package ipmi

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"

	bmclib "github.com/bmc-toolbox/bmclib/v2"
	bmcredfish "github.com/bmc-toolbox/bmclib/v2/providers/redfish"
	"github.com/go-logr/logr"
	"github.com/kubefence/kubefence/pkg/plugin"
	"github.com/stmcginnis/gofish/common"
)

// debugEnv makes bmclib's redfish wrapper dump every request and response, the session
// login with its password included, to stdout, which go-plugin forwards to the
// controller's log. The Redfish client refuses to run while it is set.
const debugEnv = "DEBUG_BMCLIB"

// NewRedfishClient is the default ClientFunc for Redfish: bmclib's gofish provider,
// and only it. Credentials stay in memory: they go to the BMC in the session login
// body (or a basic-auth header) over TLS, never to argv, the environment or a log;
// bmclib gets a discarding logger. TLS is verified against Conn.CABundle, or the
// system roots when that is empty, unless Conn.Insecure is set.
//
// The HTTP client goes in with bmclib.WithHTTPClient: in bmclib v2.3.5
// WithRedfishHTTPClient is stored but never used, so a client passed that way would
// silently be replaced by bmclib's default, which skips certificate verification.
func NewRedfishClient(c Conn) (PowerClient, error) {
	if os.Getenv(debugEnv) == "true" {
		return nil, fmt.Errorf("%s=true in the agent's environment would make bmclib print credentials; unset it", debugEnv)
	}
	hc, err := redfishHTTPClient(c)
	if err != nil {
		return nil, err
	}
	opts := []bmclib.Option{
		bmclib.WithLogger(logr.Discard()),
		bmclib.WithHTTPClient(hc),
		bmclib.WithRedfishPort(strconv.Itoa(c.Port)),
		bmclib.WithPerProviderTimeout(c.Timeout),
	}
	if c.SystemName != "" {
		opts = append(opts, bmclib.WithRedfishSystemName(c.SystemName))
	}
	cl := bmclib.NewClient(c.Host, c.Username, c.Password, opts...)
	cl.Registry.Drivers = cl.Registry.For(bmcredfish.ProviderName)
	if len(cl.Registry.Drivers) != 1 {
		return nil, fmt.Errorf("bmclib registered %d %s providers, want 1", len(cl.Registry.Drivers), bmcredfish.ProviderName)
	}
	return &redfishClient{bmc: cl, conn: c, hc: hc}, nil
}

// redfishHTTPClient verifies the BMC's certificate unless told not to. bmclib clones
// the transport, so it must be an *http.Transport.
func redfishHTTPClient(c Conn) (*http.Client, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: c.Insecure} //nolint:gosec // only when insecure=true is set explicitly
	if c.CABundle != "" {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM([]byte(c.CABundle)) {
			return nil, fmt.Errorf("%s: no PEM certificate found", ParamCABundle)
		}
		tc.RootCAs = pool
	}
	dialer := &net.Dialer{Timeout: c.Timeout}
	return &http.Client{
		Timeout: c.Timeout,
		Transport: &http.Transport{
			// No proxy from the environment: the agent talks to its BMCs directly.
			Proxy:                 nil,
			DialContext:           dialer.DialContext,
			TLSClientConfig:       tc,
			TLSHandshakeTimeout:   c.Timeout,
			ResponseHeaderTimeout: c.Timeout,
			MaxIdleConnsPerHost:   2,
		},
	}, nil
}

// redfishClient adapts bmclib's client. gofish sends its requests without the call's
// context and stops only at the HTTP client's timeout, so every call runs in its own
// goroutine and returns when ctx ends; mu keeps a call that outlived its ctx from
// overlapping the next one (or Close).
type redfishClient struct {
	bmc *bmclib.Client
	mu  sync.Mutex
	// conn and hc reach the service again for what bmclib does not read (SystemGUID).
	conn Conn
	hc   *http.Client
}

func (r *redfishClient) Open(ctx context.Context) error {
	_, err := bounded(ctx, &r.mu, "open session", func() (string, error) {
		return "", r.withMetadata(r.bmc.Open(ctx))
	})
	return err
}

func (r *redfishClient) Close(ctx context.Context) error {
	_, err := bounded(ctx, &r.mu, "close session", func() (string, error) {
		return "", r.bmc.Close(ctx)
	})
	return err
}

// GetPowerState returns the system's PowerState property, e.g. "On" or "PoweringOff".
func (r *redfishClient) GetPowerState(ctx context.Context) (string, error) {
	return bounded(ctx, &r.mu, "read power state", func() (string, error) {
		st, err := r.bmc.GetPowerState(ctx)
		return st, r.withMetadata(err)
	})
}

// SetPowerState sends "on" (ResetType On), "off" (ForceOff) or "cycle" (ForceRestart)
// through bmclib, which skips the request when the system already reads so.
func (r *redfishClient) SetPowerState(ctx context.Context, state string) (bool, error) {
	var ok bool
	_, err := bounded(ctx, &r.mu, "power "+state, func() (string, error) {
		var err error
		ok, err = r.bmc.SetPowerState(ctx, state)
		return "", r.withMetadata(err)
	})
	return ok, err
}

// withMetadata replaces bmclib's multi-line multierror text with the providers it
// tried and why each failed, keeping the original error for errors.As.
func (r *redfishClient) withMetadata(err error) error {
	if err == nil {
		return nil
	}
	md := r.bmc.GetMetadata()
	if len(md.FailedProviderDetail) == 0 {
		return &providerError{detail: oneLine(err.Error()), err: err}
	}
	names := make([]string, 0, len(md.FailedProviderDetail))
	for name := range md.FailedProviderDetail {
		names = append(names, name)
	}
	sort.Strings(names)
	parts := make([]string, 0, len(names))
	for _, name := range names {
		detail := strings.TrimPrefix(md.FailedProviderDetail[name], "provider: "+name+": ")
		parts = append(parts, fmt.Sprintf("bmclib provider %s: %s", name, oneLine(detail)))
	}
	return &providerError{detail: strings.Join(parts, "; "), err: err}
}

type providerError struct {
	detail string
	err    error
}

func (e *providerError) Error() string { return e.detail }
func (e *providerError) Unwrap() error { return e.err }

// bounded runs fn under mu and returns when it does or when ctx ends, whichever is
// first. A call cut short keeps running until the HTTP client's own timeout.
func bounded(ctx context.Context, mu *sync.Mutex, what string, fn func() (string, error)) (string, error) {
	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	go func() {
		mu.Lock()
		defer mu.Unlock()
		if err := ctx.Err(); err != nil {
			done <- result{err: err}
			return
		}
		out, err := fn()
		done <- result{out, err}
	}()
	select {
	case r := <-done:
		if r.err != nil && ctx.Err() != nil {
			return r.out, fmt.Errorf("redfish %s: the call's deadline ended first: %w", what, ctx.Err())
		}
		return r.out, r.err
	case <-ctx.Done():
		return "", fmt.Errorf("redfish %s: no answer before the call's deadline: %w", what, ctx.Err())
	}
}

// classifyRedfish sorts a Redfish failure by what the BMC answered, if anything, and
// returns a hint for the person who reads the error.
func classifyRedfish(err error, lower string) (plugin.ErrorKind, string) {
	var rfErr *common.Error
	if errors.As(err, &rfErr) && rfErr.HTTPReturnedStatusCode != 0 {
		return redfishStatusKind(rfErr.HTTPReturnedStatusCode)
	}
	if status, ok := statusPrefix(lower); ok {
		return redfishStatusKind(status)
	}
	var verifyErr *tls.CertificateVerificationError
	var authorityErr x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	if errors.As(err, &verifyErr) || errors.As(err, &authorityErr) || errors.As(err, &hostErr) ||
		strings.Contains(lower, "x509:") {
		return plugin.KindPermanent, " (the bmc's tls certificate is not trusted: set " + ParamCABundle +
			" to the CA that signed it; " + ParamInsecure + "=true skips verification)"
	}
	if strings.Contains(lower, "first record does not look like a tls handshake") ||
		strings.Contains(lower, "server gave http response to https client") {
		return plugin.KindPermanent, " (the port does not speak https; check " + ParamRedfishPort + ")"
	}
	if strings.Contains(lower, "no matching redfish system found") {
		return plugin.KindPermanent, " (the service has several systems or none of that name: set " + ParamSystemName + ")"
	}
	var netErr net.Error
	if (errors.As(err, &netErr) && netErr.Timeout()) || containsAny(lower, unreachablePhrases) ||
		strings.Contains(lower, "connection reset") || strings.HasSuffix(strings.TrimSpace(lower), "eof") {
		return plugin.KindTargetUnreachable, ""
	}
	return plugin.KindRetryable, ""
}

// redfishStatusKind maps the HTTP status of a Redfish error response.
func redfishStatusKind(status int) (plugin.ErrorKind, string) {
	switch {
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return plugin.KindPermanent, " (check the BMC credentials)"
	case status == http.StatusNotFound || status == http.StatusMethodNotAllowed:
		return plugin.KindPermanent, " (is this a Redfish service, and " + ParamSystemName + " right?)"
	case status == http.StatusBadRequest:
		return plugin.KindPermanent, ""
	default:
		// 409, 412, 429, 5xx: busy or in another operation.
		return plugin.KindRetryable, ""
	}
}

// statusPrefix reads gofish's "401: {body}" form when the error's type was lost.
func statusPrefix(lower string) (int, bool) {
	for _, line := range strings.Split(lower, "\n") {
		line = strings.TrimSpace(line)
		if i := strings.Index(line, "provider: gofish: "); i >= 0 {
			line = line[i+len("provider: gofish: "):]
		}
		if len(line) > 4 && line[3] == ':' && line[0] >= '1' && line[0] <= '5' &&
			line[1] >= '0' && line[1] <= '9' && line[2] >= '0' && line[2] <= '9' {
			return int(line[0]-'0')*100 + int(line[1]-'0')*10 + int(line[2]-'0'), true
		}
	}
	return 0, false
}
