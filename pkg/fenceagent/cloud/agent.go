package cloud

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/kubefence/kubefence/pkg/fenceagent/internal/agentkit"
	"github.com/kubefence/kubefence/pkg/plugin"
)

// Name is the agent name Describe reports.
const Name = "cloud"

// CredentialsFunc returns AWS credentials when the request's secret holds none:
// the default chain (IRSA, instance profile) in production, a fake in tests.
type CredentialsFunc func(ctx context.Context, region string) (aws.CredentialsProvider, error)

// SelfFunc returns the ID of the instance the agent runs on, for refuseSelf.
type SelfFunc func(ctx context.Context) (string, error)

// Agent fences nodes by stopping their cloud instance through the cloud's API. It keeps
// no state between calls, so calls for different targets may run at once.
type Agent struct {
	// Base gives the agent its Describe.
	agentkit.Base
	// Validator gives it Validate: the non-secret params, checked without calling any
	// cloud API.
	agentkit.Validator[params]
	defaultCredentials CredentialsFunc
	self               SelfFunc
}

// Option configures an Agent.
type Option func(*Agent)

// WithVersion sets the version Describe reports.
func WithVersion(v string) Option { return func(a *Agent) { a.SetVersion(v) } }

// WithDefaultCredentials replaces the AWS default credential chain, used when a request
// carries no access key. Tests use it so that nothing is read from the environment.
func WithDefaultCredentials(f CredentialsFunc) Option {
	return func(a *Agent) { a.defaultCredentials = f }
}

// WithSelf replaces how the agent learns its own instance ID when refuseSelf is set
// without selfInstanceID (default: the EC2 instance metadata service).
func WithSelf(f SelfFunc) Option { return func(a *Agent) { a.self = f } }

// New returns a cloud agent.
func New(opts ...Option) *Agent {
	a := &Agent{
		Base:               agentkit.NewBase(Name, agentkit.PowerActions, paramSpecs),
		Validator:          parseParams,
		defaultCredentials: defaultChain,
		self:               selfFromIMDS,
	}
	return agentkit.Apply(a, opts)
}

var _ plugin.Agent = (*Agent)(nil)

// Fence stops, starts, or stops-then-starts the target instance, and succeeds only
// when it has read the resulting state back from the cloud. Already being in the
// state is success; a terminated instance counts as off. With lock=true an off locks
// the OpenStack server once it is verified off, and an on unlocks it first.
func (a *Agent) Fence(ctx context.Context, req plugin.Request, action plugin.Action) (plugin.Result, error) {
	if err := a.Supports(action); err != nil {
		return agentkit.Unknown(), err
	}
	s, err := a.open(ctx, req, action)
	if err != nil {
		return s.result(), err
	}
	err = agentkit.Power(ctx, s, action)
	return s.Result(s.state), err
}

// Status reads the instance state once and maps it to on, off or unknown.
func (a *Agent) Status(ctx context.Context, req plugin.Request) (plugin.Result, error) {
	s, err := a.open(ctx, req, plugin.ActionOn)
	if err != nil {
		return s.result(), err
	}
	_, err = s.read(ctx)
	return s.Result(s.state), err
}

// Unfence starts the instance and verifies it is running; with lock=true it first
// unlocks an OpenStack server.
func (a *Agent) Unfence(ctx context.Context, req plugin.Request) (plugin.Result, error) {
	return a.Fence(ctx, req, plugin.ActionOn)
}

// open parses the request and connects to the provider its target names.
func (a *Agent) open(ctx context.Context, req plugin.Request, action plugin.Action) (*session, error) {
	p, err := parseParams(req.Params)
	if err != nil {
		return nil, err
	}
	if err := checkSecretNames(req.Secrets); err != nil {
		return nil, err
	}
	t, err := parseTarget(req.Target)
	if err != nil {
		return nil, err
	}
	s := &session{Evidence: agentkit.NewEvidence(agentkit.Values(req.Secrets)...), p: p, state: plugin.StateUnknown}
	// The instance proves it is the node's before any API is called: the target may
	// come from an annotation or a template, the expected ID from the providerID.
	if err := instanceIdentity.Check(&s.Evidence, t.id, expectedInstance(req.ExpectIdentity)); err != nil {
		return s, err
	}
	switch t.provider {
	case providerAWS:
		err = a.openAWS(ctx, s, t, req, action)
	case providerOpenStack:
		err = openOpenStack(ctx, s, t, req)
	}
	if err != nil {
		return nil, err
	}
	return s, nil
}

const (
	providerAWS       = "aws"
	providerOpenStack = "openstack"
)

// target is a parsed providerID.
type target struct {
	provider string
	// zone is the AWS availability zone; for OpenStack, the optional region in the host part.
	zone string
	id   string
}

var (
	awsInstanceID = regexp.MustCompile(`^i-[0-9a-f]{8,17}$`)
	awsZone       = regexp.MustCompile(`^[a-z]{2}(?:-[a-z]+)+-\d+[a-z0-9-]*$`)
	awsRegion     = regexp.MustCompile(`^[a-z]{2}(?:-[a-z]+)+-\d+`)
)

// parseTarget reads a node's providerID: aws:///<zone>/<instance-id> or
// openstack:///<server-id> (openstack://<region>/<server-id> also).
func parseTarget(providerID string) (target, error) {
	bad := func(why string) error {
		return plugin.Errorf(plugin.KindPermanent,
			"target %q: %s; want aws:///<zone>/<instance-id> or openstack:///<server-id>", providerID, why)
	}
	scheme, rest, ok := strings.Cut(strings.TrimSpace(providerID), "://")
	if !ok {
		return target{}, bad("not a providerID")
	}
	host, path, _ := strings.Cut(rest, "/")
	switch scheme {
	case providerAWS:
		zone, id, ok := strings.Cut(path, "/")
		if !ok || host != "" {
			return target{}, bad("not aws:///<zone>/<instance-id>")
		}
		if !awsZone.MatchString(zone) {
			return target{}, bad(fmt.Sprintf("%q is not an availability zone", zone))
		}
		if !awsInstanceID.MatchString(id) {
			return target{}, bad(fmt.Sprintf("%q is not an instance ID", id))
		}
		return target{provider: providerAWS, zone: zone, id: id}, nil
	case providerOpenStack:
		if path == "" || strings.ContainsAny(path, "/?#") {
			return target{}, bad("not openstack:///<server-id>")
		}
		return target{provider: providerOpenStack, zone: host, id: path}, nil
	}
	return target{}, bad(fmt.Sprintf("unknown provider %q", scheme))
}

// instanceIdentity compares the instance a call acts on with the node's providerID.
var instanceIdentity = agentkit.Identity{
	Device: "instance", Node: "the node's providerID instance",
	Same: func(got, want string) (string, bool) { return "same ID", strings.EqualFold(got, want) },
}

// expectedInstance is the instance ID the node reports: its providerID's, or the
// expectation itself when it is a bare ID.
func expectedInstance(expect string) string {
	expect = strings.TrimSpace(expect)
	if t, err := parseTarget(expect); err == nil {
		return t.id
	}
	return expect
}

// result is what a call that stopped in open observed: nothing, or the identity read.
func (s *session) result() plugin.Result {
	if s == nil {
		return agentkit.Unknown()
	}
	return s.Result(s.state)
}

// regionOf derives the region from an availability zone: us-east-1a → us-east-1,
// us-west-2-lax-1a (a Local Zone) → us-west-2.
func regionOf(zone string) string { return awsRegion.FindString(zone) }
