// Package cloudsim is a cloud for tests and the demo: the stand-in OpenStack
// API (simcloud) whose servers boot simulated Talos nodes (simnode) from
// their user_data, configured from the first boot as a cloud image is. A
// node listens on its private (fixed) address and, once one is associated,
// on its floating IP; control planes route requests to the other nodes of
// their cluster (apid). Everything is on loopback.
package cloudsim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"

	"github.com/rezuscloud/rezuscloud/internal/provider/openstack/simcloud"
	"github.com/rezuscloud/rezuscloud/internal/talos/simnode"
)

// Options configure a Cloud.
type Options struct {
	// Cloud configures the stand-in API; its Hooks are set by Start (and
	// called after the cloud's own).
	Cloud simcloud.Options
	// Node is the template of every simulated node (stage delays, version);
	// its addresses, config and World are set per server.
	Node simnode.Options
	// TalosPort is the port nodes listen on (default 50000).
	TalosPort int
}

// Cloud is a running stand-in cloud with its simulated nodes.
type Cloud struct {
	*simcloud.Cloud
	opts  Options
	world *simnode.World
	ctx   context.Context

	mu     sync.Mutex
	nodes  map[string]*simnode.Node // by server name
	all    []*simnode.Node          // every node ever booted, for Calls
	byID   map[string]string        // server id -> name
	public map[string]string        // server name -> floating IP it listens on
	errs   []error
}

// Start starts the API and the hooks that boot nodes. Without FixedCIDR and
// FloatingCIDR it picks two random loopback /24s, so concurrent tests do
// not collide.
func Start(ctx context.Context, opts Options) (*Cloud, error) {
	if opts.TalosPort == 0 {
		opts.TalosPort = 50000
	}
	c := &Cloud{opts: opts, world: simnode.NewWorld(), ctx: ctx,
		nodes: map[string]*simnode.Node{}, byID: map[string]string{}, public: map[string]string{}}
	user := opts.Cloud.Hooks
	o := opts.Cloud
	o.Hooks = simcloud.Hooks{
		ServerActive: func(s simcloud.Server) error {
			if err := c.boot(s); err != nil {
				return err
			}
			if user.ServerActive != nil {
				return user.ServerActive(s)
			}
			return nil
		},
		FloatingIPAssociated: func(s simcloud.Server, fip string) {
			c.associate(s, fip)
			if user.FloatingIPAssociated != nil {
				user.FloatingIPAssociated(s, fip)
			}
		},
		ServerDeleted: func(s simcloud.Server) {
			c.remove(s)
			if user.ServerDeleted != nil {
				user.ServerDeleted(s)
			}
		},
		Request: user.Request,
	}
	var last error
	for range 20 {
		if opts.Cloud.FixedCIDR == "" {
			o.FixedCIDR = fmt.Sprintf("127.%d.%d.0/24", 1+rand.IntN(254), rand.IntN(256))
		}
		if opts.Cloud.FloatingCIDR == "" {
			o.FloatingCIDR = fmt.Sprintf("127.%d.%d.0/24", 1+rand.IntN(254), rand.IntN(256))
		}
		if o.FixedCIDR == o.FloatingCIDR {
			continue
		}
		sc, err := simcloud.Start(o)
		if err != nil {
			last = err
			continue
		}
		c.Cloud = sc
		return c, nil
	}
	return nil, fmt.Errorf("cloudsim: %w", last)
}

func (c *Cloud) addr(ip string) string { return net.JoinHostPort(ip, strconv.Itoa(c.opts.TalosPort)) }

// boot starts the node of a server that becomes ACTIVE, from its user_data.
func (c *Cloud) boot(s simcloud.Server) error {
	if len(s.UserData) == 0 {
		return fmt.Errorf("server %s has no user_data: a Talos image without a config would wait in maintenance mode", s.Name)
	}
	o := c.opts.Node
	o.Addr = c.addr(s.FixedIP)
	o.Config = s.UserData
	if s.FloatingIP != "" {
		o.PublicAddr = c.addr(s.FloatingIP)
	}
	n, err := c.world.Start(c.ctx, o)
	if err != nil {
		return fmt.Errorf("booting the node of server %s: %w", s.Name, err)
	}
	c.mu.Lock()
	c.nodes[s.Name] = n
	c.all = append(c.all, n)
	c.byID[s.ID] = s.Name
	if s.FloatingIP != "" {
		c.public[s.Name] = s.FloatingIP
	}
	c.mu.Unlock()
	return nil
}

// associate makes a node answer on (or stop answering on) a floating IP.
func (c *Cloud) associate(s simcloud.Server, fip string) {
	c.mu.Lock()
	n := c.nodes[s.Name]
	old := c.public[s.Name]
	if fip == "" {
		delete(c.public, s.Name)
	} else {
		c.public[s.Name] = fip
	}
	c.mu.Unlock()
	if n == nil || old == fip {
		return
	}
	if old != "" {
		if err := n.RemovePublicAddr(c.addr(old)); err != nil {
			c.fail(err)
		}
	}
	if fip != "" {
		if _, err := n.AddPublicAddr(c.addr(fip)); err != nil {
			c.fail(err)
		}
	}
}

// remove stops the node of a deleted server.
func (c *Cloud) remove(s simcloud.Server) {
	c.mu.Lock()
	n := c.nodes[s.Name]
	if id, ok := c.byID[s.ID]; ok && id == s.Name {
		delete(c.nodes, s.Name)
		delete(c.byID, s.ID)
		delete(c.public, s.Name)
	}
	c.mu.Unlock()
	if n != nil {
		n.Close()
	}
}

func (c *Cloud) fail(err error) {
	c.mu.Lock()
	c.errs = append(c.errs, err)
	c.mu.Unlock()
}

// Errors are the failures of hooks that could not be reported to the API.
func (c *Cloud) Errors() []error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]error(nil), c.errs...)
}

// Node is the simulated node of the server with that name (nil if none).
func (c *Cloud) Node(name string) *simnode.Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[name]
}

// Calls sums the calls of every node the cloud ever booted (deleted ones
// too), so a test can check, for example, that no connection ever reached
// a node's private address directly.
func (c *Cloud) Calls() simnode.Counts {
	c.mu.Lock()
	all := append([]*simnode.Node(nil), c.all...)
	c.mu.Unlock()
	return (&simnode.Cluster{Nodes: all}).Calls()
}

// Close stops every node and the API.
func (c *Cloud) Close() {
	c.mu.Lock()
	nodes := c.nodes
	c.nodes = map[string]*simnode.Node{}
	c.mu.Unlock()
	for _, n := range nodes {
		n.Close()
	}
	if c.Cloud != nil {
		c.Cloud.Close()
	}
}

// Env is what the add-on gives tofu for this cloud (the provider's OS_*
// variables), with the password the cloud was started with.
func (c *Cloud) Env() map[string]string {
	o := c.Cloud.Options()
	return map[string]string{"OS_AUTH_URL": c.AuthURL(), "OS_USERNAME": o.Username, "OS_PASSWORD": o.Password,
		"OS_PROJECT_NAME": o.Project, "OS_USER_DOMAIN_NAME": "Default", "OS_PROJECT_DOMAIN_NAME": "Default",
		"OS_REGION_NAME": o.Region}
}

// TenantFile is an OpenStack tenant file for this cloud's pre-created
// network, image and floating IP pool: one group of control planes (the
// first with a floating IP) and one of workers.
func TenantFile(displayName, talosVersion string, controlPlanes, workers int, autoApply bool) string {
	return fmt.Sprintf(`display_name       = %q
provider           = "openstack"
talos_version      = %q
kubernetes_version = "1.35.0"
auto_apply         = %v

[openstack]
region           = "RegionOne"
network          = "private"
image            = "talos"
floating_ip_pool = "public"

[[node_groups]]
name      = "cp"
role      = "controlplane"
count     = %d
flavor    = "m1.medium"
volume_gb = 20

[[node_groups]]
name   = "workers"
role   = "worker"
count  = %d   # set from Home Assistant
flavor = "m1.large"
`, displayName, talosVersion, autoApply, controlPlanes, workers)
}
