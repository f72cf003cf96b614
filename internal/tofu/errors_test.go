package tofu

import (
	"errors"
	"os"
	"testing"
)

// TestProviderFailure: only tofu's own diagnostics about finding and
// installing providers make an ErrProvider; a failure that merely mentions
// a provider does not.
func TestProviderFailure(t *testing.T) {
	f, err := os.Open("testdata/real/init-fail.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var recorded []Diagnostic
	if err := ParseStream(f, nil, func(ev Event) {
		if ev.Diagnostic != nil {
			recorded = append(recorded, *ev.Diagnostic)
		}
	}); err != nil {
		t.Fatal(err)
	}
	diag := func(summary, detail string) []Diagnostic {
		return []Diagnostic{{Severity: "error", Summary: summary, Detail: detail}}
	}
	for _, c := range []struct {
		name  string
		diags []Diagnostic
		want  bool
	}{
		{"recorded init of a missing provider", recorded, true},
		{"query failed", diag("Failed to query available provider packages", "Could not retrieve the list of available versions for provider example/nope"), true},
		{"install failed", diag("Failed to install provider", "Error while installing hashicorp/null v3.2.0: checksum mismatch"), true},
		{"incompatible version", diag("Incompatible provider version", "Provider registry.opentofu.org/x/y v1.0.0 does not have a package available for your current platform"), true},
		{"init log line", diag("Error: Failed to resolve provider packages", ""), true},
		{"plan without init", diag("Required plugins are not installed", "The installed provider plugins are not consistent"), true},
		{"syntax error in a provider block", diag("Unsupported argument", `An argument named "regoin" is not expected here (in provider "openstack").`), false},
		{"backend error", diag("Failed to get existing workspaces", "the provider of the state answered 500"), false},
		{"invalid JSON", diag("Invalid JSON", "provider block: expected object"), false},
		{"a warning", []Diagnostic{{Severity: "warning", Summary: "Failed to install provider"}}, false},
		{"none", nil, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := providerFailure(c.diags); got != c.want {
				t.Fatalf("providerFailure = %v, want %v (%+v)", got, c.want, c.diags)
			}
		})
	}
}

// TestInitErrorClassification: newError labels an init failure by its
// diagnostics, not by words in its text.
func TestInitErrorClassification(t *testing.T) {
	r := bareRunner(t, t.TempDir())
	ws, err := r.Workspace("lab", WorkspaceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		summary, detail, stderr string
		want                    bool
	}{
		{"Failed to resolve provider packages", "Could not resolve provider example/nope", "", true},
		{"Unsupported argument", `An argument named "x" is not expected here in provider "openstack".`, "", false},
		{"Error loading state", "", "provider registry unreachable", false},
	} {
		e := ws.newError("init", 1, []Diagnostic{{Severity: "error", Summary: c.summary, Detail: c.detail}}, c.stderr, nil)
		if got := errors.Is(e, ErrProvider); got != c.want {
			t.Errorf("%s: ErrProvider = %v, want %v (%v)", c.summary, got, c.want, e)
		}
	}
}
