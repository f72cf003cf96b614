package power

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/bougou/go-ipmi/pkg/client"
	"github.com/bougou/go-ipmi/pkg/command/chassis"
	"github.com/bougou/go-ipmi/pkg/types"
	"github.com/rezuscloud/rezuscloud/internal/machine"
)

// IPMICredentials log in to the BMCs of power = "ipmi://…" machines
// (TOML [credentials.ipmi], add-on options ipmi.username, ipmi.password).
type IPMICredentials struct {
	Username, Password string
}

// DefaultIPMIPort is the RMCP port.
const DefaultIPMIPort = machine.DefaultIPMIPort

// IPMI powers a machine through its BMC over IPMI v2.0 (RMCP+, "lanplus"):
// chassis power up, soft (ACPI) shutdown, power down, status. Each call is
// one session.
type IPMI struct {
	Host        string
	Port        int
	Credentials IPMICredentials
	// GracePeriod is how long Off waits after the soft shutdown before it
	// powers down (default 2 min); PollInterval how often it looks
	// (default 2 s); Timeout bounds each IPMI exchange (default 5 s).
	GracePeriod, PollInterval, Timeout time.Duration
}

func newIPMI(spec Spec, d Deps) (*IPMI, error) {
	u, err := url.Parse(spec.URL)
	if err != nil {
		return nil, fmt.Errorf("power %s: %w", spec.URL, err)
	}
	port, _ := strconv.Atoi(u.Port())
	if d.IPMI.Username == "" {
		return nil, fmt.Errorf("power %s: no IPMI username: set the add-on options ipmi.username and ipmi.password (TOML [credentials.ipmi])", spec.URL)
	}
	return &IPMI{Host: u.Hostname(), Port: port, Credentials: d.IPMI, GracePeriod: d.GracePeriod, PollInterval: d.PollInterval}, nil
}

func (p *IPMI) addr() string { return net.JoinHostPort(p.Host, strconv.Itoa(p.Port)) }

// session opens an authenticated session; a refused login says so.
func (p *IPMI) session(ctx context.Context) (*client.Client, error) {
	c, err := client.NewClient(p.Host, p.Port, p.Credentials.Username, p.Credentials.Password)
	if err != nil {
		return nil, fmt.Errorf("ipmi %s: %w", p.addr(), err)
	}
	t := p.Timeout
	if t <= 0 {
		t = 5 * time.Second
	}
	// cipher suite 17 (HMAC-SHA256, AES-128) where the BMC has it, else 3
	// (HMAC-SHA1, AES-128), the one every IPMI 2.0 BMC has; the library's
	// longer default list waits out suites a BMC ignores
	c = c.WithTimeout(t).WithRetry(1).WithCipherSuiteID(types.CipherSuiteID17, types.CipherSuiteID3)
	if err := c.Connect(ctx); err != nil {
		if msg := strings.ToLower(err.Error()); strings.Contains(msg, "rakp") || strings.Contains(msg, "authentication failed") || strings.Contains(msg, "unauthorized") {
			return nil, fmt.Errorf("ipmi %s: the BMC refused the login of user %q (check ipmi.username and ipmi.password): %w", p.addr(), p.Credentials.Username, err)
		}
		return nil, fmt.Errorf("ipmi %s: no IPMI session (is the BMC reachable on UDP port %d, with IPMI over LAN on?): %w", p.addr(), p.Port, err)
	}
	return c, nil
}

// do runs f in one session.
func (p *IPMI) do(ctx context.Context, f func(*client.Client) error) error {
	c, err := p.session(ctx)
	if err != nil {
		return err
	}
	defer c.Close(context.WithoutCancel(ctx))
	return f(c)
}

func (p *IPMI) on(ctx context.Context, c *client.Client) (bool, error) {
	st, err := c.GetChassisStatus(ctx)
	if err != nil {
		return false, fmt.Errorf("ipmi %s: chassis status: %w", p.addr(), err)
	}
	return st.PowerIsOn, nil
}

func (p *IPMI) control(ctx context.Context, c *client.Client, what chassis.ChassisControl, name string) error {
	if _, err := c.ChassisControl(ctx, what); err != nil {
		return fmt.Errorf("ipmi %s: chassis power %s: %w", p.addr(), name, err)
	}
	return nil
}

// On powers the chassis up unless it is on.
func (p *IPMI) On(ctx context.Context) error {
	return p.do(ctx, func(c *client.Client) error {
		if on, err := p.on(ctx, c); err != nil || on {
			return err
		}
		return p.control(ctx, c, chassis.ChassisControlPowerUp, "on")
	})
}

// Off does nothing to a chassis that is off; otherwise it asks for a soft
// (ACPI) shutdown, waits up to GracePeriod for the power to go off, then
// powers the chassis down.
func (p *IPMI) Off(ctx context.Context) error {
	return p.do(ctx, func(c *client.Client) error {
		if on, err := p.on(ctx, c); err != nil || !on {
			return err
		}
		if err := p.control(ctx, c, chassis.ChassisControlSoftShutdown, "soft"); err != nil {
			return err
		}
		grace, every := p.GracePeriod, p.PollInterval
		if grace <= 0 {
			grace = 2 * time.Minute
		}
		if every <= 0 {
			every = 2 * time.Second
		}
		deadline := time.NewTimer(grace)
		defer deadline.Stop()
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			if on, err := p.on(ctx, c); err == nil && !on {
				return nil
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("ipmi %s: waiting for the soft shutdown: %w", p.addr(), ctx.Err())
			case <-deadline.C:
				return p.control(ctx, c, chassis.ChassisControlPowerDown, "off")
			case <-tick.C:
			}
		}
	})
}

// State is the chassis power.
func (p *IPMI) State(ctx context.Context) (State, error) {
	st := StateUnknown
	err := p.do(ctx, func(c *client.Client) error {
		on, err := p.on(ctx, c)
		if err == nil {
			st = map[bool]State{true: StateOn, false: StateOff}[on]
		}
		return err
	})
	return st, err
}
