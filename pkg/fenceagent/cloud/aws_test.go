package cloud

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/kubefence/kubefence/pkg/internal/fixture"
	"github.com/kubefence/kubefence/pkg/plugin"
)

// These tests run the agent against a real moto_server and read the outcome from moto
// with their own client, never from the agent's answer.

func TestAWSFenceOffStopsRunningInstance(t *testing.T) {
	url := moto(t)
	c := ec2Client(url, "us-east-1")
	id := runInstance(t, c)
	if st := observe(t, c, id); st != types.InstanceStateNameRunning {
		t.Fatalf("new instance is %s, want running", st)
	}
	res, err := testAgent().Fence(fixture.CallCtx(t, 30*time.Second), awsRequest(url, "us-east-1a", id), plugin.ActionOff)
	if err != nil {
		t.Fatalf("fence off: %v (evidence %q)", err, res.Evidence)
	}
	if res.State != plugin.StateOff {
		t.Errorf("result state %q, want off", res.State)
	}
	if st := observe(t, c, id); st != types.InstanceStateNameStopped {
		t.Errorf("moto says %s after fence off, want stopped", st)
	}
	for _, want := range []string{"sent force stop", "verified off", id} {
		if !strings.Contains(res.Evidence, want) {
			t.Errorf("evidence %q lacks %q", res.Evidence, want)
		}
	}
}

func TestAWSFenceOffWhenAlreadyOff(t *testing.T) {
	cases := map[string]struct {
		prepare      func(ctx context.Context, c *ec2.Client, id string) error
		wantEvidence string
		wantMoto     types.InstanceStateName
	}{
		"stopped": {
			prepare: func(ctx context.Context, c *ec2.Client, id string) error {
				_, err := c.StopInstances(ctx, &ec2.StopInstancesInput{InstanceIds: []string{id}})
				return err
			},
			wantEvidence: "already off, nothing sent",
			wantMoto:     types.InstanceStateNameStopped,
		},
		"terminated": {
			prepare: func(ctx context.Context, c *ec2.Client, id string) error {
				_, err := c.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{id}})
				return err
			},
			wantEvidence: "terminated, which is off for good",
			wantMoto:     types.InstanceStateNameTerminated,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			url := moto(t)
			c := ec2Client(url, "us-east-1")
			id := runInstance(t, c)
			mustDo(t, "prepare", tc.prepare(fixture.CallCtx(t, 10*time.Second), c, id))
			res, err := testAgent().Fence(fixture.CallCtx(t, 30*time.Second), awsRequest(url, "us-east-1c", id), plugin.ActionOff)
			if err != nil {
				t.Fatalf("fence off: %v", err)
			}
			if res.State != plugin.StateOff || !strings.Contains(res.Evidence, tc.wantEvidence) {
				t.Errorf("result %+v, want off with evidence %q", res, tc.wantEvidence)
			}
			if st := observe(t, c, id); st != tc.wantMoto {
				t.Errorf("moto says %s, want %s", st, tc.wantMoto)
			}
		})
	}
}

func TestAWSUnknownInstanceIsPermanent(t *testing.T) {
	url := moto(t)
	res, err := testAgent().Fence(fixture.CallCtx(t, 30*time.Second), awsRequest(url, "us-east-1a", "i-0123456789abcdef0"), plugin.ActionOff)
	if err == nil {
		t.Fatalf("fence of an unknown instance succeeded: %+v", res)
	}
	if k := plugin.KindOf(err); k != plugin.KindPermanent {
		t.Errorf("kind %s, want %s (%v)", k, plugin.KindPermanent, err)
	}
	if !strings.Contains(err.Error(), "InvalidInstanceID.NotFound") || res.State != plugin.StateUnknown {
		t.Errorf("error %q, state %q: want InvalidInstanceID.NotFound and unknown", err, res.State)
	}
}

func TestAWSWrongCredentialShape(t *testing.T) {
	cases := map[string]struct {
		secrets   map[string]string
		wantField string
	}{
		"secret key missing":   {map[string]string{SecretAccessKeyID: testAccessKeyID}, SecretSecretAccessKey},
		"access key missing":   {map[string]string{SecretSecretAccessKey: testSecretAccessKey}, SecretAccessKeyID},
		"token alone":          {map[string]string{SecretSessionToken: "tokentokentoken"}, SecretAccessKeyID},
		"access key lowercase": {map[string]string{SecretAccessKeyID: "akiamototestkey00001", SecretSecretAccessKey: testSecretAccessKey}, SecretAccessKeyID},
		"secret key spaces":    {map[string]string{SecretAccessKeyID: testAccessKeyID, SecretSecretAccessKey: "has a space in it"}, SecretSecretAccessKey},
		"misspelt key":         {map[string]string{"accessKeyId": testAccessKeyID, SecretSecretAccessKey: testSecretAccessKey}, "accessKeyId"},
	}
	url := moto(t)
	c := ec2Client(url, "us-east-1")
	id := runInstance(t, c)
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			req := awsRequest(url, "us-east-1a", id)
			req.Secrets = tc.secrets
			_, err := testAgent().Fence(fixture.CallCtx(t, 10*time.Second), req, plugin.ActionOff)
			if err == nil || plugin.KindOf(err) != plugin.KindPermanent || !strings.Contains(err.Error(), tc.wantField) {
				t.Fatalf("fence = %v, want a permanent error naming %s", err, tc.wantField)
			}
			for _, v := range tc.secrets {
				if strings.Contains(err.Error(), v) {
					t.Errorf("error %q leaks a secret value", err)
				}
			}
			if st := observe(t, c, id); st != types.InstanceStateNameRunning {
				t.Errorf("moto says %s after a refused call, want running", st)
			}
		})
	}
}

// moto keeps instances per region, so fencing finds the instance only in its own region.
func TestAWSRegion(t *testing.T) {
	cases := map[string]struct {
		zone   string
		params map[string]string
	}{
		"from zone":          {zone: "eu-west-1b"},
		"from local zone":    {zone: "eu-west-1-lax-1a"},
		"parameter override": {zone: "us-east-1a", params: map[string]string{ParamRegion: "eu-west-1"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			url := moto(t)
			c := ec2Client(url, "eu-west-1")
			id := runInstance(t, c)
			req := awsRequest(url, tc.zone, id)
			for k, v := range tc.params {
				req.Params[k] = v
			}
			res, err := testAgent().Fence(fixture.CallCtx(t, 30*time.Second), req, plugin.ActionOff)
			if err != nil {
				t.Fatalf("fence off: %v", err)
			}
			if !strings.Contains(res.Evidence, "in eu-west-1") {
				t.Errorf("evidence %q does not name region eu-west-1", res.Evidence)
			}
			if st := observe(t, c, id); st != types.InstanceStateNameStopped {
				t.Errorf("moto says %s, want stopped", st)
			}
		})
	}
}

func TestAWSUnfenceStartsInstance(t *testing.T) {
	url := moto(t)
	c := ec2Client(url, "us-east-1")
	id := runInstance(t, c)
	a := testAgent()
	req := awsRequest(url, "us-east-1a", id)
	if _, err := a.Fence(fixture.CallCtx(t, 30*time.Second), req, plugin.ActionOff); err != nil {
		t.Fatalf("fence off: %v", err)
	}
	st, err := a.Status(fixture.CallCtx(t, 10*time.Second), req)
	if err != nil || st.State != plugin.StateOff {
		t.Fatalf("status after off = %+v, %v; want off", st, err)
	}
	res, err := a.Unfence(fixture.CallCtx(t, 30*time.Second), req)
	if err != nil || res.State != plugin.StateOn {
		t.Fatalf("unfence = %+v, %v; want on", res, err)
	}
	if st := observe(t, c, id); st != types.InstanceStateNameRunning {
		t.Errorf("moto says %s after unfence, want running", st)
	}
	st, err = a.Status(fixture.CallCtx(t, 10*time.Second), req)
	if err != nil || st.State != plugin.StateOn {
		t.Errorf("status after unfence = %+v, %v; want on", st, err)
	}
}

func TestAWSRebootStopsThenStarts(t *testing.T) {
	url := moto(t)
	c := ec2Client(url, "us-east-1")
	id := runInstance(t, c)
	res, err := testAgent().Fence(fixture.CallCtx(t, 30*time.Second), awsRequest(url, "us-east-1a", id), plugin.ActionReboot)
	if err != nil || res.State != plugin.StateOn {
		t.Fatalf("reboot = %+v, %v; want on", res, err)
	}
	if !strings.Contains(res.Evidence, "verified off") || !strings.Contains(res.Evidence, "verified on") {
		t.Errorf("evidence %q: want off verified, then on", res.Evidence)
	}
	if st := observe(t, c, id); st != types.InstanceStateNameRunning {
		t.Errorf("moto says %s after reboot, want running", st)
	}
}

func TestAWSRefuseSelf(t *testing.T) {
	url := moto(t)
	c := ec2Client(url, "us-east-1")
	id := runInstance(t, c)
	cases := map[string]struct {
		self      string
		selfFunc  SelfFunc
		wantError string
	}{
		"selfInstanceID names the target": {self: id, wantError: "runs on"},
		"metadata names the target": {
			selfFunc:  func(context.Context) (string, error) { return id, nil },
			wantError: "runs on",
		},
		"self unknown": {wantError: ParamSelfInstanceID},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var opts []Option
			if tc.selfFunc != nil {
				opts = append(opts, WithSelf(tc.selfFunc))
			}
			req := awsRequest(url, "us-east-1a", id)
			req.Params[ParamRefuseSelf] = "true"
			if tc.self != "" {
				req.Params[ParamSelfInstanceID] = tc.self
			}
			_, err := testAgent(opts...).Fence(fixture.CallCtx(t, 10*time.Second), req, plugin.ActionOff)
			if err == nil || plugin.KindOf(err) != plugin.KindPermanent || !strings.Contains(err.Error(), tc.wantError) {
				t.Fatalf("fence = %v, want a permanent error containing %q", err, tc.wantError)
			}
			if st := observe(t, c, id); st != types.InstanceStateNameRunning {
				t.Errorf("moto says %s after a refused fence, want running", st)
			}
		})
	}
	t.Run("another instance", func(t *testing.T) {
		req := awsRequest(url, "us-east-1a", id)
		req.Params[ParamRefuseSelf] = "true"
		req.Params[ParamSelfInstanceID] = "i-0fffffffffffffff0"
		if _, err := testAgent().Fence(fixture.CallCtx(t, 30*time.Second), req, plugin.ActionOff); err != nil {
			t.Fatalf("fence of another instance: %v", err)
		}
		if st := observe(t, c, id); st != types.InstanceStateNameStopped {
			t.Errorf("moto says %s, want stopped", st)
		}
	})
}

func TestAWSStatusMapsStates(t *testing.T) {
	url := moto(t)
	c := ec2Client(url, "us-east-1")
	id := runInstance(t, c)
	a := testAgent()
	req := awsRequest(url, "us-east-1a", id)
	steps := []struct {
		act  func(ctx context.Context) error
		want plugin.PowerState
	}{
		{func(context.Context) error { return nil }, plugin.StateOn},
		{func(ctx context.Context) error {
			_, err := c.StopInstances(ctx, &ec2.StopInstancesInput{InstanceIds: []string{id}})
			return err
		}, plugin.StateOff},
		{func(ctx context.Context) error {
			_, err := c.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{id}, DryRun: aws.Bool(false)})
			return err
		}, plugin.StateOff},
	}
	for i, s := range steps {
		mustDo(t, "prepare", s.act(fixture.CallCtx(t, 10*time.Second)))
		res, err := a.Status(fixture.CallCtx(t, 10*time.Second), req)
		if err != nil || res.State != s.want {
			t.Errorf("step %d: status = %+v, %v; want %s", i, res, err, s.want)
		}
	}
}

// An instance with stop protection cannot be fenced by stopping: a permanent error,
// and the instance is left running.
func TestAWSStopProtectionIsPermanent(t *testing.T) {
	url := moto(t)
	c := ec2Client(url, "us-east-1")
	id := runInstance(t, c)
	_, err := c.ModifyInstanceAttribute(fixture.CallCtx(t, 10*time.Second), &ec2.ModifyInstanceAttributeInput{
		InstanceId: aws.String(id), DisableApiStop: &types.AttributeBooleanValue{Value: aws.Bool(true)},
	})
	mustDo(t, "enable stop protection", err)
	res, err := testAgent().Fence(fixture.CallCtx(t, 10*time.Second), awsRequest(url, "us-east-1a", id), plugin.ActionOff)
	if err == nil || plugin.KindOf(err) != plugin.KindPermanent || !strings.Contains(err.Error(), "OperationNotPermitted") {
		t.Fatalf("fence = %+v, %v; want a permanent OperationNotPermitted", res, err)
	}
	if res.State != plugin.StateOn {
		t.Errorf("result state %s, want on (the last state read)", res.State)
	}
	if st := observe(t, c, id); st != types.InstanceStateNameRunning {
		t.Errorf("moto says %s, want running", st)
	}
}
