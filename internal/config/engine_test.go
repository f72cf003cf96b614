package config

import (
	"testing"
	"time"
)

// TestEngineDurations: [engine] unreachable_after and drift_interval are
// optional durations ("0" turns drift off); anything else names the key.
func TestEngineDurations(t *testing.T) {
	tests := []struct {
		name, body         string
		unreachable, drift time.Duration
		err                string
	}{
		{"absent", "", 0, 0, ""},
		{"set", "[engine]\nunreachable_after = \"3m\"\ndrift_interval = \"30m\"", 3 * time.Minute, 30 * time.Minute, ""},
		{"drift off", "[engine]\ndrift_interval = \"0\"", 0, -1, ""},
		{"not a duration", "[engine]\nunreachable_after = \"ten minutes\"", 0, 0, `engine.unreachable_after: "ten minutes" must be a duration`},
		{"too short", "[engine]\ndrift_interval = \"10ms\"", 0, 0, "engine.drift_interval"},
		{"misspelt", "[engine]\nunreachable = \"1m\"", 0, 0, "engine.unreachable: unknown key"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := LoadFile(writeFile(t, "c.toml", tc.body))
			if !loadedAsWanted(t, err, tc.err) {
				return
			}
			if c.Engine.Unreachable() != tc.unreachable || c.Engine.Drift() != tc.drift {
				t.Errorf("engine = %+v: unreachable %v drift %v", c.Engine, c.Engine.Unreachable(), c.Engine.Drift())
			}
		})
	}
}
