package config

import (
	"strings"
	"testing"
	"time"
)

// TestPXE: off by default with the contract's defaults, every key read,
// and each bad value refused with its key; several at once.
func TestPXE(t *testing.T) {
	c, err := LoadFile(writeFile(t, "c.toml", ""))
	if err != nil {
		t.Fatal(err)
	}
	if c.PXE.Enabled || c.PXE.Interface != "" || c.PXE.HTTPPort != 8098 || c.PXE.WindowDuration() != 30*time.Minute ||
		len(c.PXE.Arch) != 1 || c.PXE.Arch[0] != "amd64" {
		t.Fatalf("defaults %+v", c.PXE)
	}
	c, err = LoadFile(writeFile(t, "c.toml", `
[pxe]
enabled = true
interface = "enp3s0"
http_port = 9000
window = "2h"
arch = ["amd64", "arm64"]
[credentials.ipmi]
username = "ADMIN"
password = "ipmi-secret-1"
`))
	if err != nil {
		t.Fatal(err)
	}
	if !c.PXE.Enabled || c.PXE.Interface != "enp3s0" || c.PXE.HTTPPort != 9000 || c.PXE.WindowDuration() != 2*time.Hour || len(c.PXE.Arch) != 2 {
		t.Fatalf("read %+v", c.PXE)
	}
	if c.Credentials.IPMI.Username != "ADMIN" || c.Credentials.IPMI.Password.Reveal() != "ipmi-secret-1" {
		t.Fatalf("ipmi %+v", c.Credentials.IPMI)
	}
	found := false
	for _, s := range c.Secrets() {
		found = found || s == "ipmi-secret-1"
	}
	if !found {
		t.Fatal("the IPMI password is not among the secrets scrubbed from logs")
	}

	tests := []struct{ name, body, want string }{
		{"port", "[pxe]\nhttp_port = 0", "pxe.http_port: 0 is out of range"},
		{"port taken", "[pxe]\nhttp_port = 69", "pxe.http_port: 69 is a port the responder uses"},
		{"window", "[pxe]\nwindow = \"forever\"", `pxe.window: "forever" must be a duration from 1m to 24h`},
		{"window short", "[pxe]\nwindow = \"10s\"", "pxe.window"},
		{"window long", "[pxe]\nwindow = \"48h\"", "pxe.window"},
		{"arch", "[pxe]\narch = [\"riscv64\"]", `pxe.arch: "riscv64" is not amd64 or arm64`},
		{"arch twice", "[pxe]\narch = [\"amd64\", \"amd64\"]", "listed twice"},
		{"arch empty", "[pxe]\narch = []", "pxe.arch: is empty"},
		{"interface", "[pxe]\ninterface = \"../eth0\"", "pxe.interface"},
		{"interface long", "[pxe]\ninterface = \"a-very-long-interface0\"", "pxe.interface"},
		{"unknown key", "[pxe]\nenable = true", "pxe.enable: unknown key"},
		{"wrong type", "[pxe]\nenabled = \"yes\"", ":2:11:"},
		{"ipmi user", "[credentials.ipmi]\nusername = \"a-user-name-over-16\"", "credentials.ipmi.username: is 19 characters"},
		{"ipmi password", "[credentials.ipmi]\npassword = \"a-password-that-is-too-long\"", "credentials.ipmi.password: is 27 characters"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadFile(writeFile(t, "c.toml", tc.body))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error with %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "a-password-that") {
				t.Fatal("the password is in the error")
			}
		})
	}
	_, err = LoadFile(writeFile(t, "c.toml", "[pxe]\nhttp_port = 0\nwindow = \"x\"\narch = [\"mips\"]"))
	if err == nil || !strings.Contains(err.Error(), "http_port") || !strings.Contains(err.Error(), "window") || !strings.Contains(err.Error(), "arch") {
		t.Fatalf("not every problem at once: %v", err)
	}
}
