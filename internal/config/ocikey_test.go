package config

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// testKeys makes an RSA key as PKCS#1 and PKCS#8 PEM, and an ECDSA one.
func testKeys(t *testing.T) (pkcs1, pkcs8, ec string) {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	p8, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	e, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	e8, err := x509.MarshalPKCS8PrivateKey(e)
	if err != nil {
		t.Fatal(err)
	}
	enc := func(typ string, der []byte) string {
		return string(pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}))
	}
	return enc("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(k)), enc("PRIVATE KEY", p8), enc("PRIVATE KEY", e8)
}

// body is the base64 between the armor lines, on one line.
func body(p string) string {
	lines := strings.Split(strings.TrimSpace(p), "\n")
	return strings.Join(lines[1:len(lines)-1], "")
}

func TestNormalizePrivateKey(t *testing.T) {
	pkcs1, pkcs8, ec := testKeys(t)
	flat := func(p, sep string) string { return strings.ReplaceAll(strings.TrimSpace(p), "\n", sep) }
	b1 := body(pkcs1)
	tests := []struct {
		name, in string
		want     string // the normalized key, or "" for an error
		err      string
	}{
		{"pkcs1 as is", pkcs1, pkcs1, ""},
		{"pkcs8 as is", pkcs8, pkcs8, ""},
		{"surrounding blanks", "\n  " + pkcs8 + "\n\n", pkcs8, ""},
		{"crlf", strings.ReplaceAll(pkcs1, "\n", "\r\n"), pkcs1, ""},
		{"newlines stripped", flat(pkcs1, ""), pkcs1, ""},
		{"newlines as spaces", flat(pkcs8, " "), pkcs8, ""},
		{"literal backslash n", flat(pkcs1, `\n`), pkcs1, ""},
		{"body on one line", "-----BEGIN RSA PRIVATE KEY-----\n" + b1 + "\n-----END RSA PRIVATE KEY-----", pkcs1, ""},
		{"empty", "", "", ""},
		{"not pem", "hunter2", "", "is not a PEM private key"},
		{"cut short", "-----BEGIN RSA PRIVATE KEY-----" + b1[:len(b1)/8*4] + "-----END RSA PRIVATE KEY-----", "", "does not parse as a rsa private key"},
		{"not base64", "-----BEGIN RSA PRIVATE KEY-----" + b1[:40] + "!!" + b1[40:] + "-----END RSA PRIVATE KEY-----", "", "not base64"},
		{"mismatched end", "-----BEGIN RSA PRIVATE KEY-----" + b1 + "-----END PRIVATE KEY-----", "", "ends with"},
		{"text around", "my key: " + flat(pkcs1, ""), "", "text before or after"},
		{"ecdsa", ec, "", "is a ECDSA key; Oracle Cloud API signing keys are RSA"},
		{"ec pkcs1", strings.ReplaceAll(ec, "PRIVATE KEY", "EC PRIVATE KEY"), "", "is a ec private key"},
		{"encrypted pkcs8", strings.ReplaceAll(pkcs8, "PRIVATE KEY", "ENCRYPTED PRIVATE KEY"), "", "encrypted with a passphrase"},
		{"encrypted legacy flattened", "-----BEGIN RSA PRIVATE KEY-----Proc-Type: 4,ENCRYPTED DEK-Info: AES-128-CBC,00" + b1 + "-----END RSA PRIVATE KEY-----", "", "encrypted PEM key"},
		{"a certificate", strings.ReplaceAll(pkcs1, "RSA PRIVATE KEY", "CERTIFICATE"), "", `PEM "CERTIFICATE" block, not a private key`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := normalizePrivateKey(Secret(tc.in))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				// the message never carries the key (any 16 characters of its body)
				for i := 0; i+16 <= len(b1); i += 16 {
					if strings.Contains(err.Error(), b1[i:i+16]) {
						t.Fatalf("error prints the key: %v", err)
					}
				}
				return
			}
			if err != nil || got.Reveal() != tc.want {
				t.Fatalf("got %q, %v; want %q", got.Reveal(), err, tc.want)
			}
		})
	}
}

func TestLoadAddonOCIKey(t *testing.T) {
	pkcs1, _, _ := testKeys(t)
	flat := strings.ReplaceAll(strings.TrimSpace(pkcs1), "\n", "")
	opts := func(extra string) string {
		return writeFile(t, "options.json", `{"mqtt":{"url":"tcp://127.0.0.1:1884"},"oci":{`+strings.TrimPrefix(extra, ",")+`}}`)
	}
	c, err := LoadAddon(context.Background(), opts(`,"private_key":"`+flat+`"`), Supervisor{})
	if err != nil || c.Credentials.OCI.PrivateKey.Reveal() != pkcs1 {
		t.Fatalf("flattened key not re-wrapped: %v", err)
	}
	_, err = LoadAddon(context.Background(), opts(`,"private_key":"-----BEGIN RSA PRIVATE KEY-----QUJD-----END RSA PRIVATE KEY-----"`), Supervisor{})
	if err == nil || !strings.Contains(err.Error(), "oci.private_key: does not parse") {
		t.Fatalf("broken key: %v", err)
	}
	for _, tc := range []struct{ extra, want string }{
		{`,"private_key_file":"/etc/shadow"`, `oci.private_key_file: "/etc/shadow" is not under /config or /share`},
		{`,"private_key_file":"/config/../etc/shadow"`, "must be a clean absolute path"},
		{`,"private_key_file":"key.pem"`, "must be a clean absolute path"},
		{`,"private_key_file":"/config/missing-oci-key.pem"`, "oci.private_key_file: stat /config/missing-oci-key.pem"},
		{`,"private_key":"` + flat + `","private_key_file":"/config/k.pem"`, "not both"},
	} {
		if _, err := LoadAddon(context.Background(), opts(tc.extra), Supervisor{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.extra, err, tc.want)
		}
	}
}

func TestReadKeyFile(t *testing.T) {
	pkcs1, _, _ := testKeys(t)
	dir := t.TempDir()
	p := filepath.Join(dir, "oci.pem")
	if err := os.WriteFile(p, []byte(pkcs1), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := readKeyFile(p, []string{dir})
	if err != nil || got.Reveal() != pkcs1 {
		t.Fatalf("readKeyFile: %v", err)
	}
	if _, err := readKeyFile(p, []string{"/config", "/share"}); err == nil || !strings.Contains(err.Error(), "not under /config or /share") {
		t.Fatalf("outside dirs: %v", err)
	}
	big := filepath.Join(dir, "big.pem")
	if err := os.WriteFile(big, make([]byte, maxKeyFile+1), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := readKeyFile(big, []string{dir}); err == nil || !strings.Contains(err.Error(), "larger than 64 KB") {
		t.Fatalf("big file: %v", err)
	}
	// /config itself is not a file under it
	if err := checkKeyPath("/config", ociKeyDirs); err == nil {
		t.Fatal("/config accepted")
	}
}
