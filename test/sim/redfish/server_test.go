package redfish

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stmcginnis/gofish"
	gfredfish "github.com/stmcginnis/gofish/redfish"
)

func start(t *testing.T, opts Options) *Server {
	t.Helper()
	s, err := Start(opts)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

func httpClient(pool *tls.Config) *http.Client {
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: pool}}
}

func connect(t *testing.T, s *Server, basic bool) *gofish.APIClient {
	t.Helper()
	c, err := gofish.Connect(gofish.ClientConfig{
		Endpoint: s.URL(), Username: s.User(), Password: s.Password(), BasicAuth: basic,
		HTTPClient: httpClient(&tls.Config{RootCAs: s.CA().Pool()}),
	})
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	return c
}

// TestGofishPowerCycle drives the server with gofish itself, the library the agent
// uses, through a session and through basic auth.
func TestGofishPowerCycle(t *testing.T) {
	for name, basic := range map[string]bool{"session": false, "basic auth": true} {
		t.Run(name, func(t *testing.T) {
			s := start(t, Options{Systems: []SystemOptions{{ID: "a", PoweredOn: true}, {ID: "b"}}})
			c := connect(t, s, basic)
			if want := map[bool]int{false: 1, true: 0}[basic]; s.OpenSessions() != want {
				t.Errorf("open sessions %d, want %d", s.OpenSessions(), want)
			}
			systems, err := c.Service.Systems()
			if err != nil || len(systems) != 2 {
				t.Fatalf("systems: %d, %v", len(systems), err)
			}
			for _, sys := range systems {
				if sys.ID != "a" {
					continue
				}
				if sys.PowerState != gfredfish.OnPowerState {
					t.Errorf("power state %q, want On", sys.PowerState)
				}
				if len(sys.SupportedResetTypes) != 4 {
					t.Errorf("reset types %v", sys.SupportedResetTypes)
				}
				if err := sys.Reset(gfredfish.ForceOffResetType); err != nil {
					t.Fatalf("force off: %v", err)
				}
				if err := sys.Reset(gfredfish.PowerCycleResetType); err == nil {
					t.Error("gofish sent a reset type the server does not list")
				}
			}
			if on, err := s.PoweredOn("a"); err != nil || on {
				t.Errorf("system a on=%v err=%v after ForceOff", on, err)
			}
			if on, _ := s.PoweredOn("b"); on {
				t.Error("system b turned on")
			}
			c.Logout()
			if s.OpenSessions() != 0 {
				t.Errorf("%d sessions left after logout", s.OpenSessions())
			}
			ev, _ := s.Events("a")
			if len(ev) != 1 || ev[0].Action != ActionOff || ev[0].Source != SourceBMC {
				t.Errorf("events %+v, want one bmc off", ev)
			}
		})
	}
}

func TestAuthRequired(t *testing.T) {
	s := start(t, Options{Password: "right-pw"})
	_, err := gofish.Connect(gofish.ClientConfig{Endpoint: s.URL(), Username: s.User(), Password: "wrong-pw",
		HTTPClient: httpClient(&tls.Config{RootCAs: s.CA().Pool()})})
	if err == nil || !strings.HasPrefix(err.Error(), "401:") {
		t.Fatalf("session with a wrong password: %v, want 401", err)
	}
	if strings.Contains(err.Error(), "wrong-pw") || strings.Contains(err.Error(), "right-pw") {
		t.Errorf("error echoes a password: %v", err)
	}
	hc := httpClient(&tls.Config{RootCAs: s.CA().Pool()})
	tests := map[string]struct {
		method, path string
		body         string
		token        string
		want         int
	}{
		"root is open":            {"GET", "/redfish/v1/", "", "", 200},
		"systems need auth":       {"GET", "/redfish/v1/Systems", "", "", 401},
		"bad token":               {"GET", "/redfish/v1/Systems/1", "", "nope", 401},
		"reset needs auth":        {"POST", "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset", `{"ResetType":"ForceOff"}`, "", 401},
		"delete session needs it": {"DELETE", "/redfish/v1/SessionService/Sessions/1", "", "", 401},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, s.URL()+tc.path, bytes.NewBufferString(tc.body))
			if tc.token != "" {
				req.Header.Set("X-Auth-Token", tc.token)
			}
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("status %d, want %d", resp.StatusCode, tc.want)
			}
		})
	}
	if on, _ := s.PoweredOn("1"); !on {
		t.Error("unauthenticated reset changed power")
	}
}

// TestTransitionDelay uses a fake clock: PoweringOff still has power, and the change
// is logged when it takes effect.
func TestTransitionDelay(t *testing.T) {
	s := start(t, Options{TransitionDelay: 2 * time.Second})
	now := time.Unix(1000, 0)
	s.now = func() time.Time { return now }
	state := func() string {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.systems["1"].settle(now)
		return s.systems["1"].powerState()
	}
	s.mu.Lock()
	_ = s.systems["1"].reset(ResetForceOff, now, s.opts.TransitionDelay)
	s.mu.Unlock()
	if on, _ := s.PoweredOn("1"); !on || state() != "PoweringOff" {
		t.Fatalf("right after ForceOff: on=%v state=%s, want on and PoweringOff", on, state())
	}
	now = now.Add(2 * time.Second)
	if on, _ := s.PoweredOn("1"); on || state() != "Off" {
		t.Fatalf("after the delay: on=%v state=%s", on, state())
	}
	ev, _ := s.Events("1")
	if len(ev) != 1 || !ev[0].Time.Equal(time.Unix(1002, 0)) {
		t.Errorf("events %+v, want off at the end of the delay", ev)
	}
}

func TestIgnorePowerOffAndSetPower(t *testing.T) {
	s := start(t, Options{Systems: []SystemOptions{{ID: "x", PoweredOn: true, IgnorePowerOff: true}}})
	c := connect(t, s, false)
	defer c.Logout()
	systems, err := c.Service.Systems()
	if err != nil {
		t.Fatal(err)
	}
	if err := systems[0].Reset(gfredfish.ForceOffResetType); err != nil {
		t.Fatalf("force off: %v", err)
	}
	if on, _ := s.PoweredOn("x"); !on {
		t.Error("broken BMC powered off")
	}
	if err := s.SetPower("x", false); err != nil {
		t.Fatal(err)
	}
	if on, _ := s.Power("x").PoweredOn(); on {
		t.Error("SetPower(false) left it on")
	}
	ev, _ := s.Events("x")
	b, _ := json.Marshal(ev)
	if len(ev) != 2 || ev[0].Action != ActionIgnoredOff || ev[1].Source != SourceSim {
		t.Errorf("events %s", b)
	}
	if _, err := s.Events("nope"); err == nil {
		t.Error("events of an unknown system")
	}
}

func TestStartRejectsBadSystems(t *testing.T) {
	for name, systems := range map[string][]SystemOptions{
		"empty id":  {{ID: ""}},
		"duplicate": {{ID: "a"}, {ID: "a"}},
		"slash":     {{ID: "a/b"}},
	} {
		t.Run(name, func(t *testing.T) {
			if s, err := Start(Options{Systems: systems}); err == nil {
				s.Close()
				t.Fatal("accepted")
			}
		})
	}
}
