package redfish_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/rezuscloud/rezuscloud/internal/redfish"
	"github.com/rezuscloud/rezuscloud/internal/redfish/redfishtest"
)

const (
	user = "admin"
	pass = "s3cret-Pa55"
)

func newClient(t *testing.T, s *redfishtest.Server, opts redfish.Options) *redfish.Client {
	t.Helper()
	c, err := redfish.New(s.SystemURL(), opts)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestPowerOnOffGraceful(t *testing.T) {
	s := redfishtest.New(user, pass, redfish.PowerOff)
	defer s.Close()
	var mu sync.Mutex
	var changes []string
	s.OnPowerChange(func(from, to string) {
		mu.Lock()
		changes = append(changes, from+">"+to)
		mu.Unlock()
	})
	c := newClient(t, s, redfish.Options{Username: user, Password: pass, RootCAs: s.RootCAs()})
	ctx := context.Background()

	steps := []struct {
		name string
		do   func(context.Context) error
		want string
	}{
		{"on", c.On, redfish.PowerOn},
		{"graceful shutdown", c.GracefulShutdown, redfish.PowerOff},
		{"on again", c.On, redfish.PowerOn},
		{"force off", c.ForceOff, redfish.PowerOff},
	}
	for _, st := range steps {
		if err := st.do(ctx); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		got, err := c.PowerState(ctx)
		if err != nil || got != st.want || s.PowerState() != st.want {
			t.Fatalf("%s: power state %q (%v), stand-in %q; want %q", st.name, got, err, s.PowerState(), st.want)
		}
	}
	if r := strings.Join(s.Resets(), ","); r != "On,GracefulShutdown,On,ForceOff" {
		t.Fatalf("resets %s", r)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(changes, " ") != "Off>On On>Off Off>On On>Off" {
		t.Fatalf("hook saw %v", changes)
	}
}

func TestWrongCredentials(t *testing.T) {
	s := redfishtest.New(user, pass, redfish.PowerOn)
	defer s.Close()
	c := newClient(t, s, redfish.Options{Username: user, Password: "wrong-Pa55word", RootCAs: s.RootCAs()})
	for name, do := range map[string]func(context.Context) error{
		"state": func(ctx context.Context) error { _, err := c.PowerState(ctx); return err },
		"off":   c.ForceOff,
	} {
		err := do(context.Background())
		if err == nil {
			t.Fatalf("%s with a wrong password: no error", name)
		}
		msg := err.Error()
		if !strings.Contains(msg, s.Host()) || !strings.Contains(msg, "refused the credentials") || strings.Contains(msg, "wrong-Pa55word") || strings.Contains(msg, pass) {
			t.Fatalf("%s: error %q: want the host, no password", name, msg)
		}
	}
	if s.PowerState() != redfish.PowerOn || len(s.Resets()) != 0 || s.AuthFailures() == 0 {
		t.Fatalf("state %s, resets %v, auth failures %d", s.PowerState(), s.Resets(), s.AuthFailures())
	}
}

func TestCertificateVerification(t *testing.T) {
	s := redfishtest.New(user, pass, redfish.PowerOn)
	defer s.Close()
	ctx := context.Background()

	untrusted := newClient(t, s, redfish.Options{Username: user, Password: pass})
	_, err := untrusted.PowerState(ctx)
	if err == nil || !strings.Contains(err.Error(), "not trusted") || !strings.Contains(err.Error(), "redfish_insecure") || !strings.Contains(err.Error(), s.Host()) {
		t.Fatalf("untrusted certificate: %v", err)
	}
	if err := untrusted.ForceOff(ctx); err == nil || s.PowerState() != redfish.PowerOn {
		t.Fatalf("off through an untrusted certificate: %v, state %s", err, s.PowerState())
	}
	if s.AuthFailures() != 0 {
		t.Fatal("the password went to a server whose certificate was not trusted")
	}

	insecure := newClient(t, s, redfish.Options{Username: user, Password: pass, Insecure: true})
	if st, err := insecure.PowerState(ctx); err != nil || st != redfish.PowerOn {
		t.Fatalf("insecure: %q, %v", st, err)
	}
	trusted := newClient(t, s, redfish.Options{Username: user, Password: pass, RootCAs: s.RootCAs()})
	if st, err := trusted.PowerState(ctx); err != nil || st != redfish.PowerOn {
		t.Fatalf("trusted pool: %q, %v", st, err)
	}
}

func TestParseSystemURL(t *testing.T) {
	tests := []struct{ in, errPart string }{
		{"https://bmc.lan/redfish/v1/Systems/1", ""},
		{"https://10.0.0.5:8443/redfish/v1/Systems/System.Embedded.1/", ""},
		{"http://bmc.lan/redfish/v1/Systems/1", "want https"},
		{"https://root:calvin@bmc.lan/redfish/v1/Systems/1", "credentials do not belong"},
		{"https://bmc.lan/redfish/v1/Managers/1", "want /redfish/v1/Systems/<id>"},
		{"https://bmc.lan/redfish/v1/Systems/", "want /redfish/v1/Systems/<id>"},
		{"https://bmc.lan/redfish/v1/Systems/1/Bios", "want /redfish/v1/Systems/<id>"},
		{"bmc.lan", "not a URL"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			_, err := redfish.ParseSystemURL(tt.in)
			if tt.errPart == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.errPart) || strings.Contains(err.Error(), "calvin") {
				t.Fatalf("error %v; want %q and no password", err, tt.errPart)
			}
		})
	}
}

// A system whose reset target points elsewhere, or that does not allow the
// reset type, gets no POST.
func TestResetTargetChecks(t *testing.T) {
	tests := []struct {
		name    string
		actions map[string]any
		reset   string
		errPart string
	}{
		{"target on another host", map[string]any{"#ComputerSystem.Reset": map[string]any{"target": "https://evil.example/reset"}}, "On", "another host"},
		{"no reset action", map[string]any{}, "On", "no #ComputerSystem.Reset"},
		{"type not allowed", map[string]any{"#ComputerSystem.Reset": map[string]any{
			"target": "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset", "ResetType@Redfish.AllowableValues": []string{"On", "ForceOff"}}}, "GracefulShutdown", "not supported"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			posts := 0
			srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodPost {
					posts++
				}
				_ = json.NewEncoder(w).Encode(map[string]any{"PowerState": "On", "Actions": tt.actions})
			}))
			defer srv.Close()
			c, err := redfish.New(srv.URL+"/redfish/v1/Systems/1", redfish.Options{Username: user, Password: pass, Insecure: true})
			if err != nil {
				t.Fatal(err)
			}
			err = c.Reset(context.Background(), tt.reset)
			if err == nil || !strings.Contains(err.Error(), tt.errPart) || posts != 0 {
				t.Fatalf("Reset: %v (posts %d); want %q", err, posts, tt.errPart)
			}
		})
	}
}

func TestOptionsStringHidesPassword(t *testing.T) {
	o := redfish.Options{Username: user, Password: pass}
	if s := o.String(); strings.Contains(s, pass) || !strings.Contains(s, user) {
		t.Fatalf("Options.String() = %s", s)
	}
}
