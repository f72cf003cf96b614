package hass

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// The "Talos" and "Kubernetes" update entities of a tenant (docs/design.md
// §10.2, ha-native.md §3): installed_version is the lowest version the
// nodes report (never the file's), latest_version the file's target,
// in_progress and update_percentage follow a rollout, Install (payload
// INSTALL) runs request upgrade without a version. The state document
// carries each as a ready object, so HA's strict payload schema sees only
// keys it knows and no null strings (only update_percentage may be null).

// PayloadInstall is the update entities' install payload.
const PayloadInstall = "INSTALL"

var (
	talosVersionRE = regexp.MustCompile(`^v\d+\.\d+\.\d+$`)
	kubeVersionRE  = regexp.MustCompile(`^\d+\.\d+\.\d+$`)
)

// Upgrade components (the request's component field).
const (
	ComponentTalos      = "talos"
	ComponentKubernetes = "kubernetes"
)

// updateDoc renders one update entity's state for the tenant document.
// running is "" when the cluster does not exist: installed_version is then
// left out (HA shows the entity as unknown, never "update available").
func updateDoc(component, running, target string, ro *tenant.Rollout, progress int) map[string]any {
	d := map[string]any{"in_progress": false, "update_percentage": nil}
	if component == ComponentTalos {
		d["title"] = "Talos Linux"
	} else {
		d["title"] = "Kubernetes"
	}
	if running != "" {
		d["installed_version"] = running
	}
	if target != "" {
		d["latest_version"] = target
		d["release_url"] = releaseURL(component, target)
	}
	if ro != nil && ro.Component == component {
		d["in_progress"] = true
		d["update_percentage"] = min(max(progress, 0), 100)
	}
	return d
}

// releaseURL is the release notes page of a version.
func releaseURL(component, version string) string {
	v := "v" + strings.TrimPrefix(version, "v")
	if component == ComponentTalos {
		return "https://github.com/siderolabs/talos/releases/tag/" + v
	}
	return "https://github.com/kubernetes/kubernetes/releases/tag/" + v
}

// backupDoc is the newest etcd snapshot in the tenant document.
type backupDoc struct {
	At   string `json:"at"`
	Size int64  `json:"size"`
	File string `json:"file"`
}

func backupOf(b *tenant.BackupInfo) *backupDoc {
	if b == nil {
		return nil
	}
	return &backupDoc{At: isoTime(b.At), Size: b.Size, File: b.File}
}

// upgradeRequest is the request of an update entity's Install.
func upgradeRequest(component string) func(b *Bridge, r ref, p string) (Request, error) {
	return func(_ *Bridge, r ref, p string) (Request, error) {
		if p != PayloadInstall {
			return Request{}, fmt.Errorf("unexpected payload %q (want %s)", truncate(p, 40), PayloadInstall)
		}
		return Request{Action: ActionUpgrade, Tenant: r.tenant, Component: component}, nil
	}
}

// checkUpgradeFields checks an upgrade request's component and version
// syntax (the engine checks the version against what the cluster runs).
func checkUpgradeFields(component, version string) error {
	switch component {
	case ComponentTalos:
		if version != "" && !talosVersionRE.MatchString(version) {
			return fmt.Errorf("version %q is not a Talos version like v1.13.1", truncate(version, 40))
		}
	case ComponentKubernetes:
		if version != "" && !kubeVersionRE.MatchString(version) {
			return fmt.Errorf("version %q is not a Kubernetes version like 1.35.1 (no leading v)", truncate(version, 40))
		}
	default:
		return fmt.Errorf("component %q is not talos or kubernetes", truncate(component, 40))
	}
	return nil
}
