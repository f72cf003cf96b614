package talos

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"

	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// NodeState is what a node reports about itself (docs/design.md §4 node stages).
type NodeState struct {
	Stage tenant.Stage `json:"stage"`
	// Ready is true only in stage running with every readiness check met.
	Ready        bool   `json:"ready"`
	TalosVersion string `json:"talos_version,omitempty"`
	// KubeletVersion is the kubelet's version from the node's KubeletSpec
	// ("1.35.0", no "v"); "" before the kubelet is configured.
	KubeletVersion string `json:"kubelet_version,omitempty"`
	// Unmet names the readiness checks not met yet ("services", ...).
	Unmet []string `json:"unmet,omitempty"`
	// Problem says why a node that answers could not be read (for
	// example, it does not accept the tenant's credentials); "" normally.
	Problem string `json:"problem,omitempty"`
}

// Equal reports whether two states are the same.
func (s NodeState) Equal(o NodeState) bool {
	return s.Stage == o.Stage && s.Ready == o.Ready && s.TalosVersion == o.TalosVersion &&
		s.KubeletVersion == o.KubeletVersion &&
		s.Problem == o.Problem && slices.Equal(s.Unmet, o.Unmet)
}

// Unreachable is the state of a node that does not answer.
var Unreachable = NodeState{Stage: tenant.StageUnreachable}

// ErrCredentials marks a node that answers but refuses the tenant's
// talosconfig and is not in maintenance mode (another cluster's node, or the
// secrets bundle was replaced).
var ErrCredentials = errors.New("node does not accept this tenant's credentials")

// stageFor maps a Talos machine stage to a node stage.
func stageFor(s runtime.MachineStage) tenant.Stage {
	switch s {
	case runtime.MachineStageMaintenance:
		return tenant.StageMaintenance
	case runtime.MachineStageInstalling:
		return tenant.StageInstalling
	case runtime.MachineStageRunning:
		return tenant.StageRunning
	case runtime.MachineStageRebooting:
		return tenant.StageRebooting
	case runtime.MachineStageShuttingDown:
		return tenant.StageShuttingDown
	case runtime.MachineStageResetting:
		return tenant.StageResetting
	case runtime.MachineStageUpgrading:
		return tenant.StageUpgrading
	default: // booting, and unknown (before the first event of a boot)
		return tenant.StageBooting
	}
}

// stateFrom maps a MachineStatus resource to a NodeState.
func stateFrom(ms *runtime.MachineStatus, talosVersion string) NodeState {
	spec := ms.TypedSpec()
	st := NodeState{Stage: stageFor(spec.Stage), TalosVersion: talosVersion}
	st.Ready = st.Stage == tenant.StageRunning && spec.Status.Ready
	for _, u := range spec.Status.UnmetConditions {
		st.Unmet = append(st.Unmet, u.Name)
	}
	return st
}

// Status reads a node's MachineStatus and version: over mTLS with the
// tenant's talosconfig and, when a directly dialled node presents another
// certificate, with the maintenance (insecure) client. A node that does not
// answer is in stage unreachable with a nil error; an error comes with a
// state whose Problem says what is wrong.
//
// With an empty talosconfig (a tenant not configured yet) only the
// maintenance client is tried. Routed nodes are never read in maintenance
// mode: maintenance has no node routing.
func Status(ctx context.Context, t Target, talosconfig []byte) (NodeState, error) {
	return readStatus(ctx, oneShot{}, t, talosconfig, &statusHint{})
}

// statusHint is what one poll of a node tells the next: the endpoint that
// answered, and whether the node answered in maintenance mode (then that
// is tried first, saving a failed mTLS handshake per poll).
type statusHint struct {
	from        int
	maintenance bool
}

func readStatus(ctx context.Context, d dialer, t Target, talosconfig []byte, h *statusHint) (NodeState, error) {
	if err := t.check(); err != nil {
		return problem(err.Error()), err
	}
	if len(talosconfig) == 0 {
		if t.Routed() {
			err := fmt.Errorf("status of %s: no talosconfig: a routed node is only reachable with the cluster's credentials", t)
			return problem(err.Error()), err
		}
		return maintenanceStatus(ctx, d, t, h)
	}
	if h.maintenance && !t.Routed() {
		var st NodeState
		i, err := t.call(ctx, d, h.from, nil, func(ctx context.Context, c *client.Client) error {
			var err error
			st, err = readState(ctx, c)
			return err
		})
		if err == nil && st.Stage == tenant.StageMaintenance {
			h.from = i
			return st, nil
		}
		h.maintenance = false
	}
	var st NodeState
	i, err := t.call(ctx, d, h.from, talosconfig, func(ctx context.Context, c *client.Client) error {
		var err error
		st, err = readState(ctx, c)
		return err
	})
	if err == nil {
		h.from = i
		return st, nil
	}
	if isConfigError(err) {
		return problem(err.Error()), err
	}
	if routedUnreachable(err) {
		return Unreachable, nil
	}
	if isTrustError(err) && !t.Routed() {
		var merr error
		i, merr = t.call(ctx, d, h.from, nil, func(ctx context.Context, c *client.Client) error {
			var err error
			st, err = readState(ctx, c)
			return err
		})
		switch {
		case merr == nil:
			h.from, h.maintenance = i, st.Stage == tenant.StageMaintenance
			return st, nil
		case isDialError(merr):
			return Unreachable, nil
		case isUnreachable(merr) || isTrustError(merr):
			// The node answered TLS a moment ago with a certificate we do
			// not trust, and now refuses a client without one (with TLS
			// 1.3 that refusal may arrive as a bare EOF): a configured node
			// of another cluster.
			return problem(ErrCredentials.Error()), fmt.Errorf("status of %s: %w (%s)", t, ErrCredentials, short(merr))
		}
		err = merr
	}
	if isTrustError(err) && t.Routed() {
		return problem(ErrCredentials.Error()), fmt.Errorf("status of %s: %w (%s)", t, ErrCredentials, short(err))
	}
	if isUnreachable(err) {
		return Unreachable, nil
	}
	return problem(short(err)), fmt.Errorf("status of %s: %w", t, err)
}

func maintenanceStatus(ctx context.Context, d dialer, t Target, h *statusHint) (NodeState, error) {
	var st NodeState
	i, err := t.call(ctx, d, h.from, nil, func(ctx context.Context, c *client.Client) error {
		var err error
		st, err = readState(ctx, c)
		return err
	})
	switch {
	case err == nil:
		h.from = i
		return st, nil
	case isDialError(err) || (isUnreachable(err) && !isTrustError(err)):
		return Unreachable, nil
	default:
		return problem(ErrCredentials.Error()), fmt.Errorf("status of %s: %w (%s)", t, ErrCredentials, short(err))
	}
}

func problem(msg string) NodeState {
	return NodeState{Stage: tenant.StageUnreachable, Problem: msg}
}

func readState(ctx context.Context, c *client.Client) (NodeState, error) {
	ms, err := safe.StateGetByID[*runtime.MachineStatus](ctx, c.COSI, runtime.MachineStatusID)
	if err != nil {
		return NodeState{}, err
	}
	tag := ""
	if v, err := c.Version(ctx); err == nil {
		tag = versionTag(v)
	}
	st := stateFrom(ms, tag)
	st.KubeletVersion = readKubeletVersion(ctx, c) // upgrade.go
	return st, nil
}

// WatchStatus streams a configured node's MachineStatus over mTLS, calling
// fn with each new state (the current one first), until ctx ends or the
// watch fails. machinery's client resumes a broken watch from its last
// bookmark when the node comes back (a simulated node after a reboot); a
// real node that rebooted has lost its bookmarks and the watch ends with an
// error. While the node is down nothing is reported: use the Poller for
// stage unreachable, WatchStatus for quick reactions.
func WatchStatus(ctx context.Context, t Target, talosconfig []byte, fn func(NodeState)) error {
	_, err := withSecure(ctx, t, 0, talosconfig, func(ctx context.Context, c *client.Client) error {
		tag := ""
		if v, err := c.Version(ctx); err == nil {
			tag = versionTag(v)
		} else if isUnreachable(err) || isTrustError(err) {
			return fmt.Errorf("watch status of %s: %w", t, err)
		}
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		ch := make(chan state.Event)
		if err := c.COSI.Watch(ctx, runtime.NewMachineStatus().Metadata(), ch); err != nil {
			return fmt.Errorf("watch status of %s: %w", t, err)
		}
		var last *NodeState
		for {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case ev := <-ch:
				switch ev.Type {
				case state.Errored:
					return fmt.Errorf("watch status of %s: %w", t, ev.Error)
				case state.Created, state.Updated:
					ms, ok := ev.Resource.(*runtime.MachineStatus)
					if !ok {
						continue
					}
					st := stateFrom(ms, tag)
					if last == nil || !last.Equal(st) {
						last = &st
						fn(st)
					}
				}
			}
		}
	})
	return err
}
