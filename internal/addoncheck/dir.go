package addoncheck

import (
	"bytes"
	"errors"
	"fmt"
	"image/png"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v4"
)

// CheckDir checks an add-on repository whose root holds repository.yaml
// and the add-on itself (config.yaml, translations/, icon.png, logo.png).
// Warnings are what the Supervisor only warns about but still accepts.
func CheckDir(dir string) (errs, warnings []error) {
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
			return nil
		}
		return b
	}
	if b := read("repository.yaml"); b != nil {
		errs = append(errs, CheckRepository("repository.yaml", b)...)
	}
	b := read("config.yaml")
	if b == nil {
		return errs, warnings
	}
	man, cerrs := CheckConfig("config.yaml", b)
	errs = append(errs, cerrs...)
	warnings = append(warnings, legacyMaps(b)...)

	trs, _ := filepath.Glob(filepath.Join(dir, "translations", "*.yaml"))
	if len(trs) == 0 {
		errs = append(errs, errors.New("translations/en.yaml: missing"))
	}
	hasEN := false
	for _, p := range trs {
		name := "translations/" + filepath.Base(p)
		hasEN = hasEN || name == "translations/en.yaml"
		if tb := read(name); tb != nil {
			errs = append(errs, CheckTranslations(name, tb, man.Schema)...)
		}
	}
	if len(trs) > 0 && !hasEN {
		errs = append(errs, errors.New("translations/en.yaml: missing (the fallback language)"))
	}
	if en, err := os.ReadFile(filepath.Join(dir, "translations", "en.yaml")); err == nil {
		errs = append(errs, checkClearable(man.Schema, en)...)
	}
	errs = append(errs, checkImage1(dir, "icon.png", func(w, h int) string {
		if w != h || w < 64 || w > 512 {
			return fmt.Sprintf("is %d×%d; the store wants a square icon of about 128×128", w, h)
		}
		return ""
	})...)
	errs = append(errs, checkImage1(dir, "logo.png", func(w, h int) string {
		if w < h || w > 1000 {
			return fmt.Sprintf("is %d×%d; the store wants a wide logo of about 250×100", w, h)
		}
		return ""
	})...)
	errs = append(errs, strayConfigs(dir)...)
	return errs, warnings
}

func checkImage1(dir, name string, size func(w, h int) string) []error {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return []error{fmt.Errorf("%s: must sit next to config.yaml (the store shows a puzzle piece without it): %w", name, err)}
	}
	cfg, err := png.DecodeConfig(bytes.NewReader(b))
	if err != nil {
		return []error{fmt.Errorf("%s: not a PNG: %w", name, err)}
	}
	if msg := size(cfg.Width, cfg.Height); msg != "" {
		return []error{fmt.Errorf("%s: %s", name, msg)}
	}
	return nil
}

// strayConfigs finds config.{json,yaml,yml} files other than the root one
// outside dot folders and rootfs: the Supervisor reads each as an add-on
// (store/data.py _find_app_configs), so a test fixture would become a
// broken add-on in every user's store.
func strayConfigs(dir string) []error {
	var errs []error
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		if d.IsDir() {
			if rel != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "rootfs") {
				return filepath.SkipDir
			}
			return nil
		}
		switch d.Name() {
		case "config.json", "config.yaml", "config.yml":
			if rel != "config.yaml" {
				errs = append(errs, fmt.Errorf("%s: the Supervisor would read it as another add-on; rename it", rel))
			}
		}
		return nil
	})
	return errs
}

// legacyMaps warns about map types deprecated since Supervisor 2026.07.
func legacyMaps(b []byte) []error {
	var m struct {
		Map []struct {
			Type string `yaml:"type"`
		} `yaml:"map"`
	}
	if yaml.Unmarshal(b, &m) != nil {
		return nil
	}
	var out []error
	for _, e := range m.Map {
		if to, ok := legacyMapTypes[e.Type]; ok {
			out = append(out, fmt.Errorf("config.yaml: map type %s is legacy since Supervisor 2026.07; %s replaces it (older Supervisors do not know %s)", e.Type, to, to))
		}
	}
	return out
}

// checkClearable: an optional field must accept "" (a user who clears it
// in YAML mode, or a script through the API, sends "", and the Supervisor
// refuses to save what does not fit), unless its description tells how to
// clear it there (a passphrase with a minimum length cannot accept "").
func checkClearable(schema map[string]*yaml.Node, en []byte) []error {
	var tr yaml.Node
	if yaml.Unmarshal(en, &tr) != nil || len(tr.Content) == 0 {
		return nil // CheckTranslations reports it
	}
	var errs []error
	for _, path := range EmptyRefused(schema) {
		n := get(tr.Content[0], "configuration")
		for i, k := range strings.Split(path, ".") {
			if i > 0 {
				n = get(n, "fields")
			}
			n = get(n, k)
		}
		if d := get(n, "description"); d != nil && strings.Contains(d.Value, "YAML") {
			continue
		}
		errs = append(errs, fmt.Errorf("config.yaml: schema.%s: optional, but its type refuses \"\": a user who clears it in YAML mode cannot save; accept the empty string (e.g. match(^(?:…)?$)?) or say in its description how to clear it in YAML mode", path))
	}
	return errs
}
