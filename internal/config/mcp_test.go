package config

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMCPConfig: [mcp] is off by default with port 8097, no writes and a
// default listen address by mode; bad values are refused naming the key.
func TestMCPConfig(t *testing.T) {
	tests := []struct {
		name, body string
		check      func(t *testing.T, c Config)
		err        string
	}{
		{name: "defaults", body: "", check: func(t *testing.T, c Config) {
			if c.MCP.Enabled || c.MCP.Writes || c.MCP.Port != 8097 || c.MCP.Token != "" || c.MCP.Listen != "" {
				t.Errorf("defaults: %+v", c.MCP)
			}
			ifaces := []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("192.168.1.5"),
				netip.MustParseAddr("::ffff:172.30.33.4")}
			for _, tc := range []struct {
				addon  bool
				ifaces []netip.Addr
				want   string
			}{
				{false, ifaces, "127.0.0.1:8097"},    // standalone: loopback, never the LAN address
				{true, ifaces, "172.30.33.4:8097"},   // add-on: the Supervisor's network
				{true, ifaces[:2], "127.0.0.1:8097"}, // no Supervisor network: loopback
				{true, nil, "127.0.0.1:8097"},
			} {
				if got := c.MCP.ListenAddr(tc.addon, tc.ifaces); got != tc.want {
					t.Errorf("listen (add-on %v, %v) = %s, want %s", tc.addon, tc.ifaces, got, tc.want)
				}
			}
			if c.HomeAssistant.AssistScripts {
				t.Error("assist_scripts on by default")
			}
		}},
		{name: "set", body: "[mcp]\nenabled = true\nport = 9000\nwrites = true\nlisten = \"::1\"\n" +
			"token = \"abcdefghijklmnopqrstuvwxyz012345\"\n[homeassistant]\nassist_scripts = true\n",
			check: func(t *testing.T, c Config) {
				if !c.MCP.Enabled || !c.MCP.Writes || c.MCP.Port != 9000 || c.MCP.Token.Reveal() != "abcdefghijklmnopqrstuvwxyz012345" {
					t.Errorf("set: %+v", c.MCP)
				}
				if got := c.MCP.ListenAddr(true, []netip.Addr{netip.MustParseAddr("172.30.33.4")}); got != "[::1]:9000" {
					t.Errorf("listen = %s", got)
				}
				if !c.HomeAssistant.AssistScripts {
					t.Error("assist_scripts not read")
				}
				if !strings.Contains(strings.Join(c.Secrets(), " "), "abcdefghijklmnopqrstuvwxyz012345") {
					t.Error("the MCP token is not among the secrets to redact")
				}
			}},
		{name: "port 0", body: "[mcp]\nport = 0", err: "mcp.port: 0 is out of range"},
		{name: "port high", body: "[mcp]\nport = 70000", err: "mcp.port: 70000 is out of range"},
		{name: "short token", body: "[mcp]\ntoken = \"short\"", err: "mcp.token: is shorter than 24"},
		{name: "token with a slash", body: "[mcp]\ntoken = \"abcdefghijklmnopqrstuvwxyz/12345\"", err: "mcp.token: may only hold"},
		{name: "listen host name", body: "[mcp]\nlisten = \"lan.example\"", err: "mcp.listen: \"lan.example\" must be an IP address"},
		{name: "listen with port", body: "[mcp]\nlisten = \"127.0.0.1:8097\"", err: "mcp.listen"},
		{name: "misspelt", body: "[mcp]\nwrite = true", err: "mcp.write: unknown key"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := LoadFile(writeFile(t, "c.toml", tc.body))
			if !loadedAsWanted(t, err, tc.err) {
				return
			}
			tc.check(t, c)
		})
	}
}

// TestMCPToken: a configured token wins; else one is generated once, 0600,
// URL-safe, and read back unchanged; a damaged file is refused.
func TestMCPToken(t *testing.T) {
	dir := t.TempDir()
	tok, created, err := MCPToken(dir, "")
	if err != nil || !created {
		t.Fatalf("first: %v, created %v", err, created)
	}
	if err := CheckMCPToken(tok.Reveal()); err != nil {
		t.Errorf("generated token: %v", err)
	}
	fi, err := os.Stat(filepath.Join(dir, MCPTokenFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v %v", err, fi.Mode())
	}
	again, created, err := MCPToken(dir, "")
	if err != nil || created || again != tok {
		t.Errorf("second read: %v, created %v, same %v", err, created, again == tok)
	}
	if got, _, _ := MCPToken(dir, "configured-token-0123456789abc"); got != "configured-token-0123456789abc" {
		t.Errorf("configured token not used: %v", got)
	}
	if err := os.WriteFile(filepath.Join(dir, MCPTokenFile), []byte("short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := MCPToken(dir, ""); err == nil || !strings.Contains(err.Error(), "shorter than 24") {
		t.Errorf("damaged file: %v", err)
	}
}
