package cloud

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kubefence/kubefence/pkg/internal/fixture"
	"github.com/kubefence/kubefence/pkg/plugin"
)

const srvID = "5f2c2d9e-9d0b-4f3a-8a3e-1c6b2a7d9e01"

func TestOpenStackFenceOff(t *testing.T) {
	cases := map[string]struct {
		server      fakeServer
		secrets     map[string]string
		wantActions []string
		wantEvid    string
	}{
		"running server is stopped": {
			server:      fakeServer{status: "ACTIVE", settleAfter: 3},
			wantActions: []string{"os-stop"},
			wantEvid:    "verified off",
		},
		"already shutoff": {
			server:   fakeServer{status: "SHUTOFF"},
			wantEvid: "already off, nothing sent",
		},
		// Someone else is stopping it: os-stop answers 409, the agent polls instead.
		"409 while powering off": {
			server:      fakeServer{status: "ACTIVE", task: "powering-off", pendingStatus: "SHUTOFF", settleAfter: 3},
			wantActions: []string{"os-stop"},
			wantEvid:    "refused in the current state",
		},
		"application credential": {
			server:      fakeServer{status: "ACTIVE"},
			secrets:     map[string]string{SecretApplicationCredentialID: osAppCredID, SecretApplicationCredentialSecret: osAppSecret},
			wantActions: []string{"os-stop"},
			wantEvid:    "application credential",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := tc.server
			f := newFakeNova(t, map[string]*fakeServer{srvID: &s})
			req := osRequest(f, srvID)
			if tc.secrets != nil {
				req.Secrets = tc.secrets
			}
			res, err := testAgent().Fence(fixture.CallCtx(t, 10*time.Second), req, plugin.ActionOff)
			if err != nil {
				t.Fatalf("fence off: %v (evidence %q)", err, res.Evidence)
			}
			if got := f.server(srvID); got.status != "SHUTOFF" || got.task != "" {
				t.Errorf("fake server is %s/%s, want SHUTOFF", got.status, got.task)
			}
			t.Logf("evidence: %s", res.Evidence)
			if res.State != plugin.StateOff || !strings.Contains(res.Evidence, tc.wantEvid) {
				t.Errorf("result %+v: want off with evidence %q", res, tc.wantEvid)
			}
			if !slices.Equal(f.sent(), tc.wantActions) {
				t.Errorf("actions %v, want %v", f.sent(), tc.wantActions)
			}
		})
	}
}

// A server whose stop is accepted but that never reaches SHUTOFF fails the call.
func TestOpenStackNeverShutoffIsFailure(t *testing.T) {
	s := fakeServer{status: "ACTIVE", neverSettles: true}
	f := newFakeNova(t, map[string]*fakeServer{srvID: &s})
	req := osRequest(f, srvID)
	req.Params[ParamVerifyTimeout] = "500ms"
	start := time.Now()
	res, err := testAgent().Fence(fixture.CallCtx(t, 10*time.Second), req, plugin.ActionOff)
	if err == nil {
		t.Fatalf("fence of a server that never stops succeeded: %+v", res)
	}
	if res.State == plugin.StateOff || plugin.KindOf(err) != plugin.KindRetryable {
		t.Errorf("fence = %+v, %v; want a retryable failure, state not off", res, err)
	}
	if !strings.Contains(err.Error(), "ACTIVE (task powering-off)") {
		t.Errorf("error %q does not report the last state", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("took %s, want verifyTimeout 500ms honoured", took)
	}
}

// The call's deadline ends verification too, before verifyTimeout.
func TestOpenStackDeadlineIsFailure(t *testing.T) {
	s := fakeServer{status: "ACTIVE", neverSettles: true}
	f := newFakeNova(t, map[string]*fakeServer{srvID: &s})
	res, err := testAgent().Fence(fixture.CallCtx(t, 400*time.Millisecond), osRequest(f, srvID), plugin.ActionOff)
	if err == nil || res.State == plugin.StateOff {
		t.Fatalf("fence = %+v, %v; want a failure at the deadline", res, err)
	}
	if !strings.Contains(err.Error(), "context deadline exceeded") {
		t.Errorf("error %q does not say the deadline ended it", err)
	}
}

func TestOpenStackLockAndUnfence(t *testing.T) {
	s := fakeServer{status: "ACTIVE"}
	f := newFakeNova(t, map[string]*fakeServer{srvID: &s})
	req := osRequest(f, srvID)
	req.Params[ParamLock] = "true"
	req.Params[ParamInterface] = "internal"
	a := testAgent()
	if _, err := a.Fence(fixture.CallCtx(t, 10*time.Second), req, plugin.ActionOff); err != nil {
		t.Fatalf("fence off: %v", err)
	}
	if got := f.server(srvID); got.status != "SHUTOFF" || !got.locked {
		t.Fatalf("after fence: %+v, want SHUTOFF and locked", got)
	}
	st, err := a.Status(fixture.CallCtx(t, 10*time.Second), req)
	if err != nil || st.State != plugin.StateOff {
		t.Fatalf("status = %+v, %v; want off", st, err)
	}
	res, err := a.Unfence(fixture.CallCtx(t, 10*time.Second), req)
	if err != nil || res.State != plugin.StateOn {
		t.Fatalf("unfence = %+v, %v; want on", res, err)
	}
	if got := f.server(srvID); got.status != "ACTIVE" || got.locked {
		t.Errorf("after unfence: %+v, want ACTIVE and unlocked", got)
	}
	if want := []string{"os-stop", "lock", "unlock", "os-start"}; !slices.Equal(f.sent(), want) {
		t.Errorf("actions %v, want %v", f.sent(), want)
	}
}

func TestOpenStackErrors(t *testing.T) {
	cases := map[string]struct {
		id       string
		secrets  map[string]string
		params   map[string]string
		wantKind plugin.ErrorKind
		wantText string
	}{
		"unknown server": {id: "0000-missing", wantKind: plugin.KindPermanent, wantText: "not found"},
		"wrong password": {
			secrets:  map[string]string{SecretUsername: osUser, SecretPassword: "wrong-password", SecretProjectName: osProject},
			wantKind: plugin.KindPermanent, wantText: "credentials rejected",
		},
		"both auth kinds": {
			secrets: map[string]string{SecretUsername: osUser, SecretPassword: osPassword, SecretProjectName: osProject,
				SecretApplicationCredentialID: osAppCredID, SecretApplicationCredentialSecret: osAppSecret},
			wantKind: plugin.KindPermanent, wantText: SecretApplicationCredentialID,
		},
		"app credential without secret": {
			secrets:  map[string]string{SecretApplicationCredentialID: osAppCredID},
			wantKind: plugin.KindPermanent, wantText: SecretApplicationCredentialSecret,
		},
		"password without project": {
			secrets:  map[string]string{SecretUsername: osUser, SecretPassword: osPassword},
			wantKind: plugin.KindPermanent, wantText: SecretProjectName,
		},
		"no auth url": {
			params:   map[string]string{ParamAuthURL: ""},
			wantKind: plugin.KindPermanent, wantText: ParamAuthURL,
		},
		"no compute endpoint in region": {
			params:   map[string]string{ParamRegion: "RegionTwo"},
			wantKind: plugin.KindPermanent, wantText: "compute endpoint",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := fakeServer{status: "ACTIVE"}
			f := newFakeNova(t, map[string]*fakeServer{srvID: &s})
			id := srvID
			if tc.id != "" {
				id = tc.id
			}
			req := osRequest(f, id)
			if tc.secrets != nil {
				req.Secrets = tc.secrets
			}
			for k, v := range tc.params {
				if v == "" {
					delete(req.Params, k)
				} else {
					req.Params[k] = v
				}
			}
			res, err := testAgent().Fence(fixture.CallCtx(t, 10*time.Second), req, plugin.ActionOff)
			if err == nil || plugin.KindOf(err) != tc.wantKind || !strings.Contains(err.Error(), tc.wantText) {
				t.Fatalf("fence = %v, want %s containing %q", err, tc.wantKind, tc.wantText)
			}
			for _, v := range []string{osPassword, "wrong-password", osAppSecret} {
				if strings.Contains(err.Error(), v) || strings.Contains(res.Evidence, v) {
					t.Errorf("a secret leaked: %q / %q", err, res.Evidence)
				}
			}
			if got := f.server(srvID); got.status != "ACTIVE" {
				t.Errorf("server is %s after a failed call, want ACTIVE", got.status)
			}
		})
	}
}

func TestOpenStackAuthURLFromSecret(t *testing.T) {
	s := fakeServer{status: "SHUTOFF"}
	f := newFakeNova(t, map[string]*fakeServer{srvID: &s})
	req := osRequest(f, srvID)
	delete(req.Params, ParamAuthURL)
	req.Secrets[SecretAuthURL] = f.url
	res, err := testAgent().Status(fixture.CallCtx(t, 10*time.Second), req)
	if err != nil || res.State != plugin.StateOff {
		t.Fatalf("status = %+v, %v; want off", res, err)
	}
}
