package talos

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"google.golang.org/grpc/codes"

	"github.com/rezuscloud/rezuscloud/internal/backoff"
	"github.com/rezuscloud/rezuscloud/internal/safefile"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// Node endpoints are "host:port" (production: port 50000, the apid port; a
// bare host gets 50000 added by the client). talosconfig is the tenant's
// talosconfig (bytes of Talosconfig); its own endpoints are ignored: the
// Target of each call says what is dialled.

// secureClient is an mTLS client for one node from a talosconfig.
func secureClient(ctx context.Context, endpoint string, talosconfig []byte) (*client.Client, error) {
	tc, err := clientconfig.FromBytes(talosconfig)
	if err != nil {
		return nil, fmt.Errorf("talosconfig: %w", err)
	}
	c, err := client.New(ctx, client.WithConfig(tc), client.WithEndpoints(endpoint))
	if err != nil {
		return nil, fmt.Errorf("talos client for %s: %w", endpoint, err)
	}
	return c, nil
}

// maintenanceClient is the insecure client (TLS without verification, no
// client certificate) that nodes in maintenance mode answer, as talosctl
// --insecure.
func maintenanceClient(ctx context.Context, endpoint string) (*client.Client, error) {
	c, err := client.New(ctx,
		client.WithTLSConfig(&tls.Config{InsecureSkipVerify: true}), //nolint:gosec // maintenance mode has no identity to verify
		client.WithEndpoints(endpoint))
	if err != nil {
		return nil, fmt.Errorf("talos maintenance client for %s: %w", endpoint, err)
	}
	return c, nil
}

// withSecure runs fn over mTLS against t (one-shot clients), from the
// endpoint index from on; it returns the index of the endpoint that
// answered last.
func withSecure(ctx context.Context, t Target, from int, talosconfig []byte, fn func(context.Context, *client.Client) error) (int, error) {
	if talosconfig == nil {
		talosconfig = []byte{} // nil would mean the maintenance client
	}
	return t.call(ctx, oneShot{}, from, talosconfig, fn)
}

// ApplyMaintenance applies a machine config to a node in maintenance mode
// (insecure client). The node then installs and reboots into its configured
// state; follow with WaitSecure. A config the node refuses is an error
// matching ErrConfigRejected.
func ApplyMaintenance(ctx context.Context, endpoint string, cfg []byte) error {
	c, err := maintenanceClient(ctx, endpoint)
	if err != nil {
		return err
	}
	defer c.Close() //nolint:errcheck
	return apply(ctx, c, endpoint, cfg, machine.ApplyConfigurationRequest_AUTO)
}

// ApplyConfig applies a machine config to a configured node over mTLS (mode
// AUTO: the node reboots only when the change needs it).
func ApplyConfig(ctx context.Context, t Target, talosconfig, cfg []byte) error {
	_, err := withSecure(ctx, t, 0, talosconfig, func(ctx context.Context, c *client.Client) error {
		return apply(ctx, c, t.String(), cfg, machine.ApplyConfigurationRequest_AUTO)
	})
	return err
}

// ErrConfigRejected marks a machine config the node refused as invalid.
var ErrConfigRejected = errors.New("machine config rejected")

func apply(ctx context.Context, c *client.Client, endpoint string, cfg []byte, mode machine.ApplyConfigurationRequest_Mode) error {
	_, err := c.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: cfg, Mode: mode})
	if err != nil {
		if client.StatusCode(err) == codes.InvalidArgument {
			return fmt.Errorf("apply config to %s: %w: %s", endpoint, ErrConfigRejected, statusMessage(err))
		}
		return fmt.Errorf("apply config to %s: %w", endpoint, err)
	}
	return nil
}

// retry is the schedule of operations that wait for a node (WaitSecure,
// Bootstrap): 250 ms doubling to 5 s, up to 20% shorter.
var retry = backoff.Policy{Initial: 250 * time.Millisecond, Max: 5 * time.Second, Jitter: 0.2}

// WaitSecure waits until the node answers the mTLS API (Version) with the
// tenant's credentials, retrying with backoff until ctx ends. It returns the
// node's Talos version.
func WaitSecure(ctx context.Context, t Target, talosconfig []byte) (string, error) {
	var last error
	from := 0
	for attempt := 0; ; attempt++ {
		var tag string
		var err error
		from, err = withSecure(ctx, t, from, talosconfig, func(ctx context.Context, c *client.Client) error {
			v, err := c.Version(ctx)
			if err != nil {
				return err
			}
			tag = versionTag(v)
			return nil
		})
		if err == nil {
			return tag, nil
		}
		if isConfigError(err) || t.check() != nil {
			return "", err
		}
		last = err
		if serr := backoff.Sleep(ctx, retry.Next(attempt)); serr != nil {
			return "", fmt.Errorf("waiting for the secure Talos API of %s: %w (last error: %s)", t, serr, short(last))
		}
	}
}

// Bootstrap bootstraps etcd on a control-plane node. Call it on one
// control plane of a cluster only. AlreadyExists counts as success;
// FailedPrecondition and Unavailable (the node is not ready yet) are retried
// with backoff until ctx ends.
func Bootstrap(ctx context.Context, t Target, talosconfig []byte) error {
	var last error
	from := 0
	for attempt := 0; ; attempt++ {
		var err error
		from, err = withSecure(ctx, t, from, talosconfig, func(ctx context.Context, c *client.Client) error {
			return c.Bootstrap(ctx, &machine.BootstrapRequest{})
		})
		switch code := client.StatusCode(err); {
		case err == nil, code == codes.AlreadyExists:
			return nil
		case isConfigError(err), t.check() != nil:
			return err
		case code == codes.FailedPrecondition, code == codes.Unavailable, code == codes.DeadlineExceeded:
			last = err
		default:
			return fmt.Errorf("bootstrap %s: %w", t, err)
		}
		if serr := backoff.Sleep(ctx, retry.Next(attempt)); serr != nil {
			return fmt.Errorf("bootstrap %s: %w (last error: %s)", t, serr, short(last))
		}
	}
}

// Kubeconfig fetches the admin kubeconfig from a control-plane node.
func Kubeconfig(ctx context.Context, t Target, talosconfig []byte) ([]byte, error) {
	var kc []byte
	_, err := withSecure(ctx, t, 0, talosconfig, func(ctx context.Context, c *client.Client) error {
		var err error
		kc, err = c.Kubeconfig(ctx)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("kubeconfig from %s: %w", t, err)
	}
	if len(kc) == 0 {
		return nil, fmt.Errorf("kubeconfig from %s: empty", t)
	}
	return kc, nil
}

// SaveKubeconfig writes a kubeconfig (or talosconfig) atomically, mode 0600.
func SaveKubeconfig(path string, data []byte) error { return writeSecretFile(path, data) }

// LoadTalosconfig reads a talosconfig (or kubeconfig) SaveKubeconfig wrote:
// a regular file of at most 1 MiB, else an error naming it (safefile), so
// that a FIFO or /dev/zero in its place can neither block nor exhaust the
// caller. A missing file gives an error matching fs.ErrNotExist.
func LoadTalosconfig(path string) ([]byte, error) { return safefile.Read(path, maxSecretFile) }

// Reboot reboots a configured node.
func Reboot(ctx context.Context, t Target, talosconfig []byte) error {
	_, err := withSecure(ctx, t, 0, talosconfig, func(ctx context.Context, c *client.Client) error { return c.Reboot(ctx) })
	if err != nil {
		return fmt.Errorf("reboot %s: %w", t, err)
	}
	return nil
}

// ResetOptions say how a node is reset.
type ResetOptions struct {
	// Graceful is for removing a node from a running cluster: the node
	// cordons and drains itself and leaves etcd first. Not graceful is for
	// destroying a whole cluster.
	Graceful bool
	// Halt powers the machine off after the reset instead of rebooting it
	// into maintenance mode (a metal machine that Wake-on-LAN can bring
	// back when it is needed again).
	Halt bool
}

// Reset wipes a node's STATE and EPHEMERAL partitions and reboots it, so
// that it comes back in maintenance mode without a config, or halts it. A
// node already in maintenance mode counts as reset.
func Reset(ctx context.Context, t Target, talosconfig []byte, opts ResetOptions) error {
	_, err := withSecure(ctx, t, 0, talosconfig, func(ctx context.Context, c *client.Client) error {
		return c.ResetGeneric(ctx, &machine.ResetRequest{
			Graceful: opts.Graceful,
			Reboot:   !opts.Halt,
			SystemPartitionsToWipe: []*machine.ResetPartitionSpec{
				{Label: "STATE", Wipe: true},
				{Label: "EPHEMERAL", Wipe: true},
			},
		})
	})
	if err == nil {
		return nil
	}
	if st, serr := Status(ctx, t, talosconfig); serr == nil && st.Stage == tenant.StageMaintenance {
		return nil
	}
	return fmt.Errorf("reset %s: %w", t, err)
}

// isConfigError reports errors that retrying cannot fix (a bad talosconfig).
func isConfigError(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "talosconfig:")
}

func versionTag(v *machine.VersionResponse) string {
	for _, m := range v.GetMessages() {
		if t := m.GetVersion().GetTag(); t != "" {
			return t
		}
	}
	return ""
}

func statusMessage(err error) string {
	if s := client.Status(err); s != nil {
		return s.Message()
	}
	return err.Error()
}

// short trims an error for messages.
func short(err error) string {
	if err == nil {
		return "none"
	}
	s := statusMessage(err)
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

// isUnreachable reports errors meaning the node does not answer (down,
// rebooting, network) as opposed to answering with a refusal.
func isUnreachable(err error) bool {
	if err == nil {
		return false
	}
	switch client.StatusCode(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded)
}

// isDialError reports a connection that could not be made at all.
func isDialError(err error) bool {
	if client.StatusCode(err) == codes.DeadlineExceeded || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	s := err.Error()
	for _, m := range []string{"connection refused", "no route to host", "network is unreachable", "i/o timeout", "dial tcp"} {
		if strings.Contains(s, m) {
			return true
		}
	}
	return false
}

// isTrustError reports a TLS handshake that failed on certificates: the
// node answers, but not with (or not to) our cluster's identity, e.g. a node
// in maintenance mode with its self-signed certificate.
func isTrustError(err error) bool {
	if err == nil {
		return false
	}
	s := err.Error()
	return strings.Contains(s, "x509:") || strings.Contains(s, "certificate") || strings.Contains(s, "tls: ")
}
