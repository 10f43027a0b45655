package cloud

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"regexp"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"

	"github.com/kubefence/kubefence/pkg/fenceagent/internal/agentkit"
	"github.com/kubefence/kubefence/pkg/plugin"
)

// selfTimeout bounds the instance metadata lookup of refuseSelf; off EC2 nothing answers.
const selfTimeout = 3 * time.Second

var accessKeyIDShape = regexp.MustCompile(`^[A-Z0-9]{16,128}$`)

// EC2 error codes, sorted by what the agent does about them.
var (
	ec2Permanent = map[string]bool{
		"InvalidInstanceID.NotFound": true, "InvalidInstanceID.Malformed": true,
		"AuthFailure": true, "UnauthorizedOperation": true, "InvalidClientTokenId": true,
		"SignatureDoesNotMatch": true, "IncompleteSignature": true, "MissingAuthenticationToken": true,
		"InvalidAccessKeyId": true, "ExpiredToken": true, "OptInRequired": true, "Blocked": true,
		"UnsupportedOperation": true, "OperationNotPermitted": true, "InvalidParameterValue": true,
		"InvalidParameterCombination": true,
	}
	ec2Retry = map[string]bool{
		"RequestLimitExceeded": true, "Throttling": true, "ThrottlingException": true,
		"RequestThrottled": true, "TooManyRequestsException": true, "InternalError": true,
		"InternalFailure": true, "ServiceUnavailable": true, "Unavailable": true,
		"InsufficientInstanceCapacity": true,
	}
	ec2Conflict = map[string]bool{"IncorrectInstanceState": true, "IncorrectState": true}
)

// openAWS sets s up for the EC2 instance t names.
func (a *Agent) openAWS(ctx context.Context, s *session, t target, req plugin.Request, action plugin.Action) error {
	region := s.p.region
	if region == "" {
		region = regionOf(t.zone)
	}
	if region == "" {
		return plugin.Errorf(plugin.KindPermanent, "%s: cannot derive it from zone %q; set the parameter", ParamRegion, t.zone)
	}
	if action != plugin.ActionOn && s.p.refuseSelf {
		if err := a.refuseSelf(ctx, s.p, t.id); err != nil {
			return err
		}
	}
	creds, how, err := a.awsCredentials(ctx, req.Secrets, region)
	if err != nil {
		return err
	}
	cfg := aws.Config{
		Region:      region,
		Credentials: creds,
		// The session retries, within the call's deadline; the SDK's own retries
		// would hide throttling from the evidence and outlive the deadline.
		Retryer: func() aws.Retryer { return aws.NopRetryer{} },
	}
	client := ec2.NewFromConfig(cfg, func(o *ec2.Options) {
		if s.p.endpoint != "" {
			o.BaseEndpoint = aws.String(s.p.endpoint)
		}
	})
	s.inst = &ec2Instance{client: client, id: t.id, region: region}
	where := "the default endpoint"
	if s.p.endpoint != "" {
		where = s.p.endpoint
	}
	s.Note("%s node %q via %s, credentials from %s", s.inst.name(), req.Node, where, how)
	return nil
}

// awsCredentials returns static credentials from the secret, or the default chain
// when the secret holds no AWS key. Errors name fields, never values.
func (a *Agent) awsCredentials(ctx context.Context, secrets map[string]string, region string) (aws.CredentialsProvider, string, error) {
	id, key, token := secrets[SecretAccessKeyID], secrets[SecretSecretAccessKey], secrets[SecretSessionToken]
	if id == "" && key == "" && token == "" {
		creds, err := a.defaultCredentials(ctx, region)
		if err != nil {
			return nil, "", plugin.Errorf(plugin.KindPermanent, "default aws credential chain: %s", agentkit.Scrub(err.Error(), agentkit.Values(secrets)...))
		}
		return creds, "the default chain", nil
	}
	var errs []string
	switch {
	case id == "":
		errs = append(errs, SecretAccessKeyID+" is missing")
	case !accessKeyIDShape.MatchString(id):
		errs = append(errs, SecretAccessKeyID+" is not 16-128 upper-case letters and digits")
	}
	switch {
	case key == "":
		errs = append(errs, SecretSecretAccessKey+" is missing")
	case strings.TrimSpace(key) != key || strings.ContainsAny(key, " \t\r\n"):
		errs = append(errs, SecretSecretAccessKey+" contains white space")
	}
	if len(errs) > 0 {
		return nil, "", plugin.Errorf(plugin.KindPermanent, "secret: %s", strings.Join(errs, "; "))
	}
	how := "the secret (static key)"
	if token != "" {
		how = "the secret (temporary key with session token)"
	}
	return credentials.NewStaticCredentialsProvider(id, key, token), how, nil
}

// refuseSelf fails when id is the instance the agent runs on. Not knowing which that is
// fails too: the guard was asked for, so it does not silently let the call through.
func (a *Agent) refuseSelf(ctx context.Context, p params, id string) error {
	self := p.selfInstanceID
	if self == "" {
		var err error
		if self, err = a.self(ctx); err != nil {
			return plugin.Errorf(plugin.KindPermanent, "%s: cannot learn the instance this agent runs on (%v); set %s",
				ParamRefuseSelf, err, ParamSelfInstanceID)
		}
	}
	if self == id {
		return plugin.Errorf(plugin.KindPermanent, "refuse to fence instance %s: it is the instance this agent runs on (%s)", id, ParamRefuseSelf)
	}
	return nil
}

// defaultChain is the SDK's default credential chain: environment, shared files,
// web identity (IRSA), container and instance roles.
func defaultChain(ctx context.Context, region string) (aws.CredentialsProvider, error) {
	cfg, err := config.LoadDefaultConfig(ctx, config.WithRegion(region))
	if err != nil {
		return nil, fmt.Errorf("load aws config: %w", err)
	}
	if cfg.Credentials == nil {
		return nil, errors.New("no credentials found")
	}
	return cfg.Credentials, nil
}

// selfFromIMDS asks the EC2 instance metadata service for this instance's ID.
func selfFromIMDS(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, selfTimeout)
	defer cancel()
	out, err := imds.New(imds.Options{}).GetMetadata(ctx, &imds.GetMetadataInput{Path: "instance-id"})
	if err != nil {
		return "", fmt.Errorf("instance metadata: %w", err)
	}
	defer out.Content.Close()
	b, err := io.ReadAll(io.LimitReader(out.Content, 256))
	if err != nil {
		return "", fmt.Errorf("instance metadata: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// ec2Instance is one EC2 instance.
type ec2Instance struct {
	client *ec2.Client
	id     string
	region string
}

func (e *ec2Instance) name() string { return fmt.Sprintf("aws instance %s in %s", e.id, e.region) }

func (e *ec2Instance) stopVerb() string { return "force stop" }

func (e *ec2Instance) read(ctx context.Context) (observation, error) {
	out, err := e.client.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{e.id}})
	if err != nil {
		return observation{}, err
	}
	for _, r := range out.Reservations {
		for _, in := range r.Instances {
			if aws.ToString(in.InstanceId) == e.id && in.State != nil {
				return ec2Observation(in.State.Name), nil
			}
		}
	}
	return observation{}, &smithy.GenericAPIError{Code: "InvalidInstanceID.NotFound", Message: "not in the DescribeInstances answer"}
}

// ec2Observation maps an instance state. Only stopped and terminated are off; stopping
// and shutting-down are not off yet, so they are unknown until they settle.
func ec2Observation(name types.InstanceStateName) observation {
	o := observation{raw: string(name), power: plugin.StateUnknown}
	switch name {
	case types.InstanceStateNameRunning:
		o.power = plugin.StateOn
	case types.InstanceStateNamePending:
		o.power, o.transitional = plugin.StateOn, true
	case types.InstanceStateNameStopped:
		o.power = plugin.StateOff
	case types.InstanceStateNameTerminated:
		o.power, o.gone = plugin.StateOff, true
	case types.InstanceStateNameStopping, types.InstanceStateNameShuttingDown:
		o.transitional = true
	}
	return o
}

func (e *ec2Instance) stop(ctx context.Context) error {
	_, err := e.client.StopInstances(ctx, &ec2.StopInstancesInput{InstanceIds: []string{e.id}, Force: aws.Bool(true)})
	return err
}

func (e *ec2Instance) start(ctx context.Context) error {
	_, err := e.client.StartInstances(ctx, &ec2.StartInstancesInput{InstanceIds: []string{e.id}})
	return err
}

func (e *ec2Instance) classify(err error) apiError {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		code := ae.ErrorCode()
		msg := fmt.Sprintf("%s: %s", code, ae.ErrorMessage())
		switch {
		case ec2Conflict[code]:
			return apiError{kind: plugin.KindRetryable, conflict: true, msg: msg}
		case ec2Permanent[code]:
			return apiError{kind: plugin.KindPermanent, msg: msg}
		case ec2Retry[code]:
			return apiError{kind: plugin.KindRetryable, retry: true, msg: msg}
		}
		return apiError{kind: plugin.KindRetryable, msg: msg}
	}
	return classifyTransport(err)
}

// classifyTransport sorts failures that are not API answers: nothing answered, or
// credentials could not be had.
func classifyTransport(err error) apiError {
	msg := err.Error()
	var netErr net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		return apiError{kind: plugin.KindTargetUnreachable, msg: msg}
	case strings.Contains(msg, "retrieve credentials") || strings.Contains(msg, "refresh cached credentials"):
		return apiError{kind: plugin.KindPermanent, msg: msg}
	case errors.As(err, &netErr):
		return apiError{kind: plugin.KindTargetUnreachable, retry: true, msg: msg}
	}
	return apiError{kind: plugin.KindRetryable, retry: true, msg: msg}
}
