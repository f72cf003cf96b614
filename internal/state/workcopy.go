package state

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/safefile"
)

// StoreMarker, in a data folder, names the shared store the folder is a
// working copy of (written by Checkout).
const StoreMarker = "shared-store"

// ErrForeignData refuses to check a shared store out over a data folder
// that holds tenants the store does not know and that was never a working
// copy of it: those tenants' clusters would be managed as new ones.
var ErrForeignData = errors.New("the data folder holds state the shared store does not have")

// Checkout makes the data folder data the working copy of the shared store
// r (whose ID is storeID) before this instance leads: every tenant's
// record and secrets in the store are written into data/tenants/<tenant>/
// (0600, atomically), replacing what was there. What data holds of
// tenants the store does not know (a tenant another instance removed
// while this one stood by) is moved to data/replaced/<stamp>/ and named in
// moved; nothing is removed. A folder that was never a working copy of
// this store and holds a record or an OpenTofu state of a tenant the store
// does not know is refused with ErrForeignData, changing nothing: copy it
// into the store first (rezuscloud state copy).
func Checkout(ctx context.Context, r Reader, storeID, data string, now time.Time) (moved []string, err error) {
	names, err := r.Tenants(ctx)
	if err != nil {
		return nil, err
	}
	type copyOf struct {
		name    string
		record  []byte
		secrets map[string][]byte
	}
	var copies []copyOf
	for _, name := range names {
		c := copyOf{name: name, secrets: map[string][]byte{}}
		rec, ok, err := r.Record(ctx, name)
		if err != nil {
			return nil, err
		}
		if ok {
			c.record = rec
		}
		for _, kind := range SecretKinds {
			b, ok, err := r.Secret(ctx, name, kind)
			if err != nil {
				return nil, err
			}
			if ok {
				c.secrets[kind] = b
			}
		}
		copies = append(copies, c)
	}
	local, err := localTenants(data)
	if err != nil {
		return nil, err
	}
	var unknown []string
	for _, n := range local {
		if !slices.Contains(names, n) {
			unknown = append(unknown, n)
		}
	}
	marker := filepath.Join(data, StoreMarker)
	was, _ := safefile.Read(marker, 256)
	if len(unknown) > 0 && strings.TrimSpace(string(was)) != storeID {
		return nil, fmt.Errorf("%w: tenants %s in %s; stop rezuscloud, copy them into the store with `rezuscloud state copy --from %s --to <url>`, and start again (or move the data folder away)",
			ErrForeignData, strings.Join(unknown, ", "), data, data)
	}
	if err := writeFile(marker, []byte(storeID+"\n")); err != nil {
		return nil, err
	}
	aside := filepath.Join(data, "replaced", now.UTC().Format("20060102T150405Z"))
	// moveAside moves what data holds at rel (if anything) under aside
	moveAside := func(rel string) error {
		src, dst := filepath.Join(data, rel), filepath.Join(aside, rel)
		if _, err := os.Lstat(src); err != nil {
			return nil
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
			return err
		}
		if err := os.Rename(src, dst); err != nil {
			return fmt.Errorf("moving aside %s: %w", src, err)
		}
		moved = append(moved, dst)
		return nil
	}
	for _, n := range unknown {
		for _, rel := range []string{filepath.Join("tenants", n), filepath.Join("tofu", "state", n)} {
			if err := moveAside(rel); err != nil {
				return moved, err
			}
		}
	}
	for _, c := range copies {
		td := filepath.Join(tenantsDir(data), c.name)
		if c.record != nil {
			if err := writeFile(filepath.Join(td, RecordFile), c.record); err != nil {
				return moved, err
			}
		}
		for _, kind := range SecretKinds {
			p := filepath.Join(td, kind)
			b, ok := c.secrets[kind]
			if !ok {
				// not in the store (a destroy removed it there): a copy
				// here is stale; kept aside, never used
				if err := moveAside(filepath.Join("tenants", c.name, kind)); err != nil {
					return moved, err
				}
				continue
			}
			if err := writeFile(p, b); err != nil {
				return moved, err
			}
		}
	}
	return moved, nil
}

// localTenants lists the tenants the data folder holds a record or an
// OpenTofu state of.
func localTenants(data string) ([]string, error) {
	var out []string
	add := func(name string) {
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	if err := eachTenantDir(tenantsDir(data), func(name, dir string) error {
		if _, err := os.Lstat(filepath.Join(dir, RecordFile)); err == nil {
			add(name)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	if err := eachTenantDir(statesDir(data), func(name, dir string) error {
		ents, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		if len(ents) > 0 {
			add(name)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	slices.Sort(out)
	return out, nil
}
