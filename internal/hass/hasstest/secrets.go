package hasstest

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
)

var secretPatterns = []struct {
	name string
	re   *regexp.Regexp
}{
	{"PEM block", regexp.MustCompile(`-----BEGIN [A-Z0-9 ]+-----`)},
	{"BEGIN marker", regexp.MustCompile(`\bBEGIN (RSA |EC |OPENSSH |ENCRYPTED |PGP )?(PRIVATE KEY|CERTIFICATE|PUBLIC KEY|MESSAGE)`)},
	{"JWT", regexp.MustCompile(`eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}`)},
	{"bearer token", regexp.MustCompile(`(?i)bearer\s+[A-Za-z0-9._~+/=-]{16,}`)},
	{"kubeconfig", regexp.MustCompile(`(?i)(client-key-data|client-certificate-data|certificate-authority-data)`)},
	{"talosconfig", regexp.MustCompile(`(?i)\b(talosconfig|machine\.token|cluster\.secret|bootstraptoken|secretboxencryptionsecret|aescbcencryptionsecret)\b`)},
	{"bootstrap token", regexp.MustCompile(`\b[a-z0-9]{6}\.[a-z0-9]{16}\b`)},
	{"OCI OCID of a key", regexp.MustCompile(`ocid1\.(key|vaultsecret|credential)\.`)},
	{"long base64", regexp.MustCompile(`[A-Za-z0-9+/]{64,}={0,2}`)},
}

// secretKeys are JSON keys whose non-empty values are secrets.
var secretKeys = regexp.MustCompile(`(?i)^(password|passwd|passphrase|secret|token|access_token|api_key|apikey|private_key|key_data|kubeconfig|talosconfig|client_secret|fingerprint)$`)

// ScanSecrets reports anything in payload that looks like a secret: PEM
// blocks, "BEGIN … KEY" markers, JWTs and bearer tokens, kubeconfig and
// talosconfig fields, Kubernetes bootstrap tokens, long base64 runs, and
// JSON keys named like secrets with non-empty values. Extra literal
// secrets (known passwords of the test) can be passed to find them verbatim.
func ScanSecrets(payload []byte, known ...string) []string {
	var found []string
	s := string(payload)
	for _, p := range secretPatterns {
		if m := p.re.FindString(s); m != "" {
			found = append(found, fmt.Sprintf("%s: %q", p.name, shorten(m)))
		}
	}
	for _, k := range known {
		if k != "" && strings.Contains(s, k) {
			found = append(found, fmt.Sprintf("known secret %q", shorten(k)))
		}
	}
	var v any
	if json.Unmarshal(payload, &v) == nil {
		walkKeys(v, "", &found)
	}
	return found
}

func walkKeys(v any, path string, found *[]string) {
	switch x := v.(type) {
	case map[string]any:
		for k, c := range x {
			p := path + "." + k
			if secretKeys.MatchString(k) {
				if s, ok := c.(string); !ok || s != "" {
					*found = append(*found, "secret-named key "+p)
				}
			}
			walkKeys(c, p, found)
		}
	case []any:
		for i, c := range x {
			walkKeys(c, fmt.Sprintf("%s[%d]", path, i), found)
		}
	}
}

func shorten(s string) string {
	if len(s) > 24 {
		return s[:12] + "…"
	}
	return s
}
