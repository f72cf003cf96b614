package addoncheck

import (
	"strings"
	"testing"
)

// TestHostNetworkForNetworkBoot: options that offer network boot need
// host_network: true, in the nested (§11.8) and in the flat shape.
func TestHostNetworkForNetworkBoot(t *testing.T) {
	base := readAt(t, "../..", "config.yaml")
	if strings.Contains(base, "pxe") {
		t.Skip("config.yaml already offers network boot: TestRepository checks it")
	}
	nested := "\n  pxe:\n    enabled: bool\n    interface: str?\n    http_port: port\n    window: str\n    arch:\n      - list(amd64|arm64)\n"
	flat := "\n  pxe_enabled: bool\n"
	withSchema := func(extra string) string { return strings.Replace(base, "schema:\n", "schema:"+extra, 1) }
	for _, c := range []struct {
		name, conf, want string
	}{
		{"nested without host_network", withSchema(nested), `host_network: must be true: option "pxe" offers network boot`},
		{"flat without host_network", withSchema(flat), `option "pxe_enabled" offers network boot`},
		{"host_network false", strings.Replace(withSchema(flat), "init: false\n", "init: false\nhost_network: false\n", 1), "host_network: must be true"},
		{"host_network true", strings.Replace(withSchema(nested), "init: false\n", "init: false\nhost_network: true\n", 1), ""},
		{"no network boot", base, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			if !strings.Contains(c.conf, "schema:") {
				t.Fatal("config.yaml has no schema: the test needs one")
			}
			_, errs := CheckConfig("config.yaml", []byte(c.conf))
			var host []string
			for _, err := range errs {
				if strings.Contains(err.Error(), "host_network") {
					host = append(host, err.Error())
				}
			}
			switch {
			case c.want == "" && len(host) > 0:
				t.Fatalf("unexpected: %v", host)
			case c.want != "" && (len(host) != 1 || !strings.Contains(host[0], c.want)):
				t.Fatalf("got %v, want one error with %q", host, c.want)
			}
		})
	}
}
