package main

import (
	"context"
	"errors"
	"maps"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/config"
	"github.com/rezuscloud/rezuscloud/internal/hass"
	"github.com/rezuscloud/rezuscloud/internal/hass/wsapi"
	"github.com/rezuscloud/rezuscloud/internal/hass/wsapi/fakeha"
	"github.com/rezuscloud/rezuscloud/internal/health"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// TestCloudEnv checks that each platform's credentials reach tofu's
// environment under the names its provider reads, and only its own.
func TestCloudEnv(t *testing.T) {
	c := config.Credentials{
		OCI: config.OCICredentials{TenancyOCID: "ocid1.tenancy.oc1..t", UserOCID: "ocid1.user.oc1..u",
			Fingerprint: "aa:bb", PrivateKey: "-----BEGIN PRIVATE KEY-----\nk\n-----END PRIVATE KEY-----", Region: "eu-frankfurt-1"},
		OpenStack: config.OpenStackCredentials{AuthURL: "https://keystone.invalid:5000/v3", Username: "u", Password: "os-pass",
			ProjectName: "p", UserDomainName: "Default", ProjectDomainName: "Default", Region: "RegionOne"},
	}
	env := cloudEnv(c)
	ostack := env(tenant.ProviderOpenStack)
	want := map[string]string{"OS_AUTH_URL": "https://keystone.invalid:5000/v3", "OS_USERNAME": "u", "OS_PASSWORD": "os-pass",
		"OS_PROJECT_NAME": "p", "OS_USER_DOMAIN_NAME": "Default", "OS_PROJECT_DOMAIN_NAME": "Default", "OS_REGION_NAME": "RegionOne"}
	if len(ostack) != len(want) {
		t.Fatalf("openstack env has %d keys, want %d: %v", len(ostack), len(want), slices.Sorted(maps.Keys(ostack)))
	}
	for k, v := range want {
		if ostack[k] != v {
			t.Errorf("%s = %q, want %q", k, ostack[k], v)
		}
	}
	oci := env(tenant.ProviderOCI)
	if oci["OCI_PRIVATE_KEY"] != c.OCI.PrivateKey.Reveal() || oci["OCI_TENANCY_OCID"] != c.OCI.TenancyOCID || oci["OCI_REGION"] != "eu-frankfurt-1" {
		t.Errorf("oci env: %v", slices.Sorted(maps.Keys(oci)))
	}
	if _, leak := oci["OS_PASSWORD"]; leak {
		t.Error("OpenStack password in the OCI environment")
	}
	if m := env(tenant.ProviderMetal); len(m) != 0 {
		t.Errorf("metal gets credentials: %v", slices.Sorted(maps.Keys(m)))
	}
	// unset credentials are left out, not passed empty
	if m := cloudEnv(config.Credentials{})(tenant.ProviderOpenStack); len(m) != 0 {
		t.Errorf("empty credentials give %v", slices.Sorted(maps.Keys(m)))
	}
}

// TestWake checks both ways of waking a machine: Home Assistant's
// wake_on_lan service when the WebSocket API is up, and our own packet
// when the service fails (to a loopback listener here, never a broadcast).
func TestWake(t *testing.T) {
	ha := fakeha.New("wake-token")
	defer ha.Close()
	client := wsapi.New(wsapi.Options{URL: ha.URL, Token: "wake-token"}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go client.Run(ctx)
	wctx, stop := context.WithTimeout(ctx, 30*time.Second)
	defer stop()
	if err := client.WaitConnected(wctx); err != nil {
		t.Fatal(err)
	}
	l, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	fallback := l.LocalAddr().String()

	if err := wake(wctx, client, "aa:bb:cc:dd:ee:31", fallback); err != nil {
		t.Fatal(err)
	}
	calls := ha.ServiceCalls()
	if len(calls) != 1 || calls[0].Domain != "wake_on_lan" || calls[0].Service != "send_magic_packet" ||
		!strings.Contains(string(calls[0].ServiceData), `"aa:bb:cc:dd:ee:31"`) {
		t.Fatalf("service calls %+v", calls)
	}
	// no such integration in Home Assistant: our own packet goes out
	ha.FailService("wake_on_lan", "send_magic_packet", "not_found", "Service wake_on_lan.send_magic_packet not found.")
	if err := wake(wctx, client, "aa:bb:cc:dd:ee:32", fallback); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 200)
	l.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, _, err := l.ReadFrom(buf)
	if err != nil || n != 102 || buf[101] != 0x32 {
		t.Fatalf("fallback packet: %d bytes, %v", n, err)
	}
}

// TestHealthSeesOperations: the count of running operations the engine
// publishes reaches the health check through the fanout, so that the
// watchdog does not restart the add-on during an apply in a long broker
// outage (issue 19 item 10; the checker's clock is tested in
// internal/health).
func TestHealthSeesOperations(t *testing.T) {
	pubs := fanout{bridge: hass.New(hass.Options{URL: "tcp://127.0.0.1:1", BaseTopic: "rezuscloud"}, nil, nil)}
	c := health.NewChecker(func() error { return errors.New("not connected to the MQTT broker") }, pubs.ops.busy, 10*time.Minute)
	for _, s := range []struct {
		running int
		note    string
	}{
		{2, "but 2 operations are running: not restarting"},
		{1, "but 1 operation is running: not restarting"},
		{0, "unhealthy after 10m0s"},
	} {
		pubs.SetBridgeStatus(s.running)
		note, err := c.Check()
		if err != nil || !strings.Contains(note, s.note) {
			t.Fatalf("%d running: %q, %v; want healthy with %q", s.running, note, err, s.note)
		}
	}
}
