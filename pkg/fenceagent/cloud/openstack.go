package cloud

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"

	"github.com/kubefence/kubefence/pkg/fenceagent/internal/agentkit"
	"github.com/kubefence/kubefence/pkg/plugin"
)

// openOpenStack authenticates against Keystone and sets s up for the Nova server t names.
func openOpenStack(ctx context.Context, s *session, t target, req plugin.Request) error {
	opts, how, err := openstackAuth(s.p, req.Secrets)
	if err != nil {
		return err
	}
	region := s.p.region
	if region == "" {
		region = t.zone
	}
	srv := &novaServer{id: t.id, region: region}
	s.inst = srv
	provider, err := openstack.NewClient(opts.IdentityEndpoint)
	if err != nil {
		return plugin.Errorf(plugin.KindPermanent, "%s: %s", ParamAuthURL, s.Scrub(err.Error()))
	}
	err = s.call(ctx, "authenticate to "+opts.IdentityEndpoint, func(ctx context.Context) error {
		return openstack.AuthenticateV3(ctx, provider, &opts, gophercloud.EndpointOpts{})
	})
	if errors.Is(err, errConflict) {
		return plugin.Errorf(plugin.KindRetryable, "%s", err)
	}
	if err != nil {
		return err
	}
	srv.compute, err = openstack.NewComputeV2(provider, gophercloud.EndpointOpts{
		Region:       region,
		Availability: gophercloud.Availability(s.p.iface),
	})
	if err != nil {
		return plugin.Errorf(plugin.KindPermanent, "compute endpoint (%s %s, region %q): %s",
			ParamInterface, s.p.iface, region, s.Scrub(err.Error()))
	}
	s.Note("%s node %q via %s, credentials from %s", srv.name(), req.Node, srv.compute.Endpoint, how)
	if s.p.lock {
		s.lock = func(ctx context.Context) error { return s.lockAction(ctx, "lock", srv.lock) }
		s.unlock = func(ctx context.Context) error { return s.lockAction(ctx, "unlock", srv.unlock) }
	}
	return nil
}

func (s *session) lockAction(ctx context.Context, verb string, fn func(context.Context) error) error {
	if err := s.call(ctx, verb+" "+s.inst.name(), fn); err != nil {
		if errors.Is(err, errConflict) {
			return plugin.Errorf(plugin.KindRetryable, "%s", err)
		}
		return err
	}
	s.Note("%sed the server (%s=true)", verb, ParamLock)
	return nil
}

// openstackAuth builds Keystone v3 auth options from a clouds.yaml-style secret: a
// user name and password scoped to a project, or an application credential. Errors
// name the missing or conflicting keys, never values.
func openstackAuth(p params, sec map[string]string) (gophercloud.AuthOptions, string, error) {
	authURL := p.authURL
	if authURL == "" {
		authURL = sec[SecretAuthURL]
		if authURL != "" {
			if err := checkURL(authURL); err != nil {
				return gophercloud.AuthOptions{}, "", plugin.Errorf(plugin.KindPermanent, "secret: %s is not an http(s) URL with a host", SecretAuthURL)
			}
		}
	}
	if authURL == "" {
		return gophercloud.AuthOptions{}, "", plugin.Errorf(plugin.KindPermanent, "%s: missing; set the parameter or the secret key", ParamAuthURL)
	}
	pw := sec[SecretUsername] != "" || sec[SecretPassword] != ""
	app := sec[SecretApplicationCredentialID] != "" || sec[SecretApplicationCredentialSecret] != ""
	bad := func(format string, args ...any) (gophercloud.AuthOptions, string, error) {
		return gophercloud.AuthOptions{}, "", plugin.Errorf(plugin.KindPermanent, "secret: "+format, args...)
	}
	switch {
	case pw && app:
		return bad("give %s/%s or %s/%s, not both", SecretUsername, SecretPassword,
			SecretApplicationCredentialID, SecretApplicationCredentialSecret)
	case app:
		if m := agentkit.Missing(sec, SecretApplicationCredentialID, SecretApplicationCredentialSecret); len(m) > 0 {
			return bad("application credential auth: %s missing", strings.Join(m, ", "))
		}
		return gophercloud.AuthOptions{
			IdentityEndpoint:            authURL,
			ApplicationCredentialID:     sec[SecretApplicationCredentialID],
			ApplicationCredentialSecret: sec[SecretApplicationCredentialSecret],
		}, "the secret (application credential)", nil
	case pw:
		m := agentkit.Missing(sec, SecretUsername, SecretPassword)
		if sec[SecretProjectName] == "" && sec[SecretProjectID] == "" {
			m = append(m, SecretProjectName+" (or "+SecretProjectID+")")
		}
		if len(m) > 0 {
			return bad("password auth: %s missing", strings.Join(m, ", "))
		}
		userDomain := orDefault(sec[SecretUserDomainName], "Default")
		scope := &gophercloud.AuthScope{ProjectID: sec[SecretProjectID]}
		if scope.ProjectID == "" {
			scope.ProjectName = sec[SecretProjectName]
			scope.DomainName = orDefault(sec[SecretProjectDomainName], "Default")
		}
		return gophercloud.AuthOptions{
			IdentityEndpoint: authURL,
			Username:         sec[SecretUsername],
			Password:         sec[SecretPassword],
			DomainName:       userDomain,
			Scope:            scope,
		}, "the secret (password)", nil
	}
	return bad("no openstack credentials: give %s, %s and %s, or %s and %s", SecretUsername, SecretPassword,
		SecretProjectName, SecretApplicationCredentialID, SecretApplicationCredentialSecret)
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// novaServer is one Nova server.
type novaServer struct {
	compute *gophercloud.ServiceClient
	id      string
	region  string
}

func (n *novaServer) name() string {
	if n.region == "" {
		return "openstack server " + n.id
	}
	return fmt.Sprintf("openstack server %s in %s", n.id, n.region)
}

// stopVerb: Nova's os-stop lets the guest shut down for up to the compute host's
// shutdown_timeout (60s by default), then powers it off.
func (n *novaServer) stopVerb() string { return "stop (os-stop)" }

func (n *novaServer) read(ctx context.Context) (observation, error) {
	srv, err := servers.Get(ctx, n.compute, n.id).Extract()
	if err != nil {
		return observation{}, err
	}
	return novaObservation(srv.Status, srv.TaskState), nil
}

// novaObservation maps a server status. Only SHUTOFF and the shelved states, where
// no guest runs, are off; a paused or suspended guest can resume, so it is on.
func novaObservation(status, task string) observation {
	o := observation{raw: status, power: plugin.StateUnknown, transitional: task != ""}
	if task != "" {
		o.raw = fmt.Sprintf("%s (task %s)", status, task)
	}
	switch strings.ToUpper(status) {
	case "SHUTOFF", "SHELVED", "SHELVED_OFFLOADED":
		o.power = plugin.StateOff
	case "ACTIVE", "PAUSED", "SUSPENDED", "RESCUE", "REBOOT", "HARD_REBOOT", "MIGRATING",
		"RESIZE", "VERIFY_RESIZE", "REVERT_RESIZE", "PASSWORD":
		o.power = plugin.StateOn
	case "BUILD":
		o.power, o.transitional = plugin.StateOn, true
	}
	return o
}

func (n *novaServer) stop(ctx context.Context) error {
	return servers.Stop(ctx, n.compute, n.id).ExtractErr()
}

func (n *novaServer) start(ctx context.Context) error {
	return servers.Start(ctx, n.compute, n.id).ExtractErr()
}

func (n *novaServer) lock(ctx context.Context) error {
	return servers.Lock(ctx, n.compute, n.id).ExtractErr()
}

func (n *novaServer) unlock(ctx context.Context) error {
	return servers.Unlock(ctx, n.compute, n.id).ExtractErr()
}

func (n *novaServer) classify(err error) apiError {
	var ue gophercloud.ErrUnexpectedResponseCode
	if !errors.As(err, &ue) {
		return classifyTransport(err)
	}
	// The body of an error answer may be long and may echo the request; keep the
	// status and the start of the body.
	msg := fmt.Sprintf("%s %s: http %d: %s", ue.Method, ue.URL, ue.Actual, truncate(strings.TrimSpace(string(ue.Body)), 200))
	switch code := ue.Actual; {
	case code == http.StatusConflict:
		return apiError{kind: plugin.KindRetryable, conflict: true, msg: msg}
	case code == http.StatusTooManyRequests || code >= 500:
		return apiError{kind: plugin.KindRetryable, retry: true, msg: msg}
	case code == http.StatusNotFound:
		return apiError{kind: plugin.KindPermanent, msg: "not found: " + msg}
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		return apiError{kind: plugin.KindPermanent, msg: "credentials rejected: " + msg}
	case code >= 400:
		return apiError{kind: plugin.KindPermanent, msg: msg}
	}
	return apiError{kind: plugin.KindRetryable, msg: msg}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
