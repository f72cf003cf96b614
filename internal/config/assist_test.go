package config

import (
	"context"
	"strings"
	"testing"
)

// TestAssistExpose: the option is off unless set, in the TOML file and in
// the add-on options, and a wrong type is an error naming the place.
func TestAssistExpose(t *testing.T) {
	tests := []struct {
		name, body string
		want       bool
		err        string
	}{
		{"absent", "", false, ""},
		{"off", "[homeassistant]\nassist_expose = false", false, ""},
		{"on", "[homeassistant]\nassist_expose = true", true, ""},
		{"not a bool", "[homeassistant]\nassist_expose = \"yes\"", false, ":2:17:"},
		{"misspelt", "[homeassistant]\nassist_exposed = true", false, "homeassistant.assist_exposed: unknown key"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := LoadFile(writeFile(t, "c.toml", tc.body))
			if !loadedAsWanted(t, err, tc.err) {
				return
			}
			if c.HomeAssistant.AssistExpose != tc.want {
				t.Errorf("assist_expose = %v, want %v", c.HomeAssistant.AssistExpose, tc.want)
			}
		})
	}
}

func TestAssistExposeAddon(t *testing.T) {
	tests := []struct {
		name, options string
		token         Secret
		want          bool
	}{
		{"default off", `{"mqtt":{"url":"tcp://127.0.0.1:1884"}}`, "sup-token", false},
		{"on", `{"mqtt":{"url":"tcp://127.0.0.1:1884"},"assist":{"expose":true}}`, "sup-token", true},
		{"on, flat (0.1.0)", `{"mqtt_url":"tcp://127.0.0.1:1884","assist_expose":true}`, "", true},
		// kept without a Supervisor token too: the link is off then, but
		// the choice is still the user's
		{"on without token", `{"mqtt":{"url":"tcp://127.0.0.1:1884"},"assist":{"expose":true}}`, "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := LoadAddon(context.Background(), writeFile(t, "options.json", tc.options), Supervisor{Token: tc.token})
			if err != nil {
				t.Fatal(err)
			}
			if c.HomeAssistant.AssistExpose != tc.want {
				t.Errorf("assist_expose = %v, want %v", c.HomeAssistant.AssistExpose, tc.want)
			}
		})
	}
	if _, err := LoadAddon(context.Background(), writeFile(t, "options.json",
		`{"mqtt":{"url":"tcp://127.0.0.1:1884"},"assist":{"expose":"yes"}}`), Supervisor{}); err == nil ||
		!strings.Contains(err.Error(), "expose") {
		t.Errorf("a string for assist_expose: %v", err)
	}
}
