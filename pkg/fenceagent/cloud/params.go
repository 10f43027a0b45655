package cloud

import (
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/kubefence/kubefence/pkg/fenceagent/internal/agentkit"
	"github.com/kubefence/kubefence/pkg/plugin"
)

// Parameter names, as Describe announces them.
const (
	ParamRegion         = "region"
	ParamEndpoint       = "endpoint"
	ParamAuthURL        = "authURL"
	ParamInterface      = "interface"
	ParamLock           = "lock"
	ParamRefuseSelf     = "refuseSelf"
	ParamSelfInstanceID = "selfInstanceID"
	ParamVerifyTimeout  = "verifyTimeout"
	ParamPollInterval   = "pollInterval"
)

// Secret names. AWS and OpenStack secrets may share one agent Secret; each provider
// reads only its own.
const (
	SecretAccessKeyID                 = "accessKeyID"
	SecretSecretAccessKey             = "secretAccessKey"
	SecretSessionToken                = "sessionToken"
	SecretAuthURL                     = "authURL"
	SecretUsername                    = "username"
	SecretPassword                    = "password"
	SecretProjectName                 = "projectName"
	SecretProjectID                   = "projectID"
	SecretUserDomainName              = "userDomainName"
	SecretProjectDomainName           = "projectDomainName"
	SecretApplicationCredentialID     = "applicationCredentialID"
	SecretApplicationCredentialSecret = "applicationCredentialSecret"
)

// params is what one call needs besides its provider's credentials.
type params struct {
	region         string
	endpoint       string
	authURL        string
	iface          string
	lock           bool
	refuseSelf     bool
	selfInstanceID string
	// verifyTimeout bounds polling for the requested state; the call's deadline may end it sooner.
	verifyTimeout time.Duration
	pollInterval  time.Duration
}

var paramSpecs = []plugin.Param{
	{Name: ParamRegion, Type: plugin.ParamString,
		Description: "AWS: region, instead of the one derived from the zone in the providerID; OpenStack: region of the compute endpoint"},
	{Name: ParamEndpoint, Type: plugin.ParamString,
		Description: "AWS: EC2 endpoint URL, for partitions such as GovCloud or for tests; default: the SDK's endpoint for the region"},
	{Name: ParamAuthURL, Type: plugin.ParamString,
		Description: "OpenStack: identity (Keystone) URL; may instead be given in the secret"},
	{Name: ParamInterface, Type: plugin.ParamString, Default: "public",
		Description: "OpenStack: endpoint interface of the compute service: public, internal or admin"},
	{Name: ParamLock, Type: plugin.ParamBool, Default: "false",
		Description: "OpenStack: lock the server after it is verified SHUTOFF so nobody else starts it; unfence unlocks it"},
	{Name: ParamRefuseSelf, Type: plugin.ParamBool, Default: "false",
		Description: "AWS: refuse to stop the instance the agent runs on (selfInstanceID, else the instance metadata service)"},
	{Name: ParamSelfInstanceID, Type: plugin.ParamString,
		Description: "AWS: ID of the instance the agent runs on, for refuseSelf"},
	{Name: ParamVerifyTimeout, Type: plugin.ParamDuration, Default: "3m",
		Description: "how long to poll for the requested instance state; not reaching it (or the call's deadline) fails the call"},
	{Name: ParamPollInterval, Type: plugin.ParamDuration, Default: "2s",
		Description: "pause between instance state reads while verifying"},
	{Name: SecretAccessKeyID, Type: plugin.ParamString, Secret: true,
		Description: "AWS access key ID; without it the default credential chain (IRSA, instance profile) is used"},
	{Name: SecretSecretAccessKey, Type: plugin.ParamString, Secret: true, Description: "AWS secret access key"},
	{Name: SecretSessionToken, Type: plugin.ParamString, Secret: true, Description: "AWS session token of temporary credentials"},
	{Name: SecretUsername, Type: plugin.ParamString, Secret: true, Description: "OpenStack user name (password auth)"},
	{Name: SecretPassword, Type: plugin.ParamString, Secret: true, Description: "OpenStack password"},
	{Name: SecretProjectName, Type: plugin.ParamString, Secret: true, Description: "OpenStack project name (password auth)"},
	{Name: SecretProjectID, Type: plugin.ParamString, Secret: true, Description: "OpenStack project ID, instead of projectName"},
	{Name: SecretUserDomainName, Type: plugin.ParamString, Secret: true, Description: "OpenStack user domain name; default Default"},
	{Name: SecretProjectDomainName, Type: plugin.ParamString, Secret: true, Description: "OpenStack project domain name; default Default"},
	{Name: SecretApplicationCredentialID, Type: plugin.ParamString, Secret: true,
		Description: "OpenStack application credential ID, instead of user name and password"},
	{Name: SecretApplicationCredentialSecret, Type: plugin.ParamString, Secret: true, Description: "OpenStack application credential secret"},
}

// secretAuthURL is also accepted in the secret, as in a clouds.yaml auth section.
var knownSecrets = func() map[string]bool {
	m := map[string]bool{SecretAuthURL: true}
	for _, s := range paramSpecs {
		if s.Secret {
			m[s.Name] = true
		}
	}
	return m
}()

// parseParams applies defaults and parses the non-secret params, returning every problem
// as one permanent error that names each bad parameter.
func parseParams(in map[string]string) (params, error) {
	r := agentkit.NewReader(paramSpecs, in)
	r.CheckNames(nil)
	p := params{
		region:         r.String(ParamRegion),
		endpoint:       r.String(ParamEndpoint),
		authURL:        r.String(ParamAuthURL),
		iface:          r.String(ParamInterface),
		selfInstanceID: r.String(ParamSelfInstanceID),
	}
	if p.endpoint != "" {
		if err := checkURL(p.endpoint); err != nil {
			r.Errorf(ParamEndpoint, "%v", err)
		}
	}
	if p.authURL != "" {
		if err := checkURL(p.authURL); err != nil {
			r.Errorf(ParamAuthURL, "%v", err)
		}
	}
	switch p.iface {
	case "public", "internal", "admin":
	default:
		r.Errorf(ParamInterface, "%q is not public, internal or admin", p.iface)
	}
	p.lock = r.Bool(ParamLock)
	p.refuseSelf = r.Bool(ParamRefuseSelf)
	p.verifyTimeout = r.PositiveDuration(ParamVerifyTimeout)
	p.pollInterval = r.PositiveDuration(ParamPollInterval)
	r.NotLonger(ParamPollInterval, p.pollInterval, ParamVerifyTimeout, p.verifyTimeout)
	return agentkit.Parsed(r, p)
}

// checkSecretNames rejects secret keys this agent does not know, so that a misspelt key
// ("accessKeyId") fails loudly instead of falling back to other credentials. Only names
// appear in the error, never values.
func checkSecretNames(secrets map[string]string) error {
	var unknown []string
	for _, k := range slices.Sorted(maps.Keys(secrets)) {
		if !knownSecrets[k] {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		return plugin.Errorf(plugin.KindPermanent, "secret: unknown key(s) %s", strings.Join(unknown, ", "))
	}
	return nil
}

func checkURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("%q is not a URL", raw)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%q is not an http(s) URL with a host", raw)
	}
	return nil
}
