package topic

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	tests := []struct {
		s          string
		base, pref bool // valid as base topic, as discovery prefix
	}{
		{"rezuscloud", true, true},
		{"Rezus_cloud-2", true, true},
		{"homeassistant", true, true},
		{"", false, false},
		{"a/b", false, false},
		{"a+", false, false},
		{"a#", false, false},
		{"a b", false, true},
		{"a.b", false, true},
		{"a\x00b", false, false},
	}
	for _, tc := range tests {
		if err := CheckBase(tc.s); (err == nil) != tc.base {
			t.Errorf("CheckBase(%q) = %v, want valid=%v", tc.s, err, tc.base)
		}
		if err := CheckPrefix(tc.s); (err == nil) != tc.pref {
			t.Errorf("CheckPrefix(%q) = %v, want valid=%v", tc.s, err, tc.pref)
		}
	}
}

// TestMatchesAddonSchema keeps the patterns equal to config.yaml's schema,
// so the Supervisor refuses exactly what the add-on refuses.
func TestMatchesAddonSchema(t *testing.T) {
	b, err := os.ReadFile("../../config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	schema := string(b)[strings.Index(string(b), "\nschema:"):]
	for key, want := range map[string]string{"base_topic": BasePattern, "discovery_prefix": PrefixPattern} {
		// a field of the mqtt section
		m := regexp.MustCompile(`\n    ` + key + `: "match\((.*)\)"`).FindStringSubmatch(schema)
		if m == nil {
			t.Fatalf("config.yaml schema has no match(...) for %s", key)
		}
		if m[1] != want {
			t.Errorf("config.yaml %s is match(%s), package topic has %s", key, m[1], want)
		}
	}
}
