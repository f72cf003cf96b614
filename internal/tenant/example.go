package tenant

import (
	_ "embed"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/rezuscloud/rezuscloud/internal/atomicfile"
)

// ExampleFile is the commented example tenant written into the tenants
// folder at the first start. Its name does not end in .toml, so the store
// does not read it until the user renames it.
const ExampleFile = "example.toml.sample"

// Example is the example tenant file: a metal cluster of one control plane
// and one worker, with the cloud alternatives as comments. Renamed to
// <name>.toml, it validates.
//
//go:embed example.toml.sample
var Example []byte

// WriteExample writes Example into the store's folder once: marker (a
// file in the data folder) records that it was written, so an example the
// user deleted or renamed is not written again. It returns the path
// written, or "" when nothing was.
func (s *Store) WriteExample(marker string) (string, error) {
	if _, err := os.Stat(marker); err == nil {
		return "", nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("example tenant: %w", err)
	}
	p := filepath.Join(s.Dir, ExampleFile)
	written := ""
	if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
		// readable by the user's file editor apps (they run as root; the
		// tenant files hold no secrets)
		if err := atomicfile.Write(p, Example, 0o644); err != nil {
			return "", fmt.Errorf("example tenant: %w", err)
		}
		written = p
	}
	if err := atomicfile.Write(marker, nil, 0o600); err != nil {
		return "", fmt.Errorf("example tenant: %w", err)
	}
	return written, nil
}
