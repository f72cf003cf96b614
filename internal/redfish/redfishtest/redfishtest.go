// Package redfishtest is a Redfish BMC stand-in on loopback for tests, in
// the shape of the DMTF mockups: /redfish/v1 (service root, no auth),
// /redfish/v1/Systems and /redfish/v1/Systems/1 with PowerState and the
// #ComputerSystem.Reset action, basic auth (401 on wrong credentials), over
// TLS from httptest.NewTLSServer.
package redfishtest

import (
	"crypto/subtle"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
)

// SystemPath is the one ComputerSystem the stand-in has.
const SystemPath = "/redfish/v1/Systems/1"

// ResetTarget is where its reset action is posted.
const ResetTarget = SystemPath + "/Actions/ComputerSystem.Reset"

// AllowedResetTypes are the reset types the system lists.
var AllowedResetTypes = []string{"On", "ForceOff", "GracefulShutdown", "GracefulRestart", "ForceRestart", "PushPowerButton"}

// Server is the stand-in.
type Server struct {
	*httptest.Server
	username, password string

	mu       sync.Mutex
	power    string
	resets   []string
	failures int
	onChange func(from, to string)
}

// New starts a stand-in on 127.0.0.1 with the given credentials, its system
// in power state "On" or "Off".
func New(username, password, power string) *Server {
	s := &Server{username: username, password: password, power: power}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /redfish/v1", s.root)
	mux.HandleFunc("GET /redfish/v1/", s.root)
	mux.HandleFunc("GET /redfish/v1/Systems", s.auth(s.systems))
	mux.HandleFunc("GET "+SystemPath, s.auth(s.system))
	mux.HandleFunc("POST "+ResetTarget, s.auth(s.reset))
	s.Server = httptest.NewTLSServer(mux)
	return s
}

// SystemURL is the ComputerSystem's URL, https://127.0.0.1:port/redfish/v1/Systems/1.
func (s *Server) SystemURL() string { return s.URL + SystemPath }

// Host is host:port.
func (s *Server) Host() string { return s.Listener.Addr().String() }

// RootCAs is a pool that trusts the stand-in's certificate.
func (s *Server) RootCAs() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(s.Certificate())
	return p
}

// OnPowerChange sets a hook called (outside the stand-in's lock) whenever
// the power state changes, e.g. to power a simulated node on or off.
func (s *Server) OnPowerChange(fn func(from, to string)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onChange = fn
}

// PowerState is the system's current power state.
func (s *Server) PowerState() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.power
}

// SetPowerState changes the power state as the machine itself would (a
// button press), calling the hook.
func (s *Server) SetPowerState(p string) { s.setPower(p) }

// Resets lists the reset types received, in order.
func (s *Server) Resets() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.resets)
}

// AuthFailures counts requests refused for their credentials.
func (s *Server) AuthFailures() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failures
}

func (s *Server) setPower(p string) {
	s.mu.Lock()
	from, hook := s.power, s.onChange
	s.power = p
	s.mu.Unlock()
	if from != p && hook != nil {
		hook(from, p)
	}
}

func (s *Server) auth(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		u, p, ok := r.BasicAuth()
		if !ok || subtle.ConstantTimeCompare([]byte(u), []byte(s.username)) != 1 ||
			subtle.ConstantTimeCompare([]byte(p), []byte(s.password)) != 1 {
			s.mu.Lock()
			s.failures++
			s.mu.Unlock()
			w.Header().Set("WWW-Authenticate", `Basic realm="redfish"`)
			writeError(w, http.StatusUnauthorized, "Base.1.8.NoValidSession", "There is no valid session established with the implementation.")
			return
		}
		h(w, r)
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("OData-Version", "4.0")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, id, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]any{
		"code": id, "message": msg,
		"@Message.ExtendedInfo": []map[string]any{{"MessageId": id, "Message": msg, "Severity": "Critical"}},
	}})
}

func (s *Server) root(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/redfish/v1" && r.URL.Path != "/redfish/v1/" {
		writeError(w, http.StatusNotFound, "Base.1.8.ResourceMissingAtURI", fmt.Sprintf("The resource at the URI %s was not found.", r.URL.Path))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"@odata.type": "#ServiceRoot.v1_5_0.ServiceRoot", "@odata.id": "/redfish/v1",
		"Id": "RootService", "Name": "Root Service", "RedfishVersion": "1.6.0",
		"UUID":    "92384634-2938-2342-8820-489239905423",
		"Systems": map[string]string{"@odata.id": "/redfish/v1/Systems"},
	})
}

func (s *Server) systems(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"@odata.type": "#ComputerSystemCollection.ComputerSystemCollection", "@odata.id": "/redfish/v1/Systems",
		"Name": "Computer System Collection", "Members@odata.count": 1,
		"Members": []map[string]string{{"@odata.id": SystemPath}},
	})
}

func (s *Server) system(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"@odata.type": "#ComputerSystem.v1_13_0.ComputerSystem", "@odata.id": SystemPath,
		"Id": "1", "Name": "WebFrontEnd483", "SystemType": "Physical",
		"Manufacturer": "Contoso", "Model": "3500RX", "SerialNumber": "437XR1138R2",
		"PowerState": s.PowerState(),
		"Actions": map[string]any{"#ComputerSystem.Reset": map[string]any{
			"target":                            ResetTarget,
			"ResetType@Redfish.AllowableValues": AllowedResetTypes,
		}},
	})
}

func (s *Server) reset(w http.ResponseWriter, r *http.Request) {
	var body struct{ ResetType string }
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.ResetType == "" {
		writeError(w, http.StatusBadRequest, "Base.1.8.PropertyMissing", "The property ResetType is a required property and must be included in the request.")
		return
	}
	if !slices.Contains(AllowedResetTypes, body.ResetType) {
		writeError(w, http.StatusBadRequest, "Base.1.8.ActionParameterValueNotInList",
			fmt.Sprintf("The value %s for the parameter ResetType in the action ComputerSystem.Reset is not in the list of acceptable values.", body.ResetType))
		return
	}
	s.mu.Lock()
	s.resets = append(s.resets, body.ResetType)
	cur := s.power
	s.mu.Unlock()
	switch body.ResetType {
	case "On":
		s.setPower("On")
	case "ForceOff", "GracefulShutdown":
		s.setPower("Off")
	case "PushPowerButton":
		if cur == "On" {
			s.setPower("Off")
		} else {
			s.setPower("On")
		}
	case "GracefulRestart", "ForceRestart":
		if cur == "Off" {
			writeError(w, http.StatusConflict, "Base.1.8.ActionNotSupported", "The system is powered off.")
			return
		}
	}
	w.WriteHeader(http.StatusNoContent)
}
