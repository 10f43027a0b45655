package redfish

import (
	"encoding/json"
	"io"
	"log"
	"net/http"
)

// URIs of the resources served.
const (
	rootURI     = "/redfish/v1/"
	systemsURI  = "/redfish/v1/Systems"
	sessionsURI = "/redfish/v1/SessionService/Sessions"
	serviceURI  = "/redfish/v1/SessionService"
)

// maxBody bounds request bodies; every body served here is a few dozen bytes.
const maxBody = 1 << 16

type odataID struct {
	ID string `json:"@odata.id"`
}

// routes serves exactly what gofish v0.20.0 reads for bmclib v2.3.5's power calls:
// GET the service root (Systems and Links.Sessions), POST a session (X-Auth-Token and
// Location headers), GET the Systems collection (Members) and each system (PowerState,
// Actions.#ComputerSystem.Reset with target and ResetType@Redfish.AllowableValues),
// POST the reset, DELETE the session on Close.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /redfish/v1/{$}", s.serviceRoot)
	mux.HandleFunc("GET /redfish/v1", s.serviceRoot)
	mux.HandleFunc("POST "+sessionsURI, s.createSession)
	mux.HandleFunc("GET "+serviceURI, s.auth(s.sessionService))
	mux.HandleFunc("GET "+sessionsURI, s.auth(s.listSessions))
	mux.HandleFunc("GET "+sessionsURI+"/{id}", s.auth(s.getSession))
	mux.HandleFunc("DELETE "+sessionsURI+"/{id}", s.auth(s.deleteSession))
	mux.HandleFunc("GET "+systemsURI, s.auth(s.listSystems))
	mux.HandleFunc("GET "+systemsURI+"/{id}", s.auth(s.getSystem))
	mux.HandleFunc("POST "+systemsURI+"/{id}/Actions/ComputerSystem.Reset", s.auth(s.resetSystem))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.requests++
		s.mu.Unlock()
		w.Header().Set("OData-Version", "4.0")
		mux.ServeHTTP(w, r)
	})
}

// auth wraps a handler that needs a session token or basic credentials. The handler
// runs with s.mu held.
func (s *Server) auth(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if !s.authorized(r) {
			w.Header().Set("WWW-Authenticate", `Basic realm="redfish"`)
			writeError(w, http.StatusUnauthorized, "Base.1.8.NoValidSession", "no valid session or credentials")
			return
		}
		h(w, r)
	}
}

func (s *Server) serviceRoot(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"@odata.type":    "#ServiceRoot.v1_11_0.ServiceRoot",
		"@odata.id":      rootURI,
		"Id":             "RootService",
		"Name":           "Root Service",
		"RedfishVersion": "1.11.0",
		"Product":        "kubefence redfish sim",
		"Systems":        odataID{systemsURI},
		"SessionService": odataID{serviceURI},
		"Links":          map[string]any{"Sessions": odataID{sessionsURI}},
	})
}

func (s *Server) createSession(w http.ResponseWriter, r *http.Request) {
	var body struct{ UserName, Password string }
	if err := json.NewDecoder(io.LimitReader(r.Body, maxBody)).Decode(&body); err != nil {
		writeError(w, http.StatusBadRequest, "Base.1.8.MalformedJSON", "session request is not JSON")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.validCredentials(body.UserName, body.Password) {
		writeError(w, http.StatusUnauthorized, "Base.1.8.InsufficientPrivilege", "invalid user name or password")
		return
	}
	id, token, err := s.newSession()
	if err != nil {
		writeError(w, http.StatusInternalServerError, "Base.1.8.InternalError", err.Error())
		return
	}
	w.Header().Set("X-Auth-Token", token)
	w.Header().Set("Location", sessionsURI+"/"+id)
	writeJSON(w, http.StatusCreated, sessionJSON(id, s.opts.User))
}

func (s *Server) sessionService(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"@odata.type":    "#SessionService.v1_1_8.SessionService",
		"@odata.id":      serviceURI,
		"Id":             "SessionService",
		"Name":           "Session Service",
		"ServiceEnabled": true,
		"Sessions":       odataID{sessionsURI},
	})
}

func (s *Server) listSessions(w http.ResponseWriter, _ *http.Request) {
	members := []odataID{}
	for id := range s.sessions {
		members = append(members, odataID{sessionsURI + "/" + id})
	}
	writeCollection(w, sessionsURI, "Session Collection", "#SessionCollection.SessionCollection", members)
}

func (s *Server) getSession(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if _, ok := s.sessions[id]; !ok {
		writeError(w, http.StatusNotFound, "Base.1.8.ResourceMissingAtURI", "no such session")
		return
	}
	writeJSON(w, http.StatusOK, sessionJSON(id, s.opts.User))
}

func (s *Server) deleteSession(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if _, ok := s.sessions[id]; !ok {
		writeError(w, http.StatusNotFound, "Base.1.8.ResourceMissingAtURI", "no such session")
		return
	}
	delete(s.sessions, id)
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) listSystems(w http.ResponseWriter, _ *http.Request) {
	members := make([]odataID, 0, len(s.order))
	for _, id := range s.order {
		members = append(members, odataID{systemsURI + "/" + id})
	}
	writeCollection(w, systemsURI, "Computer System Collection", "#ComputerSystemCollection.ComputerSystemCollection", members)
}

func (s *Server) getSystem(w http.ResponseWriter, r *http.Request) {
	sys, err := s.system(r.PathValue("id"))
	if err != nil {
		writeError(w, http.StatusNotFound, "Base.1.8.ResourceMissingAtURI", err.Error())
		return
	}
	sys.settle(s.now())
	uri := systemsURI + "/" + sys.id
	body := map[string]any{
		"@odata.type": "#ComputerSystem.v1_13_0.ComputerSystem",
		"@odata.id":   uri,
		"Id":          sys.id,
		"Name":        sys.id,
		"SystemType":  "Physical",
		"PowerState":  sys.powerState(),
		"Actions": map[string]any{
			"#ComputerSystem.Reset": map[string]any{
				"target":                            uri + "/Actions/ComputerSystem.Reset",
				"ResetType@Redfish.AllowableValues": allowedResetTypes,
			},
		},
	}
	if sys.uuid != "" {
		body["UUID"] = sys.uuid
	}
	writeJSON(w, http.StatusOK, body)
}

func (s *Server) resetSystem(w http.ResponseWriter, r *http.Request) {
	sys, err := s.system(r.PathValue("id"))
	if err != nil {
		writeError(w, http.StatusNotFound, "Base.1.8.ResourceMissingAtURI", err.Error())
		return
	}
	var body struct{ ResetType string }
	if err := json.NewDecoder(io.LimitReader(r.Body, maxBody)).Decode(&body); err != nil {
		writeError(w, http.StatusBadRequest, "Base.1.8.MalformedJSON", "reset request is not JSON")
		return
	}
	if err := sys.reset(body.ResetType, s.now(), s.opts.TransitionDelay); err != nil {
		writeError(w, http.StatusBadRequest, "Base.1.8.ActionParameterValueNotInList", err.Error())
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func sessionJSON(id, user string) map[string]any {
	return map[string]any{
		"@odata.type": "#Session.v1_3_0.Session",
		"@odata.id":   sessionsURI + "/" + id,
		"Id":          id,
		"Name":        "User Session",
		"UserName":    user,
		"SessionType": "Redfish",
	}
}

func writeCollection(w http.ResponseWriter, uri, name, typ string, members []odataID) {
	writeJSON(w, http.StatusOK, map[string]any{
		"@odata.type":         typ,
		"@odata.id":           uri,
		"Name":                name,
		"Members":             members,
		"Members@odata.count": len(members),
	})
}

// writeError sends a Redfish error body, which gofish puts into its error text.
func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]any{"code": code, "message": msg}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func discardLog() *log.Logger { return log.New(io.Discard, "", 0) }
