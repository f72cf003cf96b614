package config

import (
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/rezuscloud/rezuscloud/internal/safefile"
)

// Where an add-on may read the OCI key file from: its own config folder
// (/config, addon_configs/<repo>_rezuscloud on the host) or the share folder.
var ociKeyDirs = []string{"/config", "/share"}

// maxKeyFile bounds what is read from oci_private_key_file: an RSA key of
// 8192 bits is under 7 KB in PEM.
const maxKeyFile = 64 << 10

// pemArmor finds the BEGIN and END lines of a PEM block, also when the
// newlines between them are gone (Home Assistant's options form is a
// single-line input and strips them).
var pemArmor = regexp.MustCompile(`-----BEGIN ([A-Z0-9 ]+)-----(?s)(.*?)-----END ([A-Z0-9 ]+)-----`)

// normalizePrivateKey returns the OCI API signing key as a PEM block that
// decodes: a well-formed key unchanged (trimmed, with a final newline), a
// flattened one (newlines stripped or turned into spaces or literal "\n")
// re-wrapped at 64 characters. It then parses the key (PKCS#1 or PKCS#8,
// RSA, unencrypted) and refuses anything else. Errors describe the problem
// and never contain the key.
func normalizePrivateKey(key Secret) (Secret, error) {
	s := strings.TrimSpace(key.Reveal())
	if s == "" {
		return "", nil
	}
	der, typ, err := decodePEM(s)
	if err != nil {
		return "", err
	}
	if err := checkPrivateKey(typ, der); err != nil {
		return "", err
	}
	return Secret(string(pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}))), nil
}

// decodePEM decodes the one PEM block in s, re-wrapping a flattened body.
func decodePEM(s string) (der []byte, typ string, err error) {
	if b, rest := pem.Decode([]byte(s)); b != nil && strings.TrimSpace(string(rest)) == "" {
		if len(b.Headers) > 0 {
			return nil, "", errors.New("is an encrypted PEM key (it has Proc-Type/DEK-Info headers); use an unencrypted key")
		}
		return b.Bytes, b.Type, nil
	}
	m := pemArmor.FindStringSubmatch(s)
	if m == nil {
		return nil, "", errors.New("is not a PEM private key (no -----BEGIN … PRIVATE KEY----- and -----END … PRIVATE KEY----- lines)")
	}
	if m[1] != m[3] {
		return nil, "", fmt.Errorf("is not a PEM key: it begins with %q but ends with %q", m[1], m[3])
	}
	if strings.TrimSpace(strings.Replace(s, m[0], "", 1)) != "" {
		return nil, "", errors.New("has text before or after the PEM block; paste only the key")
	}
	body := m[2]
	if strings.Contains(body, ":") {
		return nil, "", errors.New("is an encrypted PEM key (it has Proc-Type/DEK-Info headers); use an unencrypted key")
	}
	body = strings.NewReplacer(`\n`, "", `\r`, "", " ", "", "\t", "", "\n", "", "\r", "").Replace(body)
	der, err = base64.StdEncoding.DecodeString(body)
	if err != nil {
		return nil, "", errors.New("is not a PEM key: the text between the BEGIN and END lines is not base64")
	}
	return der, m[1], nil
}

// checkPrivateKey parses the DER of a PEM block of the given type.
func checkPrivateKey(typ string, der []byte) error {
	var key any
	var err error
	switch typ {
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(der)
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(der)
	case "ENCRYPTED PRIVATE KEY":
		return errors.New("is encrypted with a passphrase; use an unencrypted key (openssl pkcs8 -in key.pem -out plain.pem)")
	default:
		if strings.HasSuffix(typ, "PRIVATE KEY") {
			return fmt.Errorf("is a %s; Oracle Cloud API signing keys are RSA (BEGIN PRIVATE KEY or BEGIN RSA PRIVATE KEY)", strings.ToLower(typ))
		}
		return fmt.Errorf("is a PEM %q block, not a private key", typ)
	}
	if err != nil {
		// x509's message names the structure, never the bytes; still, say it
		// in our words.
		return fmt.Errorf("does not parse as a %s (PKCS#%s); was it cut short or mangled when pasted?", strings.ToLower(typ), map[bool]string{true: "1", false: "8"}[typ == "RSA PRIVATE KEY"])
	}
	if _, ok := key.(*rsa.PrivateKey); !ok {
		return fmt.Errorf("is a %s key; Oracle Cloud API signing keys are RSA", keyKind(key))
	}
	return nil
}

func keyKind(k any) string {
	switch fmt.Sprintf("%T", k) {
	case "*ecdsa.PrivateKey":
		return "ECDSA"
	case "ed25519.PrivateKey":
		return "Ed25519"
	case "*ecdh.PrivateKey":
		return "ECDH"
	}
	return fmt.Sprintf("%T", k)
}

// readKeyFile reads oci_private_key_file: an absolute path inside one of
// dirs (ociKeyDirs: the add-on's config and share folders), at most 64 KB.
func readKeyFile(path string, dirs []string) (Secret, error) {
	if err := checkKeyPath(path, dirs); err != nil {
		return "", err
	}
	b, err := safefile.Read(path, maxKeyFile)
	if errors.Is(err, safefile.ErrTooLarge) {
		return "", fmt.Errorf("%s is larger than %d KB: not a key file", path, maxKeyFile>>10)
	}
	if err != nil {
		return "", err
	}
	return Secret(b), nil
}

func checkKeyPath(path string, dirs []string) error {
	if !filepath.IsAbs(path) || filepath.Clean(path) != path {
		return fmt.Errorf("%q must be a clean absolute path under /config or /share", path)
	}
	for _, d := range dirs {
		if strings.HasPrefix(path, d+"/") {
			return nil
		}
	}
	return fmt.Errorf("%q is not under /config or /share (the add-on's config and share folders)", path)
}
