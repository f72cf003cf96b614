package addoncheck

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v4"
)

// TestWorkflowsLint runs actionlint over every GitHub workflow: syntax,
// expressions and their types, job needs, runner labels, the inputs of
// well-known actions, and with shellcheck on PATH the run: scripts. The
// workflows cannot run here, so this is what checks them before GitHub
// does. actionlint is a pinned tool (tools/actionlint, built by make
// tools: as a library it would need another go.yaml.in/yaml/v4 than the
// one Talos machinery pins); $REZUSCLOUD_ACTIONLINT names it, else
// .tools/bin/actionlint. Without it the test is skipped, and fails in CI.
func TestWorkflowsLint(t *testing.T) {
	files, _ := filepath.Glob("../../.github/workflows/*.y*ml")
	if len(files) < 2 {
		t.Fatalf("workflows: %v, want at least image.yaml and test.yaml", files)
	}
	bin := os.Getenv("REZUSCLOUD_ACTIONLINT")
	if bin == "" {
		bin, _ = filepath.Abs("../../.tools/bin/actionlint")
	}
	if _, err := os.Stat(bin); err != nil {
		msg := "actionlint not found at " + bin + "; run make tools (or set REZUSCLOUD_ACTIONLINT)"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	sc, err := exec.LookPath("shellcheck")
	if err != nil {
		t.Log("shellcheck is not installed: the run: scripts are not checked (make test installs it)")
	}
	type finding struct {
		Message  string `json:"message"`
		Filepath string `json:"filepath"`
		Line     int    `json:"line"`
		Column   int    `json:"column"`
		Kind     string `json:"kind"`
	}
	lint := func(files ...string) []finding {
		out, err := exec.Command(bin, append([]string{"-format", "{{json .}}", "-shellcheck=" + sc, "-pyflakes="}, files...)...).Output()
		var found []finding
		if jerr := json.Unmarshal(out, &found); jerr != nil {
			t.Fatalf("actionlint: %v; output %q; %v", err, out, jerr)
		}
		if err != nil && len(found) == 0 {
			t.Fatalf("actionlint failed: %v", err)
		}
		return found
	}
	// the linter finds what it should: a typo'd key and an unknown input
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("on: push\njobs:\n  t:\n    runs-on: ubuntu-latest\n    stepz: []\n    steps:\n      - uses: actions/checkout@v6\n        with:\n          persist-credential: false\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := lint(bad); len(got) < 2 {
		t.Fatalf("actionlint missed the mistakes of a broken workflow: %+v", got)
	}
	for _, e := range lint(files...) {
		t.Errorf("%s:%d:%d: %s [%s]", e.Filepath, e.Line, e.Column, e.Message, e.Kind)
	}
}

// TestImageWorkflowMatchesManifest: the image the Supervisor pulls is the
// one the image workflow publishes: config.yaml's image is
// ghcr.io/<owner>/<IMAGE_NAME> of the repository config.yaml's url names,
// the workflow builds exactly config.yaml's architectures, tags the image
// with config.yaml's version (read from config.yaml, checked against the
// release tag), and the version has a CHANGELOG section (the update dialog
// shows it).
func TestImageWorkflowMatchesManifest(t *testing.T) {
	var man struct {
		Version string   `yaml:"version"`
		Image   string   `yaml:"image"`
		URL     string   `yaml:"url"`
		Arch    []string `yaml:"arch"`
	}
	readYAMLFile(t, "../../config.yaml", &man)
	var wf struct {
		Env  map[string]string `yaml:"env"`
		On   map[string]any    `yaml:"on"`
		Jobs map[string]struct {
			Steps []struct {
				ID   string            `yaml:"id"`
				Uses string            `yaml:"uses"`
				Run  string            `yaml:"run"`
				With map[string]string `yaml:"with"`
			} `yaml:"steps"`
		} `yaml:"jobs"`
	}
	readYAMLFile(t, "../../.github/workflows/image.yaml", &wf)

	var arches []string
	if err := json.Unmarshal([]byte(wf.Env["ARCHITECTURES"]), &arches); err != nil {
		t.Fatalf("image.yaml env ARCHITECTURES %q: %v", wf.Env["ARCHITECTURES"], err)
	}
	if !slices.Equal(slices.Sorted(slices.Values(arches)), slices.Sorted(slices.Values(man.Arch))) {
		t.Errorf("image.yaml builds %v, config.yaml promises %v", arches, man.Arch)
	}
	owner := strings.Split(strings.TrimPrefix(man.URL, "https://github.com/"), "/")[0]
	if want := "ghcr.io/" + owner + "/" + wf.Env["IMAGE_NAME"]; man.Image != want {
		t.Errorf("config.yaml image %q, but image.yaml publishes %s (ghcr.io/<owner of %s>/IMAGE_NAME)", man.Image, want, man.URL)
	}
	if _, ok := wf.On["release"]; !ok {
		t.Error("image.yaml does not publish on a release")
	}
	var version, tags, push bool
	for _, j := range wf.Jobs {
		for _, s := range j.Steps {
			if s.ID == "version" && strings.Contains(s.Run, "yq -r '.version' config.yaml") &&
				strings.Contains(s.Run, "yq -r '.image' config.yaml") && strings.Contains(s.Run, `"${RELEASE_TAG#v}" != "${version}"`) {
				version = true
			}
			if strings.HasPrefix(s.Uses, "home-assistant/builder/actions/build-image@") {
				tags = strings.Contains(s.With["image-tags"], "needs.init.outputs.version") &&
					s.With["version"] == "${{ needs.init.outputs.version }}"
				push = s.With["push"] == "${{ needs.init.outputs.publish }}"
			}
		}
	}
	if !version {
		t.Error("image.yaml does not read version and image from config.yaml and check the release tag against it")
	}
	if !tags || !push {
		t.Errorf("image.yaml's build step does not tag with config.yaml's version (tags %v) or push only when publishing (push %v)", tags, push)
	}
	cl, err := os.ReadFile("../../CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^## \[` + regexp.QuoteMeta(man.Version) + `\]`).Match(cl) {
		t.Errorf("CHANGELOG.md has no ## [%s] section for config.yaml's version", man.Version)
	}
}

// TestTestWorkflow: the test workflow runs make test, the command .ci/run
// and CONTRIBUTING.md give, on pushes.
func TestTestWorkflow(t *testing.T) {
	var wf struct {
		On   map[string]any `yaml:"on"`
		Jobs map[string]struct {
			Steps []struct {
				Run string `yaml:"run"`
			} `yaml:"steps"`
		} `yaml:"jobs"`
	}
	readYAMLFile(t, "../../.github/workflows/test.yaml", &wf)
	if _, ok := wf.On["push"]; !ok {
		t.Error("test.yaml does not run on push")
	}
	runs := false
	for _, j := range wf.Jobs {
		for _, s := range j.Steps {
			runs = runs || regexp.MustCompile(`(?m)^\s*make test\s*$`).MatchString(s.Run)
		}
	}
	if !runs {
		t.Error("test.yaml has no step that runs make test")
	}
	ci, err := os.ReadFile("../../.ci/run")
	if err != nil || !regexp.MustCompile(`(?m)^make test$`).Match(ci) {
		t.Errorf(".ci/run does not run make test: %v", err)
	}
}

func readYAMLFile(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
