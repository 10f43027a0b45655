package plugin

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// fakeAgent is an Agent made of function fields; a nil field is unsupported.
type fakeAgent struct {
	describe func(context.Context) (Description, error)
	validate func(context.Context, map[string]string) error
	fence    func(context.Context, Request, Action) (Result, error)
	status   func(context.Context, Request) (Result, error)
	unfence  func(context.Context, Request) (Result, error)
}

var errNotFaked = Errorf(KindUnsupported, "not faked")

func (f *fakeAgent) Describe(ctx context.Context) (Description, error) {
	if f.describe == nil {
		return Description{}, errNotFaked
	}
	return f.describe(ctx)
}

func (f *fakeAgent) Validate(ctx context.Context, params map[string]string) error {
	if f.validate == nil {
		return errNotFaked
	}
	return f.validate(ctx, params)
}

func (f *fakeAgent) Fence(ctx context.Context, req Request, action Action) (Result, error) {
	if f.fence == nil {
		return Result{}, errNotFaked
	}
	return f.fence(ctx, req, action)
}

func (f *fakeAgent) Status(ctx context.Context, req Request) (Result, error) {
	if f.status == nil {
		return Result{}, errNotFaked
	}
	return f.status(ctx, req)
}

func (f *fakeAgent) Unfence(ctx context.Context, req Request) (Result, error) {
	if f.unfence == nil {
		return Result{}, errNotFaked
	}
	return f.unfence(ctx, req)
}

// connect serves impl in-process over a real gRPC connection and returns the
// client shim, as the host would get it from a subprocess.
func connect(t *testing.T, impl Agent) Agent {
	t.Helper()
	client, _ := goplugin.TestPluginGRPCConn(t, false, pluginSet(impl))
	// Close asks the server to stop through go-plugin's controller service;
	// stopping it here as well races inside go-plugin.
	t.Cleanup(func() { _ = client.Close() })
	raw, err := client.Dispense(pluginName)
	if err != nil {
		t.Fatalf("dispense: %v", err)
	}
	return raw.(Agent)
}

func TestGRPCRoundTrip(t *testing.T) {
	req := Request{
		Node:     "node-1",
		Target:   "10.0.0.7",
		Params:   map[string]string{"port": "623"},
		Secrets:  map[string]string{"password": "s3cret"},
		Epoch:    7,
		Restore:  "acl iqn.2026-11.io.kubefence:node-1",
		Incident: "node-1-x7k2p",

		ExpectIdentity: "4c4c4544-0042-3510-8052-b4c04f335331",
	}
	res := Result{State: StateOff, Evidence: "chassis power is off", Identity: "4c4c4544-0042-3510-8052-b4c04f335331"}
	desc := Description{
		Name:    "ipmi",
		Version: "1.2.3",
		Actions: []Action{ActionOff, ActionReboot},
		Params: []Param{
			{Name: "port", Type: ParamInt, Description: "UDP port", Default: "623"},
			{Name: "password", Type: ParamString, Secret: true, Required: true},
		},
	}
	var got []any
	fake := &fakeAgent{
		describe: func(context.Context) (Description, error) { return desc, nil },
		validate: func(_ context.Context, p map[string]string) error { got = []any{p}; return nil },
		fence: func(_ context.Context, r Request, a Action) (Result, error) {
			got = []any{r, a}
			return res, nil
		},
		status:  func(_ context.Context, r Request) (Result, error) { got = []any{r}; return res, nil },
		unfence: func(_ context.Context, r Request) (Result, error) { got = []any{r}; return res, nil },
	}
	agent := connect(t, fake)
	ctx := t.Context()

	tests := map[string]struct {
		call    func() (any, error)
		wantOut any
		wantIn  []any
	}{
		"describe": {call: func() (any, error) { return agent.Describe(ctx) }, wantOut: desc},
		"validate": {
			call:    func() (any, error) { return nil, agent.Validate(ctx, req.Params) },
			wantOut: nil, wantIn: []any{req.Params},
		},
		"fence": {
			call:    func() (any, error) { return agent.Fence(ctx, req, ActionReboot) },
			wantOut: res, wantIn: []any{req, ActionReboot},
		},
		"status": {
			call:    func() (any, error) { return agent.Status(ctx, req) },
			wantOut: res, wantIn: []any{req},
		},
		"unfence": {
			call:    func() (any, error) { return agent.Unfence(ctx, req) },
			wantOut: res, wantIn: []any{req},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got = nil
			out, err := tc.call()
			if err != nil {
				t.Fatalf("call: %v", err)
			}
			if !reflect.DeepEqual(out, tc.wantOut) {
				t.Errorf("result = %#v, want %#v", out, tc.wantOut)
			}
			if !reflect.DeepEqual(got, tc.wantIn) {
				t.Errorf("agent received %#v, want %#v", got, tc.wantIn)
			}
		})
	}
}

func TestGRPCUnknownStateReadsUnknown(t *testing.T) {
	agent := connect(t, &fakeAgent{status: func(context.Context, Request) (Result, error) {
		return Result{State: "probably-off"}, nil
	}})
	res, err := agent.Status(t.Context(), Request{Target: "t"})
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	if res.State != StateUnknown {
		t.Errorf("state = %q, want %q", res.State, StateUnknown)
	}
}

func TestGRPCTypedErrorsSurviveWire(t *testing.T) {
	tests := map[string]struct {
		err        error
		wantKind   ErrorKind
		wantMsg    string
		wantParams []ParamError
	}{
		"retryable":          {err: Errorf(KindRetryable, "bmc busy"), wantKind: KindRetryable, wantMsg: "bmc busy"},
		"permanent":          {err: Errorf(KindPermanent, "bad password"), wantKind: KindPermanent, wantMsg: "bad password"},
		"target unreachable": {err: Errorf(KindTargetUnreachable, "no route"), wantKind: KindTargetUnreachable, wantMsg: "no route"},
		"unsupported":        {err: Errorf(KindUnsupported, "no reboot"), wantKind: KindUnsupported, wantMsg: "no reboot"},
		"target mismatch": {err: Errorf(KindTargetMismatch, "bmc system GUID a is not the node's systemUUID b"),
			wantKind: KindTargetMismatch, wantMsg: "bmc system GUID a is not the node's systemUUID b"},
		"wrapped kind": {
			err:      fmt.Errorf("power off: %w", Errorf(KindPermanent, "bad password")),
			wantKind: KindPermanent, wantMsg: "power off: Permanent: bad password",
		},
		"kind from a newer agent": {err: &Error{Kind: "Throttled", Message: "slow down"}, wantKind: "Throttled", wantMsg: "slow down"},
		"plain error":             {err: errors.New("ipmitool exited 1"), wantKind: KindRetryable, wantMsg: "ipmitool exited 1"},
		"invalid params": {err: InvalidParams([]ParamError{{"cipherSuite", `"99" is not a cipher suite ID (0-17)`}, {"colour", "unknown parameter"}}),
			wantKind: KindPermanent, wantMsg: "invalid parameters: cipherSuite: \"99\" is not a cipher suite ID (0-17)\ncolour: unknown parameter",
			wantParams: []ParamError{{"cipherSuite", `"99" is not a cipher suite ID (0-17)`}, {"colour", "unknown parameter"}}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			agent := connect(t, &fakeAgent{fence: func(context.Context, Request, Action) (Result, error) {
				return Result{}, tc.err
			}})
			_, err := agent.Fence(t.Context(), Request{Target: "t"}, ActionOff)
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("err = %v (%T), want *Error", err, err)
			}
			if e.Kind != tc.wantKind || e.Message != tc.wantMsg {
				t.Errorf("got %q %q, want %q %q", e.Kind, e.Message, tc.wantKind, tc.wantMsg)
			}
			if !slices.Equal(e.Params, tc.wantParams) {
				t.Errorf("params %q, want %q", e.Params, tc.wantParams)
			}
			if errors.Is(err, ErrAgentDied) {
				t.Errorf("an agent's verdict reads as a dead agent: %v", err)
			}
		})
	}
}

func TestGRPCDeadlineHonoured(t *testing.T) {
	serverDone := make(chan error, 1)
	agent := connect(t, &fakeAgent{status: func(ctx context.Context, _ Request) (Result, error) {
		if _, ok := ctx.Deadline(); !ok {
			serverDone <- errors.New("no deadline on the agent side")
			return Result{}, nil
		}
		<-ctx.Done()
		serverDone <- ctx.Err()
		return Result{}, Errorf(KindPermanent, "too late to matter")
	}})
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := agent.Status(ctx, Request{Node: "node-1", Target: "t"})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want context.DeadlineExceeded", err)
	}
	// The message names the call and its target, not the transport.
	if want := "Status t (node node-1): context deadline exceeded before the agent answered; the outcome is unknown"; err.Error() != want {
		t.Errorf("err = %q, want %q", err, want)
	}
	if KindOf(err) == KindPermanent {
		t.Errorf("a late verdict overrode the deadline: %v", err)
	}
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Errorf("call took %v after a 100ms deadline", elapsed)
	}
	select {
	case serr := <-serverDone:
		if serr == nil {
			t.Errorf("agent context ended without error")
		} else if !errors.Is(serr, context.DeadlineExceeded) && !errors.Is(serr, context.Canceled) {
			t.Errorf("agent side: %v", serr)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("agent never saw its context end")
	}
}

func TestGRPCCancelStaysContextError(t *testing.T) {
	started := make(chan struct{})
	agent := connect(t, &fakeAgent{fence: func(ctx context.Context, _ Request, _ Action) (Result, error) {
		close(started)
		<-ctx.Done()
		return Result{}, ctx.Err()
	}})
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		<-started
		cancel()
	}()
	_, err := agent.Fence(ctx, Request{Target: "t"}, ActionOff)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

func TestFromStatusTransportFailures(t *testing.T) {
	foreign, err := status.New(codes.Unavailable, "lb has no backend").
		WithDetails(&errdetails.ErrorInfo{Domain: "example.com", Reason: "Permanent"})
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		in       error
		wantDied bool
		wantIs   error
		wantKind ErrorKind
	}{
		"unavailable":          {in: status.Error(codes.Unavailable, "error reading from server: EOF"), wantDied: true},
		"not a status":         {in: errors.New("connection reset"), wantDied: true},
		"foreign error info":   {in: foreign.Err(), wantDied: true},
		"deadline":             {in: status.Error(codes.DeadlineExceeded, "deadline"), wantIs: context.DeadlineExceeded},
		"canceled":             {in: status.Error(codes.Canceled, "canceled"), wantIs: context.Canceled},
		"method from the past": {in: status.Error(codes.Unimplemented, "unknown method Unfence"), wantKind: KindUnsupported},
		"other code":           {in: status.Error(codes.Internal, "boom"), wantKind: KindRetryable},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := fromStatus(tc.in)
			if got := errors.Is(err, ErrAgentDied); got != tc.wantDied {
				t.Errorf("errors.Is(%v, ErrAgentDied) = %v, want %v", err, got, tc.wantDied)
			}
			if tc.wantIs != nil && !errors.Is(err, tc.wantIs) {
				t.Errorf("err = %v, want %v", err, tc.wantIs)
			}
			var e *Error
			if tc.wantKind != "" && (!errors.As(err, &e) || e.Kind != tc.wantKind) {
				t.Errorf("err = %v, want kind %s", err, tc.wantKind)
			}
		})
	}
}

// TestGRPCFailedCallKeepsItsResult: a call that fails with what the agent read back
// (State, Evidence) delivers both across the plugin boundary, as it does in process
// (without it, the NodeFence history of a failed call lost what the BMC said).
func TestGRPCFailedCallKeepsItsResult(t *testing.T) {
	read := Result{State: StateOn, Evidence: "chassis power is on 8s after power off was accepted", Identity: "guid-of-the-bmc"}
	fail := &Error{Kind: KindPermanent, Message: "not verified off"}
	agent := connect(t, &fakeAgent{
		fence:   func(context.Context, Request, Action) (Result, error) { return read, fail },
		status:  func(context.Context, Request) (Result, error) { return read, fail },
		unfence: func(context.Context, Request) (Result, error) { return Result{}, fail },
	})
	for name, call := range map[string]func() (Result, error){
		"Fence":  func() (Result, error) { return agent.Fence(context.Background(), Request{Target: "t"}, ActionOff) },
		"Status": func() (Result, error) { return agent.Status(context.Background(), Request{Target: "t"}) },
	} {
		res, err := call()
		if KindOf(err) != KindPermanent || res != read {
			t.Errorf("%s = %+v, %v (kind %s); want %+v with a Permanent error", name, res, err, KindOf(err), read)
		}
	}
	if res, err := agent.Unfence(context.Background(), Request{Target: "t"}); KindOf(err) != KindPermanent || res != (Result{}) {
		t.Errorf("Unfence without a result = %+v, %v", res, err)
	}
}
