package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/rezuscloud/rezuscloud/internal/atomicfile"
)

// PassphraseCopy is the one-time copy of a generated state passphrase in
// the folder the user can open (add-on mode: the add-on's config folder,
// which the Samba share app_configs and the file editor apps show; they
// run as root, so the file can be 0600).
const PassphraseCopy = "state-passphrase.txt"

// handedOver marks in the data folder that the copy was written once: a
// copy the user deleted is not written again.
const handedOver = "state-passphrase.handed-over"

// Handover is what the user still has to do with the state passphrase.
type Handover struct {
	// Problem is the bridge's Problem message ("" when there is nothing to
	// do). It never holds the passphrase.
	Problem string
	// Wrote is the copy written now ("" when none was).
	Wrote string
	// Removed is the copy removed now because the option holds the same
	// passphrase ("" when none was).
	Removed string
}

// HandOverPassphrase gives the user a one-time way to keep a passphrase
// rezuscloud generated, since the data folder that holds it cannot be
// opened from Home Assistant: the first time, it writes a 0600 copy into
// cfg.ConfigDir and asks (Handover.Problem) the user to put it into their
// password manager and the state.passphrase option, then delete the file.
// The problem stays while the copy is there; once the option holds the
// same passphrase the copy is removed. An option that differs from a copy
// still there is likely a typo, and says so. Outside add-on mode
// (ConfigDir "") the passphrase file itself is where the user can read it,
// and nothing is done.
func HandOverPassphrase(cfg Config, pass Secret) (Handover, error) {
	var h Handover
	if cfg.ConfigDir == "" {
		return h, nil
	}
	cp := filepath.Join(cfg.ConfigDir, PassphraseCopy)
	copied, err := os.ReadFile(cp)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return h, fmt.Errorf("state passphrase copy: %w", err)
	}
	hasCopy := err == nil
	if cfg.Tofu.StatePassphrase != "" {
		switch {
		case !hasCopy:
		case strings.TrimSpace(string(copied)) == cfg.Tofu.StatePassphrase.Reveal():
			if err := os.Remove(cp); err != nil {
				return h, fmt.Errorf("state passphrase copy: %w", err)
			}
			h.Removed = cp
		default:
			h.Problem = fmt.Sprintf("The state passphrase option differs from the generated one in %s (a typo?). "+
				"The clusters' OpenTofu state was encrypted with the generated one and cannot be read with another. "+
				"Copy it again, or delete the file if you changed the passphrase on purpose before any cluster existed.", PassphraseCopy)
		}
		return h, nil
	}
	marker := filepath.Join(cfg.DataDir, handedOver)
	_, err = os.Stat(marker)
	switch {
	case err == nil:
	case errors.Is(err, os.ErrNotExist):
		if !hasCopy {
			if err := atomicfile.Write(cp, []byte(pass.Reveal()+"\n"), 0o600); err != nil {
				return h, fmt.Errorf("state passphrase copy: %w", err)
			}
			h.Wrote, hasCopy = cp, true
		}
		if err := atomicfile.Write(marker, nil, 0o600); err != nil {
			return h, fmt.Errorf("state passphrase: %w", err)
		}
	default:
		return h, fmt.Errorf("state passphrase: %w", err)
	}
	if hasCopy {
		h.Problem = fmt.Sprintf("A state passphrase was generated, and only this add-on can read where it is kept. "+
			"Open %s in this add-on's config folder (with the Samba share app: share app_configs, the folder ending in _rezuscloud), "+
			"put the passphrase into your password manager and into the add-on's option State → State passphrase, then delete the file.", PassphraseCopy)
	}
	return h, nil
}

// MCPTokenCopy is the copy of a generated MCP token in the folder the user
// can open (add-on mode), to paste into the assistant's settings.
const MCPTokenCopy = "mcp-token.txt"

// HandOverMCPToken keeps a 0600 copy of a generated MCP token in
// cfg.ConfigDir while the mcp.token option is empty (the data folder that
// holds it cannot be opened from Home Assistant), and removes the copy once
// the option holds a token of the user's own. It returns the copy's path
// ("" when there is none). Outside add-on mode nothing is done: the token
// file in the data folder is readable where rezuscloud runs.
func HandOverMCPToken(cfg Config, tok Secret) (string, error) {
	if cfg.ConfigDir == "" {
		return "", nil
	}
	cp := filepath.Join(cfg.ConfigDir, MCPTokenCopy)
	if cfg.MCP.Token != "" {
		if err := os.Remove(cp); err != nil && !errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("MCP token copy: %w", err)
		}
		return "", nil
	}
	if err := atomicfile.Write(cp, []byte(tok.Reveal()+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("MCP token copy: %w", err)
	}
	return cp, nil
}
