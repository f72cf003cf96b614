package machine

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// DefaultIPMIPort is RMCP's port.
const DefaultIPMIPort = 623

// PowerKind is how a machine is powered.
type PowerKind string

// Kinds of power.
const (
	KindWOL     PowerKind = "wol"
	KindSwitch  PowerKind = "switch"
	KindButton  PowerKind = "button"
	KindRedfish PowerKind = "redfish"
	KindIPMI    PowerKind = "ipmi"
	KindNone    PowerKind = "none"
)

// PowerSpec is a parsed `power` value.
type PowerSpec struct {
	Kind PowerKind
	// Entity is the Home Assistant entity id ("switch.rack_plug") of
	// KindSwitch and KindButton.
	Entity string
	// URL is the ComputerSystem URL of KindRedfish, without "redfish+",
	// and the BMC of KindIPMI, "ipmi://<host>:<port>".
	URL string
}

// String is the value as written in a tenant file.
func (s PowerSpec) String() string {
	switch s.Kind {
	case KindSwitch, KindButton:
		return s.Entity
	case KindRedfish:
		return "redfish+" + s.URL
	case KindIPMI:
		return s.URL
	default:
		return string(s.Kind)
	}
}

// ParsePower reads a machine's `power` value. Empty means "wol" when the machine
// has a MAC address and "none" otherwise. Errors say what is wrong and what
// is accepted; the caller adds where (file, line, machine).
func ParsePower(value, mac string) (PowerSpec, error) {
	v := strings.TrimSpace(value)
	switch {
	case v == "":
		if mac != "" {
			return PowerSpec{Kind: KindWOL}, nil
		}
		return PowerSpec{Kind: KindNone}, nil
	case v == "wol":
		if mac == "" {
			return PowerSpec{}, errors.New(`power "wol" needs the machine's mac`)
		}
		return PowerSpec{Kind: KindWOL}, nil
	case v == "none":
		return PowerSpec{Kind: KindNone}, nil
	case strings.HasPrefix(v, "switch.") || strings.HasPrefix(v, "button."):
		domain, obj, _ := strings.Cut(v, ".")
		if !validObjectID(obj) {
			return PowerSpec{}, fmt.Errorf("power %q: %q is not a Home Assistant entity id (lower-case letters, digits and single underscores after %q)", value, v, domain+".")
		}
		return PowerSpec{Kind: PowerKind(domain), Entity: v}, nil
	case strings.HasPrefix(v, "redfish+"):
		u, err := RedfishSystemURL(strings.TrimPrefix(v, "redfish+"))
		if err != nil {
			return PowerSpec{}, fmt.Errorf("power: %w", err)
		}
		return PowerSpec{Kind: KindRedfish, URL: u.String()}, nil
	case strings.HasPrefix(v, "ipmi://"):
		return parseIPMI(v)
	}
	shown := value
	if strings.Contains(shown, "@") { // may hold credentials
		shown = redactUser(shown)
	}
	return PowerSpec{}, fmt.Errorf(`power %q: want "wol", "switch.<id>", "button.<id>", "redfish+https://<host>/redfish/v1/Systems/<id>", "ipmi://<host>[:port]" or "none"`, shown)
}

// validObjectID is Home Assistant's rule for the part after the domain.
func validObjectID(s string) bool {
	if s == "" || s[0] == '_' || s[len(s)-1] == '_' || strings.Contains(s, "__") {
		return false
	}
	for _, r := range s {
		if (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '_' {
			return false
		}
	}
	return true
}

// parseIPMI reads "ipmi://host[:port]": no credentials (they are add-on
// options), no path or query.
func parseIPMI(value string) (PowerSpec, error) {
	u, err := url.Parse(value)
	switch {
	case err != nil:
		return PowerSpec{}, fmt.Errorf(`power: %q is not "ipmi://<host>[:port]"`, redactUser(value))
	case u.User != nil:
		return PowerSpec{}, fmt.Errorf(`power %q: no credentials in the tenant file: set them in the add-on options (ipmi.username, ipmi.password; TOML [credentials.ipmi])`, redactUser(value))
	case u.Hostname() == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "":
		return PowerSpec{}, fmt.Errorf(`power %q: want "ipmi://<host>[:port]" (no path)`, value)
	}
	port := DefaultIPMIPort
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return PowerSpec{}, fmt.Errorf("power %q: port %q is not 1..65535", value, p)
		}
		port = n
	}
	return PowerSpec{Kind: KindIPMI, URL: "ipmi://" + net.JoinHostPort(u.Hostname(), strconv.Itoa(port))}, nil
}

func redactUser(v string) string {
	if i := strings.Index(v, "@"); i >= 0 {
		if j := strings.Index(v, "://"); j >= 0 && j < i {
			return v[:j+3] + "…" + v[i:]
		}
	}
	return v
}

// RedfishSystemURL checks a ComputerSystem URL: https, a host, a path under
// /redfish/v1/Systems/, and no credentials in it.
func RedfishSystemURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("redfish system %q: not a URL such as https://bmc.lan/redfish/v1/Systems/1", redactURL(s))
	}
	if u.User != nil {
		return nil, fmt.Errorf("redfish system %s: credentials do not belong in the URL (use the redfish username and password options)", u.Host)
	}
	if u.Scheme != "https" {
		return nil, fmt.Errorf("redfish system %s: scheme %q, want https (the password goes with every request)", u.Host, u.Scheme)
	}
	rest, ok := strings.CutPrefix(strings.TrimSuffix(u.Path, "/"), "/redfish/v1/Systems/")
	if !ok || rest == "" || strings.Contains(rest, "/") {
		return nil, fmt.Errorf("redfish system %s: path %q, want /redfish/v1/Systems/<id>", u.Host, u.Path)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	u.RawQuery, u.Fragment = "", ""
	return u, nil
}

// redactURL drops userinfo from a URL-ish string for messages.
func redactURL(s string) string {
	if at := strings.LastIndex(s, "@"); at >= 0 {
		if i := strings.Index(s, "://"); i >= 0 && i < at {
			return s[:i+3] + "…@" + s[at+1:]
		}
		return "…@" + s[at+1:]
	}
	return s
}
