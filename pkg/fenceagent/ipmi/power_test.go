package ipmi

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/kubefence/kubefence/pkg/plugin"
)

// fakeClient is a PowerClient made of function fields; nil fields succeed.
type fakeClient struct {
	get    func(ctx context.Context) (string, error)
	set    func(ctx context.Context, state string) (bool, error)
	sets   []string
	closed bool
}

func (f *fakeClient) Open(context.Context) error  { return nil }
func (f *fakeClient) Close(context.Context) error { f.closed = true; return nil }

func (f *fakeClient) GetPowerState(ctx context.Context) (string, error) {
	return f.get(ctx)
}

func (f *fakeClient) SetPowerState(ctx context.Context, state string) (bool, error) {
	f.sets = append(f.sets, state)
	if f.set == nil {
		return true, nil
	}
	return f.set(ctx, state)
}

func fakeAgent(f *fakeClient) *Agent {
	return New(WithClientFunc(func(Conn) (PowerClient, error) { return f, nil }))
}

func fakeRequest(params map[string]string) plugin.Request {
	return plugin.Request{Node: "n1", Target: "bmc.test", Params: params,
		Secrets: map[string]string{SecretUsername: "admin", SecretPassword: "s3cret-pw"}}
}

func always(raw string) func(context.Context) (string, error) {
	return func(context.Context) (string, error) { return raw, nil }
}

func TestFenceFailures(t *testing.T) {
	unreachable := &toolError{command: "chassis power status", err: errors.New("exit status 1"),
		output: "Get Auth Capabilities error\nError: Unable to establish IPMI v2 / RMCP+ session"}
	tests := map[string]struct {
		client    *fakeClient
		params    map[string]string
		ctxLimit  time.Duration
		wantKind  plugin.ErrorKind
		wantMsg   string
		wantState plugin.PowerState
	}{
		"ctx deadline before verifyTimeout": {
			client:   &fakeClient{get: always("Chassis Power is on")},
			params:   map[string]string{ParamVerifyTimeout: "20s", ParamPollInterval: "20ms"},
			ctxLimit: 300 * time.Millisecond,
			wantKind: plugin.KindNotVerified, wantMsg: "still reports on", wantState: plugin.StateOn,
		},
		"state unreadable after the command": {
			client: func() *fakeClient {
				f := &fakeClient{}
				f.get = func(context.Context) (string, error) {
					if len(f.sets) == 0 {
						return "Chassis Power is on", nil
					}
					return "", unreachable
				}
				return f
			}(),
			params:   map[string]string{ParamVerifyTimeout: "200ms", ParamPollInterval: "20ms"},
			ctxLimit: 5 * time.Second,
			wantKind: plugin.KindTargetUnreachable, wantMsg: "last read of the state failed", wantState: plugin.StateOn,
		},
		"unparseable state never counts as off": {
			client:   &fakeClient{get: always("Chassis Power is sort of off")},
			params:   map[string]string{ParamVerifyTimeout: "200ms", ParamPollInterval: "20ms"},
			ctxLimit: 5 * time.Second,
			wantKind: plugin.KindRetryable, wantMsg: "still reports unknown", wantState: plugin.StateUnknown,
		},
		"command not acknowledged": {
			client: &fakeClient{get: always("Chassis Power is on"),
				set: func(context.Context, string) (bool, error) { return false, nil }},
			ctxLimit: 5 * time.Second,
			wantKind: plugin.KindRetryable, wantMsg: "not acknowledged", wantState: plugin.StateOn,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), tc.ctxLimit)
			defer cancel()
			start := time.Now()
			res, err := fakeAgent(tc.client).Fence(ctx, fakeRequest(tc.params), plugin.ActionOff)
			if err == nil {
				t.Fatalf("fence succeeded: %+v", res)
			}
			if k := plugin.KindOf(err); k != tc.wantKind {
				t.Errorf("kind %s, want %s: %v", k, tc.wantKind, err)
			}
			if !strings.Contains(err.Error(), tc.wantMsg) {
				t.Errorf("error %q lacks %q", err, tc.wantMsg)
			}
			if res.State != tc.wantState {
				t.Errorf("state %q, want %q", res.State, tc.wantState)
			}
			if elapsed := time.Since(start); elapsed > tc.ctxLimit+time.Second {
				t.Errorf("took %s, limit %s", elapsed, tc.ctxLimit)
			}
			if !tc.client.closed {
				t.Error("client not closed")
			}
			if strings.Contains(err.Error()+res.Evidence, "s3cret-pw") {
				t.Error("password in error or evidence")
			}
		})
	}
}

func TestStatusUnparseable(t *testing.T) {
	f := &fakeClient{get: always("Chassis Power is flickering")}
	res, err := fakeAgent(f).Status(context.Background(), fakeRequest(nil))
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	if res.State != plugin.StateUnknown || !strings.Contains(res.Evidence, "flickering") {
		t.Errorf("result %+v, want unknown with the raw answer", res)
	}
}

func TestRebootVerifiesOffBeforeOn(t *testing.T) {
	state := "on"
	f := &fakeClient{}
	f.get = func(context.Context) (string, error) { return "Chassis Power is " + state, nil }
	f.set = func(_ context.Context, s string) (bool, error) { state = s; return true, nil }
	res, err := fakeAgent(f).Fence(context.Background(), fakeRequest(nil), plugin.ActionReboot)
	if err != nil {
		t.Fatalf("reboot: %v", err)
	}
	if strings.Join(f.sets, ",") != "off,on" || res.State != plugin.StateOn {
		t.Errorf("sets %v state %q, want off,on and on", f.sets, res.State)
	}
	if i, j := strings.Index(res.Evidence, "read off, verified"), strings.Index(res.Evidence, "sent power on"); i < 0 || j < i {
		t.Errorf("evidence does not show off verified before on: %q", res.Evidence)
	}
}

func TestRejectedBeforeContact(t *testing.T) {
	tests := map[string]struct {
		req    plugin.Request
		action plugin.Action
		want   plugin.ErrorKind
	}{
		"unsupported action": {req: fakeRequest(nil), action: "cycle", want: plugin.KindUnsupported},
		"bad param":          {req: fakeRequest(map[string]string{"port": "x"}), action: plugin.ActionOff, want: plugin.KindPermanent},
		"no target":          {req: plugin.Request{Secrets: fakeRequest(nil).Secrets}, action: plugin.ActionOff, want: plugin.KindPermanent},
		"no secrets":         {req: plugin.Request{Target: "bmc"}, action: plugin.ActionOff, want: plugin.KindPermanent},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			called := false
			a := New(WithClientFunc(func(Conn) (PowerClient, error) { called = true; return nil, errors.New("unused") }))
			_, err := a.Fence(context.Background(), tc.req, tc.action)
			if k := plugin.KindOf(err); err == nil || k != tc.want {
				t.Errorf("err %v (kind %s), want kind %s", err, k, tc.want)
			}
			if called {
				t.Error("client created for a request rejected up front")
			}
		})
	}
}
