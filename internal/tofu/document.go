package tofu

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
)

// PassphraseVariable is the variable the encryption block reads the state
// passphrase from; the runner passes it as TF_VAR_state_passphrase, so it is
// never written to disk.
const PassphraseVariable = "state_passphrase"

// ConfigFile is the name of the document in a work dir.
const ConfigFile = "main.tf.json"

// ErrDocument is returned for a document the runner cannot take.
var ErrDocument = errors.New("invalid tofu document")

// encryptionBlock encrypts state and plan with a key derived by pbkdf2 from
// the passphrase variable; `enforced` makes tofu refuse to write either in
// clear text. The methods must be bare traversal strings, not "${...}".
func encryptionBlock() map[string]any {
	return map[string]any{
		"key_provider": map[string]any{"pbkdf2": map[string]any{"main": map[string]any{
			"passphrase": "${var." + PassphraseVariable + "}",
		}}},
		"method": map[string]any{"aes_gcm": map[string]any{"main": map[string]any{
			"keys": "${key_provider.pbkdf2.main}",
		}}},
		"state": map[string]any{"method": "method.aes_gcm.main", "enforced": true},
		"plan":  map[string]any{"method": "method.aes_gcm.main", "enforced": true},
	}
}

// PrepareDocument adds what the runner owns to a rendered document and
// returns it encoded deterministically (sorted keys, two-space indent):
//
//   - terraform.backend: {"http": {}}: where state goes. The address, lock
//     addresses and credentials come from TF_HTTP_* env on every command
//     (they change per process and are then never persisted by tofu);
//   - terraform.encryption: pbkdf2 + aes_gcm, enforced for state and plan;
//   - variable.state_passphrase: a sensitive string, set through
//     TF_VAR_state_passphrase.
//
// A document that already sets any of these is refused: state handling is
// the runner's and a renderer must not weaken it.
func PrepareDocument(doc []byte) ([]byte, error) {
	m, err := decodeObject(doc)
	if err != nil {
		return nil, err
	}
	tf, err := object(m, "terraform")
	if err != nil {
		return nil, err
	}
	for _, k := range []string{"backend", "cloud", "encryption"} {
		if _, ok := tf[k]; ok {
			return nil, fmt.Errorf("%w: terraform.%s is set by the runner and must not be in the document", ErrDocument, k)
		}
	}
	vars, err := object(m, "variable")
	if err != nil {
		return nil, err
	}
	if _, ok := vars[PassphraseVariable]; ok {
		return nil, fmt.Errorf("%w: variable %q is reserved for the state passphrase", ErrDocument, PassphraseVariable)
	}
	tf["backend"] = map[string]any{"http": map[string]any{}}
	tf["encryption"] = encryptionBlock()
	vars[PassphraseVariable] = map[string]any{
		"type":        "string",
		"sensitive":   true,
		"description": "Passphrase of the state and plan encryption (set by rezuscloud).",
	}
	m["terraform"], m["variable"] = tf, vars
	return encode(m)
}

func decodeObject(doc []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrDocument, err)
	}
	if m == nil {
		return nil, fmt.Errorf("%w: not a JSON object", ErrDocument)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: trailing data after the JSON object", ErrDocument)
	}
	return m, nil
}

// object returns m[key] as an object, creating it when absent.
func object(m map[string]any, key string) (map[string]any, error) {
	v, ok := m[key]
	if !ok || v == nil {
		return map[string]any{}, nil
	}
	o, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%w: %q must be a JSON object", ErrDocument, key)
	}
	return o, nil
}

func encode(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// initHash is what decides whether `init` must run again: the parts of the
// document init acts on (the terraform block: required providers, backend,
// encryption; module sources) plus the CLI config and the binary.
func initHash(doc, cliConfig []byte, binary string) (string, error) {
	m, err := decodeObject(doc)
	if err != nil {
		return "", err
	}
	in := map[string]any{
		"terraform": m["terraform"],
		"module":    m["module"],
		"cli":       string(cliConfig),
		"binary":    binary,
	}
	b, err := encode(in)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}
