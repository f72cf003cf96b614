package web

import (
	"context"
	"io"
	"time"

	tfjson "github.com/hashicorp/terraform-json"

	"github.com/rezuscloud/rezuscloud/internal/hass"
	"github.com/rezuscloud/rezuscloud/internal/talos"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// Source is what the panel reads from the engine: its read API
// (cmd/rezuscloud/panel.go adapts *engine.Engine to it).
type Source interface {
	// Views is every tenant, sorted by name; View is one.
	Views() []View
	View(name string) (View, bool)
	// Changed is closed and replaced whenever any view changes.
	Changed() <-chan struct{}
	// PendingPlan is the pending plan as tofu's JSON, nil when there is none.
	PendingPlan(ctx context.Context, name string) (*tfjson.Plan, error)
	// Machines is what discovery found on the LAN, not yet declared.
	Machines() []talos.Machine
	// Backups lists a tenant's etcd snapshots, newest first; OpenBackup
	// opens one of them by its file name.
	Backups(name string) ([]tenant.BackupInfo, error)
	OpenBackup(name, file string) (io.ReadCloser, error)
	// Secret is a tenant's "kubeconfig" or "talosconfig".
	Secret(name, kind string) ([]byte, error)
	// Log is the running and the last few operations' lines; Follow
	// sends new lines until ctx ends.
	Log(name string) []LogLine
	Follow(ctx context.Context, name string) <-chan LogLine
}

// View is one tenant as Home Assistant shows it.
type View = tenant.View

// LogLine is one line of an operation's log: tofu's -json events and the
// Talos steps. Text is never a secret.
type LogLine struct {
	Tenant, Operation string
	At                time.Time
	Source            string // "tofu" | "talos" | "engine"
	Level             string // "info" | "warn" | "error"
	Text              string
}

// Command is the one command path: (*hass.Bridge).HandleRequest, which the
// MQTT buttons and the request API use too. The panel has no command of
// its own.
type Command func(context.Context, hass.Request) hass.Response

// Files is the tenant store (*tenant.Store): the panel writes tenant files
// only through it, with the watcher's validation.
type Files interface {
	Read(name string) ([]byte, error)
	Create(name string, data []byte) (*tenant.Tenant, error)
	Replace(name string, data []byte, base string) (*tenant.Tenant, error)
}

// User is who Home Assistant says is using the panel (the Supervisor's
// X-Remote-User-* headers; zero outside the Supervisor).
type User struct {
	ID, Name, DisplayName string
}

// Label is how the user is named in the log and on the page.
func (u User) Label() string {
	switch {
	case u.Name != "":
		return u.Name
	case u.ID != "":
		return u.ID
	}
	return "operator"
}

// Admins decides who is an administrator: only they act (commands, file
// writes) and download secrets. See HAUsers and Operator.
type Admins interface {
	IsAdmin(ctx context.Context, u User) (bool, error)
}
