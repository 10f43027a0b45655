package cloud

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/kubefence/kubefence/pkg/internal/fixture"
	"github.com/kubefence/kubefence/pkg/plugin"
)

// fakeEC2 serves what moto cannot: throttling, rejected credentials, an instance that
// never stops. It speaks the EC2 query protocol for one instance.
type fakeEC2 struct {
	mu sync.Mutex
	// state is the instance state DescribeInstances reports.
	state string
	// stopTo is the state StopInstances moves the instance to.
	stopTo string
	// throttle answers the next n calls with RequestLimitExceeded; -1 answers all.
	throttle int
	// errCode, if set, answers every call with this error.
	errCode   string
	calls     []string
	authHdrs  []string
	throttled int
}

func newFakeEC2(t *testing.T, f *fakeEC2) string {
	srv := httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(srv.Close)
	return srv.URL
}

func (f *fakeEC2) serve(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	action := r.PostForm.Get("Action")
	id := r.PostForm.Get("InstanceId.1")
	f.calls = append(f.calls, action)
	f.authHdrs = append(f.authHdrs, r.Header.Get("Authorization"))
	w.Header().Set("Content-Type", "text/xml")
	switch {
	case f.errCode != "":
		ec2Error(w, http.StatusUnauthorized, f.errCode, "AWS was not able to validate the provided access credentials")
		return
	case f.throttle != 0:
		if f.throttle > 0 {
			f.throttle--
		}
		f.throttled++
		ec2Error(w, http.StatusServiceUnavailable, "RequestLimitExceeded", "Request limit exceeded.")
		return
	}
	switch action {
	case "DescribeInstances":
		fmt.Fprintf(w, `<DescribeInstancesResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/"><requestId>r</requestId>`+
			`<reservationSet><item><reservationId>r-1</reservationId><instancesSet><item><instanceId>%s</instanceId>`+
			`<instanceState><code>0</code><name>%s</name></instanceState></item></instancesSet></item></reservationSet>`+
			`</DescribeInstancesResponse>`, id, f.state)
	case "StopInstances", "StartInstances":
		prev := f.state
		if action == "StopInstances" {
			f.state = f.stopTo
		} else {
			f.state = "running"
		}
		fmt.Fprintf(w, `<%[1]sResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/"><requestId>r</requestId>`+
			`<instancesSet><item><instanceId>%[2]s</instanceId><currentState><code>0</code><name>%[3]s</name></currentState>`+
			`<previousState><code>0</code><name>%[4]s</name></previousState></item></instancesSet></%[1]sResponse>`,
			action, id, f.state, prev)
	default:
		ec2Error(w, http.StatusBadRequest, "InvalidAction", action)
	}
}

func ec2Error(w http.ResponseWriter, status int, code, msg string) {
	w.WriteHeader(status)
	fmt.Fprintf(w, `<Response><Errors><Error><Code>%s</Code><Message>%s</Message></Error></Errors><RequestID>r</RequestID></Response>`, code, msg)
}

func (f *fakeEC2) snapshot() (state string, calls []string, auth []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.state, append([]string(nil), f.calls...), append([]string(nil), f.authHdrs...)
}

const fakeID = "i-0a1b2c3d4e5f60718"

func TestAWSThrottlingIsRetriedWithinDeadline(t *testing.T) {
	f := &fakeEC2{state: "running", stopTo: "stopped", throttle: 3}
	url := newFakeEC2(t, f)
	res, err := testAgent().Fence(fixture.CallCtx(t, 20*time.Second), awsRequest(url, "us-east-1a", fakeID), plugin.ActionOff)
	if err != nil || res.State != plugin.StateOff {
		t.Fatalf("fence = %+v, %v; want off after retries", res, err)
	}
	if !strings.Contains(res.Evidence, "RequestLimitExceeded") || !strings.Contains(res.Evidence, "retrying") {
		t.Errorf("evidence %q does not show the retries", res.Evidence)
	}
	if st, _, _ := f.snapshot(); st != "stopped" {
		t.Errorf("fake instance is %s, want stopped", st)
	}
}

func TestAWSThrottledUntilDeadlineIsRetryable(t *testing.T) {
	f := &fakeEC2{state: "running", stopTo: "stopped", throttle: -1}
	url := newFakeEC2(t, f)
	start := time.Now()
	res, err := testAgent().Fence(fixture.CallCtx(t, 1500*time.Millisecond), awsRequest(url, "us-east-1a", fakeID), plugin.ActionOff)
	if err == nil {
		t.Fatalf("fence succeeded while throttled: %+v", res)
	}
	if k := plugin.KindOf(err); k != plugin.KindRetryable || res.State == plugin.StateOff {
		t.Errorf("fence = %v (kind %s, state %s); want retryable, not off", err, k, res.State)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("took %s, want the call's deadline (1.5s) honoured", took)
	}
	f.mu.Lock()
	throttled := f.throttled
	f.mu.Unlock()
	if throttled < 2 || throttled > maxAttempts {
		t.Errorf("%d throttled calls, want 2..%d", throttled, maxAttempts)
	}
}

func TestAWSRejectedCredentialsArePermanentAndScrubbed(t *testing.T) {
	for _, code := range []string{"AuthFailure", "UnauthorizedOperation", "SignatureDoesNotMatch"} {
		t.Run(code, func(t *testing.T) {
			f := &fakeEC2{state: "running", errCode: code}
			url := newFakeEC2(t, f)
			req := awsRequest(url, "us-east-1a", fakeID)
			req.Secrets[SecretSessionToken] = "sessionTokenValue123456"
			res, err := testAgent().Fence(fixture.CallCtx(t, 10*time.Second), req, plugin.ActionOff)
			if err == nil || plugin.KindOf(err) != plugin.KindPermanent || !strings.Contains(err.Error(), code) {
				t.Fatalf("fence = %v, want a permanent %s", err, code)
			}
			if _, calls, _ := f.snapshot(); len(calls) != 1 {
				t.Errorf("calls %v: a permanent error must not be retried", calls)
			}
			for _, v := range req.Secrets {
				if strings.Contains(err.Error(), v) || strings.Contains(res.Evidence, v) {
					t.Errorf("a secret leaked: error %q evidence %q", err, res.Evidence)
				}
			}
		})
	}
}

// A stop that is accepted but never completes must fail at the deadline with the
// last state, never succeed.
func TestAWSNeverStopsIsFailure(t *testing.T) {
	f := &fakeEC2{state: "running", stopTo: "stopping"}
	url := newFakeEC2(t, f)
	req := awsRequest(url, "us-east-1a", fakeID)
	req.Params[ParamVerifyTimeout] = "800ms"
	res, err := testAgent().Fence(fixture.CallCtx(t, 10*time.Second), req, plugin.ActionOff)
	if err == nil {
		t.Fatalf("fence of an instance stuck in stopping succeeded: %+v", res)
	}
	if res.State == plugin.StateOff || plugin.KindOf(err) != plugin.KindRetryable {
		t.Errorf("fence = %+v, %v; want a retryable failure, state not off", res, err)
	}
	if !strings.Contains(err.Error(), "still stopping") {
		t.Errorf("error %q does not report the last state", err)
	}
}

// credentialOf reads the access key ID from a SigV4 Authorization header.
func credentialOf(hdr string) string {
	_, rest, ok := strings.Cut(hdr, "Credential=")
	if !ok {
		return ""
	}
	id, _, _ := strings.Cut(rest, "/")
	return id
}

// The agent never reads credentials from its environment when a request carries them,
// and asks the injected default chain, not the environment, when it carries none.
func TestAWSCredentialSources(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIAENVIRONMENTCANARY")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "environmentCanarySecret")
	const chainKey = "AKIADEFAULTCHAIN0001"
	var chainRegion string
	a := testAgent(WithDefaultCredentials(func(_ context.Context, region string) (aws.CredentialsProvider, error) {
		chainRegion = region
		return credentials.NewStaticCredentialsProvider(chainKey, "chainSecret", ""), nil
	}))
	cases := map[string]struct {
		secrets map[string]string
		wantKey string
	}{
		"static keys":   {map[string]string{SecretAccessKeyID: testAccessKeyID, SecretSecretAccessKey: testSecretAccessKey}, testAccessKeyID},
		"default chain": {nil, chainKey},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := &fakeEC2{state: "stopped"}
			url := newFakeEC2(t, f)
			req := awsRequest(url, "ap-south-1a", fakeID)
			req.Secrets = tc.secrets
			if _, err := a.Status(fixture.CallCtx(t, 10*time.Second), req); err != nil {
				t.Fatalf("status: %v", err)
			}
			_, _, auth := f.snapshot()
			if len(auth) == 0 || credentialOf(auth[0]) != tc.wantKey {
				t.Errorf("signed with %q, want %q", auth, tc.wantKey)
			}
		})
	}
	if chainRegion != "ap-south-1" {
		t.Errorf("default chain asked for region %q, want ap-south-1", chainRegion)
	}
}
