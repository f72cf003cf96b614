package talos

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/rezuscloud/rezuscloud/internal/atomicfile"
	"github.com/rezuscloud/rezuscloud/internal/safefile"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"go.yaml.in/yaml/v4"
)

// SecretsFile is the name of a tenant's secrets bundle inside its data dir.
const SecretsFile = "secrets.yaml"

// ErrSecretsMissing is returned (wrapped) when a tenant that has
// infrastructure has no secrets bundle: generating a new one would lock the
// user out of their own cluster, so the bundle must be restored instead.
var ErrSecretsMissing = errors.New("talos secrets bundle missing")

// SecretsPath is where a tenant's secrets bundle lives under dir.
func SecretsPath(dir string) string { return filepath.Join(dir, SecretsFile) }

// LoadOrCreateSecrets loads the tenant's secrets bundle from
// <dir>/secrets.yaml, or creates and stores it (0600, dir 0700, written
// atomically) when there is none and the tenant has no infrastructure yet.
//
// A missing bundle while hasInfra is true is refused with ErrSecretsMissing:
// the running nodes trust only the old CAs, and a new bundle would lock the
// user out of their cluster. talosVersion (e.g. "v1.13.0") selects the
// version contract of a new bundle.
func LoadOrCreateSecrets(dir, tenantName, talosVersion string, hasInfra bool) (*secrets.Bundle, error) {
	path := SecretsPath(dir)
	b, err := LoadSecrets(path)
	if err == nil {
		return b, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if hasInfra {
		return nil, fmt.Errorf("tenant %q: %w at %s while the tenant has infrastructure: "+
			"a new bundle would lock you out of the cluster; restore %s from your backup "+
			"(or destroy the tenant's infrastructure first)", tenantName, ErrSecretsMissing, path, path)
	}
	b, err = NewSecrets(talosVersion)
	if err != nil {
		return nil, fmt.Errorf("tenant %q: %w", tenantName, err)
	}
	if err := SaveSecrets(path, b); err != nil {
		return nil, fmt.Errorf("tenant %q: %w", tenantName, err)
	}
	return b, nil
}

// NewSecrets generates a new secrets bundle for a Talos version (0.3-1.2 s of
// key generation). Most callers want LoadOrCreateSecrets.
func NewSecrets(talosVersion string) (*secrets.Bundle, error) {
	vc, err := contract(talosVersion)
	if err != nil {
		return nil, err
	}
	b, err := secrets.NewBundle(secrets.NewClock(), vc)
	if err != nil {
		return nil, fmt.Errorf("generate talos secrets: %w", err)
	}
	return b, nil
}

// maxSecretFile caps a secrets bundle or a talosconfig read back from the
// data dir (a few kilobytes each).
const maxSecretFile = 1 << 20

// LoadSecrets reads and validates a secrets bundle file. A missing file gives
// an error matching fs.ErrNotExist; anything but a regular file of at most
// 1 MiB is refused unread (safefile), which LoadOrCreateSecrets never takes
// for a missing bundle.
func LoadSecrets(path string) (*secrets.Bundle, error) {
	data, err := safefile.Read(path, maxSecretFile)
	if err != nil {
		return nil, err
	}
	return parseSecrets(data)
}

// parseSecrets decodes a secrets bundle (the YAML of talosctl gen secrets).
func parseSecrets(data []byte) (*secrets.Bundle, error) {
	b := &secrets.Bundle{}
	if err := yaml.Unmarshal(data, b); err != nil {
		return nil, fmt.Errorf("decode talos secrets: %w", err)
	}
	b.Clock = secrets.NewClock()
	if err := b.Validate(); err != nil {
		return nil, fmt.Errorf("invalid talos secrets: %w", err)
	}
	return b, nil
}

// EncodeSecrets encodes a bundle as YAML (the format of talosctl gen secrets).
func EncodeSecrets(b *secrets.Bundle) ([]byte, error) {
	data, err := yaml.Marshal(b)
	if err != nil {
		return nil, fmt.Errorf("encode talos secrets: %w", err)
	}
	return data, nil
}

// SaveSecrets writes a bundle to path atomically, mode 0600.
func SaveSecrets(path string, b *secrets.Bundle) error {
	data, err := EncodeSecrets(b)
	if err != nil {
		return err
	}
	return writeSecretFile(path, data)
}

// writeSecretFile writes data to path with mode 0600 (its directory is
// created 0700): a temp file in the same dir, fsync, rename, fsync of the dir.
// Readers see the old file or the new one, never a part.
func writeSecretFile(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return atomicfile.Write(path, data, 0o600)
}

// contract parses a Talos version ("v1.13.0", "1.13") into its config
// version contract; "" means the machinery's current contract.
func contract(talosVersion string) (*config.VersionContract, error) {
	if talosVersion == "" {
		return config.TalosVersionCurrent, nil
	}
	vc, err := config.ParseContractFromVersion(talosVersion)
	if err != nil {
		return nil, fmt.Errorf("talos version %q: %w", talosVersion, err)
	}
	return vc, nil
}
