package cloud

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/kubefence/kubefence/pkg/plugin"
)

// Credentials the fake identity service accepts.
const (
	osUser      = "fencer"
	osPassword  = "n0va-pa55word"
	osProject   = "infra"
	osAppCredID = "appcred-0123456789"
	osAppSecret = "appcred-s3cret-value"
	osToken     = "gAAAAAfaketoken"
	osRegion    = "RegionOne"
)

// fakeServer is one Nova server as the fake keeps it.
type fakeServer struct {
	status string
	task   string
	locked bool
	// settleAfter is how many GETs a task takes before it completes.
	settleAfter int
	// pendingStatus is what status the current task ends in.
	pendingStatus string
	// neverSettles keeps a task running forever.
	neverSettles bool
}

// fakeNova serves Keystone v3 token creation and the Nova server paths the agent uses,
// and keeps server state so tests can read it back.
type fakeNova struct {
	mu      sync.Mutex
	url     string
	servers map[string]*fakeServer
	actions []string
	auths   []string
}

func newFakeNova(t *testing.T, servers map[string]*fakeServer) *fakeNova {
	f := &fakeNova{servers: servers}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v3/auth/tokens", f.auth)
	mux.HandleFunc("GET /compute/v2.1/servers/{id}", f.getServer)
	mux.HandleFunc("POST /compute/v2.1/servers/{id}/action", f.action)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	f.url = srv.URL
	return f
}

func (f *fakeNova) auth(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Auth struct {
			Identity struct {
				Methods  []string `json:"methods"`
				Password struct {
					User struct {
						Name     string `json:"name"`
						Password string `json:"password"`
						Domain   struct {
							Name string `json:"name"`
						} `json:"domain"`
					} `json:"user"`
				} `json:"password"`
				AppCred struct {
					ID     string `json:"id"`
					Secret string `json:"secret"`
				} `json:"application_credential"`
			} `json:"identity"`
			Scope struct {
				Project struct {
					Name string `json:"name"`
				} `json:"project"`
			} `json:"scope"`
		} `json:"auth"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	id := body.Auth.Identity
	ok := false
	method := strings.Join(id.Methods, ",")
	switch method {
	case "password":
		u := id.Password.User
		ok = u.Name == osUser && u.Password == osPassword && u.Domain.Name == "Default" &&
			body.Auth.Scope.Project.Name == osProject
	case "application_credential":
		ok = id.AppCred.ID == osAppCredID && id.AppCred.Secret == osAppSecret
	}
	f.mu.Lock()
	f.auths = append(f.auths, method)
	f.mu.Unlock()
	if !ok {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"error":{"code":401,"title":"Unauthorized","message":"The request you have made requires authentication."}}`)
		return
	}
	w.Header().Set("X-Subject-Token", osToken)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"token":{"methods":[%q],"expires_at":"2099-01-01T00:00:00.000000Z",`+
		`"catalog":[{"type":"compute","name":"nova","id":"c1","endpoints":[`+
		`{"id":"e1","interface":"public","region":%[2]q,"region_id":%[2]q,"url":"%[3]s/compute/v2.1"},`+
		`{"id":"e2","interface":"internal","region":%[2]q,"region_id":%[2]q,"url":"%[3]s/compute/v2.1"}]}]}}`,
		method, osRegion, f.url)
}

// lookup finds the server of a request after checking its token. It holds f.mu on success.
func (f *fakeNova) lookup(w http.ResponseWriter, r *http.Request) (*fakeServer, bool) {
	if r.Header.Get("X-Auth-Token") != osToken {
		http.Error(w, `{"error":"unauthorized"}`, http.StatusUnauthorized)
		return nil, false
	}
	f.mu.Lock()
	s, ok := f.servers[r.PathValue("id")]
	if !ok {
		f.mu.Unlock()
		http.Error(w, `{"itemNotFound":{"code":404,"message":"Instance could not be found."}}`, http.StatusNotFound)
		return nil, false
	}
	return s, true
}

func (f *fakeNova) getServer(w http.ResponseWriter, r *http.Request) {
	s, ok := f.lookup(w, r)
	if !ok {
		return
	}
	defer f.mu.Unlock()
	status, task := s.status, s.task
	if s.task != "" && !s.neverSettles {
		if s.settleAfter--; s.settleAfter <= 0 {
			s.status, s.task = s.pendingStatus, ""
		}
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"server":{"id":%q,"status":%q,"OS-EXT-STS:task_state":%s,"locked":%t}}`,
		r.PathValue("id"), status, nullable(task), s.locked)
}

func nullable(s string) string {
	if s == "" {
		return "null"
	}
	return fmt.Sprintf("%q", s)
}

func (f *fakeNova) action(w http.ResponseWriter, r *http.Request) {
	s, ok := f.lookup(w, r)
	if !ok {
		return
	}
	defer f.mu.Unlock()
	var body map[string]any
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || len(body) != 1 {
		http.Error(w, "bad action", http.StatusBadRequest)
		return
	}
	var verb string
	for k := range body {
		verb = k
	}
	f.actions = append(f.actions, verb)
	conflict := func() {
		http.Error(w, fmt.Sprintf(`{"conflictingRequest":{"code":409,"message":"Cannot '%s' instance while it is in vm_state %s task_state %s"}}`,
			verb, s.status, s.task), http.StatusConflict)
	}
	switch verb {
	case "os-stop", "os-start":
		from, task, to := "ACTIVE", "powering-off", "SHUTOFF"
		if verb == "os-start" {
			from, task, to = "SHUTOFF", "powering-on", "ACTIVE"
		}
		if s.status != from || s.task != "" || (s.locked && verb == "os-start") {
			conflict()
			return
		}
		s.task, s.pendingStatus = task, to
		if s.settleAfter <= 0 {
			s.settleAfter = 1
		}
	case "lock":
		s.locked = true
	case "unlock":
		s.locked = false
	default:
		http.Error(w, "unknown action "+verb, http.StatusBadRequest)
		return
	}
	w.WriteHeader(http.StatusAccepted)
}

func (f *fakeNova) sent() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.actions...)
}

func (f *fakeNova) server(id string) fakeServer {
	f.mu.Lock()
	defer f.mu.Unlock()
	return *f.servers[id]
}

// osRequest addresses server id through the fake with password auth.
func osRequest(f *fakeNova, id string) plugin.Request {
	return plugin.Request{
		Node:   "node-" + id,
		Target: "openstack:///" + id,
		Params: map[string]string{ParamAuthURL: f.url + "/v3", ParamRegion: osRegion,
			ParamPollInterval: "20ms", ParamVerifyTimeout: "5s"},
		Secrets: map[string]string{
			SecretUsername: osUser, SecretPassword: osPassword, SecretProjectName: osProject,
		},
	}
}
