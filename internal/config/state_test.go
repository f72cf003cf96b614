package config

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
)

// TestStateConfig: [state] is empty by default (the data folder); a URL is
// checked for its scheme, host, role, database and sslmode, never holds a
// password, and errors name the key without echoing secrets.
func TestStateConfig(t *testing.T) {
	host, _ := os.Hostname()
	tests := []struct {
		name, body string
		url        string
		instance   string // InstanceName
		err        string
	}{
		{name: "default: the data folder", body: "", instance: host},
		{name: "postgres", body: "[state]\nurl = \"postgres://rezus@db.lan:5432/rezuscloud\"\npassword = \"pg-secret-pw\"\ninstance = \"box-2\"",
			url: "postgres://rezus@db.lan:5432/rezuscloud", instance: "box-2"},
		{name: "postgresql scheme, sslmode require", body: "[state]\nurl = \"postgresql://rezus@10.0.0.5/rc?sslmode=require\"",
			url: "postgresql://rezus@10.0.0.5/rc?sslmode=require", instance: host},
		{name: "sslmode disable", body: "[state]\nurl = \"postgres://rezus@db/rc?sslmode=disable\"", url: "postgres://rezus@db/rc?sslmode=disable", instance: host},
		{name: "wrong scheme", body: "[state]\nurl = \"mysql://rezus@db/rc\"", err: `state.url: scheme "mysql": must be postgres://`},
		{name: "no scheme", body: "[state]\nurl = \"db.lan:5432\"", err: "state.url:"},
		{name: "password in the URL", body: "[state]\nurl = \"postgres://rezus:hunter2-in-url@db/rc\"", err: "state.url: holds a password"},
		{name: "no host", body: "[state]\nurl = \"postgres:///rc\"", err: "state.url: has no host"},
		{name: "no role", body: "[state]\nurl = \"postgres://db/rc\"", err: "state.url: has no user"},
		{name: "no database", body: "[state]\nurl = \"postgres://rezus@db\"", err: "state.url: has no database"},
		{name: "sslmode prefer", body: "[state]\nurl = \"postgres://rezus@db/rc?sslmode=prefer\"", err: "state.url: sslmode=prefer is not offered"},
		{name: "bad instance", body: "[state]\ninstance = \"box 2\"", err: `state.instance: "box 2"`},
		{name: "misspelt", body: "[state]\nuri = \"postgres://rezus@db/rc\"", err: "state.uri: unknown key"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := LoadFile(writeFile(t, "c.toml", tc.body))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %v, want an error with %q", err, tc.err)
				}
				if strings.Contains(err.Error(), "hunter2-in-url") {
					t.Fatalf("the error echoes the password: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.State.URL != tc.url || c.State.InstanceName() != tc.instance {
				t.Errorf("state = %+v, instance %q", c.State, c.State.InstanceName())
			}
			if c.State.Password != "" && !slices.Contains(c.Secrets(), c.State.Password.Reveal()) {
				t.Error("the state password is not among the secrets to redact")
			}
		})
	}
}

// TestStateOptions: the add-on's state section maps onto [state]; empty
// fields (what YAML mode and the API send) mean the defaults; errors name
// the option of the form.
func TestStateOptions(t *testing.T) {
	tests := []struct {
		name, options string
		want          State
		err           string
	}{
		{name: "absent", options: `{"mqtt":{"url":"tcp://127.0.0.1:1884"}}`},
		{name: "empty strings", options: `{"mqtt":{"url":"tcp://127.0.0.1:1884"},"state":{"url":"","password":"","instance":""}}`},
		{name: "set", options: `{"mqtt":{"url":"tcp://127.0.0.1:1884"},"state":{"passphrase":"0123456789abcdefXYZ",
			"url":"postgres://rezus@db.lan:5432/rezuscloud","password":"pg-option-pw","instance":"ha-kitchen"}}`,
			want: State{URL: "postgres://rezus@db.lan:5432/rezuscloud", Password: "pg-option-pw", Instance: "ha-kitchen"}},
		{name: "bad url", options: `{"mqtt":{"url":"tcp://127.0.0.1:1884"},"state":{"url":"http://db.lan"}}`, err: "state.url: scheme \"http\""},
		{name: "bad instance", options: `{"mqtt":{"url":"tcp://127.0.0.1:1884"},"state":{"instance":"-x"}}`, err: "state.instance:"},
		{name: "misspelt", options: `{"mqtt":{"url":"tcp://127.0.0.1:1884"},"state":{"urll":"postgres://a@b/c"}}`, err: "urll"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := LoadAddon(context.Background(), writeFile(t, "options.json", tc.options), Supervisor{})
			if !loadedAsWanted(t, err, tc.err) {
				return
			}
			if c.State != tc.want {
				t.Errorf("state = %+v, want %+v", c.State, tc.want)
			}
			if tc.want.Password != "" && !slices.Contains(c.Secrets(), tc.want.Password.Reveal()) {
				t.Error("the state password is not among the secrets to redact")
			}
		})
	}
}
