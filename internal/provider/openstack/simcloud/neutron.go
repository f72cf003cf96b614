package simcloud

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// neutronError answers in Neutron's error shape.
// neutronBody decodes a request body {"<kind>": {...}}, answering 400 when
// it is not one.
func neutronBody(w http.ResponseWriter, r *http.Request, kind string) (obj, bool) {
	body, err := decode(r)
	if err != nil {
		neutronError(w, http.StatusBadRequest, "HTTPBadRequest", "%v", err)
		return nil, false
	}
	req, ok := body[kind].(obj)
	if !ok {
		neutronError(w, http.StatusBadRequest, "HTTPBadRequest", "Resource body required: %s", kind)
		return nil, false
	}
	return req, true
}

func neutronError(w http.ResponseWriter, status int, kind, format string, args ...any) {
	writeJSON(w, status, obj{"NeutronError": obj{"type": kind, "message": fmt.Sprintf(format, args...), "detail": ""}})
}

// portIP is a port's first fixed IP.
func portIP(p obj) string {
	if p == nil {
		return ""
	}
	ips, _ := p["fixed_ips"].([]any)
	if len(ips) == 0 {
		return ""
	}
	ip, _ := ips[0].(obj)["ip_address"].(string)
	return ip
}

// neutronAPI serves /network/v2.0/<collection>[/<id>[/tags[/<tag>]]].
func (c *Cloud) neutronAPI(w http.ResponseWriter, r *http.Request, seg []string) {
	if len(seg) == 0 {
		c.notImplemented(w, r)
		return
	}
	coll := strings.TrimSuffix(seg[0], ".json")
	kind, ok := neutronKinds[coll]
	if !ok {
		c.notImplemented(w, r)
		return
	}
	var after []func()
	defer func() {
		for _, f := range after {
			f()
		}
	}()
	c.mu.Lock()
	defer c.mu.Unlock()
	objs := c.neutron[coll]
	if len(seg) == 1 {
		switch r.Method {
		case http.MethodGet:
			list := []any{}
			for _, id := range sortedKeys(objs) {
				if o := c.neutronView(coll, objs[id]); c.matches(o, r) {
					list = append(list, o)
				}
			}
			writeJSON(w, http.StatusOK, obj{coll2plural(coll): list})
		case http.MethodPost:
			req, ok := neutronBody(w, r, kind)
			if !ok {
				return
			}
			o, status, err := c.neutronCreate(coll, req, &after)
			if err != nil {
				neutronError(w, status, errType(status), "%v", err)
				return
			}
			writeJSON(w, http.StatusCreated, obj{kind: c.neutronView(coll, o)})
		default:
			c.notImplementedLocked(w, r)
		}
		return
	}
	o, ok := objs[seg[1]]
	if !ok {
		neutronError(w, http.StatusNotFound, notFoundType(kind), "%s %s could not be found.", kind, seg[1])
		return
	}
	if len(seg) >= 3 && seg[2] == "tags" {
		c.neutronTags(w, r, o, seg[3:])
		return
	}
	if len(seg) != 2 {
		c.notImplementedLocked(w, r)
		return
	}
	switch r.Method {
	case http.MethodGet:
		writeJSON(w, http.StatusOK, obj{kind: c.neutronView(coll, o)})
	case http.MethodPut:
		req, ok := neutronBody(w, r, kind)
		if !ok {
			return
		}
		if status, err := c.neutronUpdate(coll, o, req, &after); err != nil {
			neutronError(w, status, errType(status), "%v", err)
			return
		}
		o["updated_at"] = stamp(time.Now())
		o["revision_number"] = toInt(o["revision_number"]) + 1
		writeJSON(w, http.StatusOK, obj{kind: c.neutronView(coll, o)})
	case http.MethodDelete:
		if status, err := c.neutronDelete(coll, o, &after); err != nil {
			neutronError(w, status, errType(status), "%v", err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	default:
		c.notImplementedLocked(w, r)
	}
}

func coll2plural(coll string) string { return strings.ReplaceAll(coll, "-", "_") }

func notFoundType(kind string) string {
	var b strings.Builder
	for _, part := range strings.Split(kind, "_") {
		if part == "floatingip" {
			part = "floatingIP"
		}
		b.WriteString(strings.ToUpper(part[:1]) + part[1:])
	}
	return b.String() + "NotFound"
}

func errType(status int) string {
	switch status {
	case http.StatusNotFound:
		return "HTTPNotFound"
	case http.StatusConflict:
		return "Conflict"
	default:
		return "HTTPBadRequest"
	}
}

// notImplementedLocked is notImplemented with c.mu held.
func (c *Cloud) notImplementedLocked(w http.ResponseWriter, r *http.Request) {
	c.unhandled = append(c.unhandled, r.Method+" "+r.URL.Path)
	writeJSON(w, http.StatusNotImplemented, obj{"error": obj{"code": 501, "message": "simcloud does not implement " + r.Method + " " + r.URL.Path}})
}

// neutronView is the wire form of an object: a copy, with a security
// group's rules embedded.
func (c *Cloud) neutronView(coll string, o obj) obj {
	v := obj{}
	for k, val := range o {
		v[k] = val
	}
	if coll == "security-groups" {
		rules := []any{}
		for _, id := range sortedKeys(c.neutron["security-group-rules"]) {
			if rule := c.neutron["security-group-rules"][id]; rule["security_group_id"] == o["id"] {
				rules = append(rules, rule)
			}
		}
		v["security_group_rules"] = rules
	}
	return v
}

// ignoredFilters are list parameters that are not field filters.
var ignoredFilters = map[string]bool{"fields": true, "sort": true, "sort_key": true, "sort_dir": true, "limit": true, "marker": true, "page_reverse": true, "all_tenants": true}

// matches applies Neutron's equality filters on top-level fields (several
// values of one key match any of them), and fixed_ips=ip_address=… or
// subnet_id=….
func (c *Cloud) matches(o obj, r *http.Request) bool {
	for key, values := range r.URL.Query() {
		if ignoredFilters[key] {
			continue
		}
		if key == "fixed_ips" {
			for _, v := range values {
				k, want, _ := strings.Cut(v, "=")
				found := false
				ips, _ := o["fixed_ips"].([]any)
				for _, ip := range ips {
					if ip.(obj)[k] == want {
						found = true
					}
				}
				if !found {
					return false
				}
			}
			continue
		}
		if key == "tags" || key == "tags-any" {
			tags, _ := o["tags"].([]any)
			for _, v := range values {
				want := strings.Split(v, ",")
				n := 0
				for _, t := range want {
					if slices.Contains(tags, any(t)) {
						n++
					}
				}
				if (key == "tags" && n != len(want)) || (key == "tags-any" && n == 0) {
					return false
				}
			}
			continue
		}
		field, ok := o[key]
		if !ok {
			if c.opts.Logf != nil {
				c.opts.Logf("simcloud: unknown filter %q on %s", key, r.URL.Path)
			}
			return false
		}
		if !slices.Contains(values, scalar(field)) {
			return false
		}
	}
	return true
}

func scalar(v any) string {
	switch v := v.(type) {
	case nil:
		return ""
	case string:
		return v
	case bool:
		return strconv.FormatBool(v)
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	default:
		return fmt.Sprint(v)
	}
}

func toInt(v any) int {
	switch v := v.(type) {
	case int:
		return v
	case float64:
		return int(v)
	}
	return 0
}

// common are the fields every Neutron object has.
func (c *Cloud) common(id string, req obj) obj {
	now := stamp(time.Now())
	desc, _ := req["description"].(string)
	return obj{"id": id, "project_id": c.projectID, "tenant_id": c.projectID, "description": desc,
		"tags": []any{}, "created_at": now, "updated_at": now, "revision_number": 1}
}

// stringList reads a JSON list of strings.
func stringList(v any) ([]string, bool) {
	list, ok := v.([]any)
	if v == nil {
		return nil, true
	}
	if !ok {
		return nil, false
	}
	out := make([]string, 0, len(list))
	for _, e := range list {
		s, ok := e.(string)
		if !ok {
			return nil, false
		}
		out = append(out, s)
	}
	return out, true
}

func anyList(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// neutronCreate creates an object of coll from its request; c.mu is held.
func (c *Cloud) neutronCreate(coll string, req obj, after *[]func()) (obj, int, error) {
	name, _ := req["name"].(string)
	key := name
	if key == "" {
		key = canon(req)
	}
	switch coll {
	case "security-groups":
		id := c.newID("security_group", key)
		o := c.common(id, req)
		o["name"] = name
		o["stateful"] = true
		o["shared"] = false
		c.neutron[coll][id] = o
		for _, eth := range []string{"IPv4", "IPv6"} {
			rid := c.newID("security_group_rule", id+eth)
			rule := c.common(rid, obj{})
			for k, v := range (obj{"direction": "egress", "ethertype": eth, "protocol": nil, "port_range_min": nil, "port_range_max": nil,
				"remote_ip_prefix": nil, "remote_group_id": nil, "remote_address_group_id": nil, "normalized_cidr": nil,
				"security_group_id": id, "belongs_to_default_sg": false}) {
				rule[k] = v
			}
			delete(rule, "tags")
			c.neutron["security-group-rules"][rid] = rule
		}
		return o, 0, nil
	case "security-group-rules":
		sg, _ := req["security_group_id"].(string)
		if _, ok := c.neutron["security-groups"][sg]; !ok {
			return nil, http.StatusNotFound, fmt.Errorf("Security group %s does not exist", sg)
		}
		if rg, _ := req["remote_group_id"].(string); rg != "" {
			if _, ok := c.neutron["security-groups"][rg]; !ok {
				return nil, http.StatusNotFound, fmt.Errorf("Security group %s does not exist", rg)
			}
		}
		dir, _ := req["direction"].(string)
		if dir != "ingress" && dir != "egress" {
			return nil, http.StatusBadRequest, fmt.Errorf("Invalid input for direction. Reason: %q is not in [ingress, egress]", dir)
		}
		fields := []string{"direction", "ethertype", "protocol", "port_range_min", "port_range_max", "remote_ip_prefix", "remote_group_id", "remote_address_group_id", "security_group_id"}
		for _, other := range c.neutron[coll] {
			same := true
			for _, f := range fields {
				if scalar(other[f]) != scalar(req[f]) {
					same = false
				}
			}
			if same {
				return nil, http.StatusConflict, fmt.Errorf("Security group rule already exists. Rule id is %s.", other["id"])
			}
		}
		id := c.newID("security_group_rule", key)
		o := c.common(id, req)
		delete(o, "tags")
		for _, f := range fields {
			o[f] = req[f] // absent fields come back as null
		}
		if o["ethertype"] == nil {
			o["ethertype"] = "IPv4"
		}
		o["normalized_cidr"] = req["remote_ip_prefix"]
		o["belongs_to_default_sg"] = false
		c.neutron[coll][id] = o
		return o, 0, nil
	case "ports":
		netID, _ := req["network_id"].(string)
		if netID != c.netID {
			if _, ok := c.neutron["networks"][netID]; ok {
				return nil, http.StatusBadRequest, fmt.Errorf("simcloud allocates ports on network %s (%s) only, not %s", c.netID, c.opts.Network, netID)
			}
			return nil, http.StatusNotFound, fmt.Errorf("Network %s could not be found.", netID)
		}
		groups, ok := stringList(req["security_groups"])
		if !ok {
			return nil, http.StatusBadRequest, fmt.Errorf("Invalid input for security_groups: not a list of ids")
		}
		for _, g := range groups {
			if _, ok := c.neutron["security-groups"][g]; !ok {
				return nil, http.StatusNotFound, fmt.Errorf("Security group %s does not exist", g)
			}
		}
		if _, ok := req["fixed_ips"]; ok {
			return nil, http.StatusBadRequest, fmt.Errorf("simcloud does not take fixed_ips on ports: it allocates one address")
		}
		id := c.newID("port", key)
		ip, err := c.fixed.take(id)
		if err != nil {
			return nil, http.StatusConflict, fmt.Errorf("IpAddressGenerationFailure: %v", err)
		}
		c.neutron[coll][id] = c.newPort(id, name, req, groups, ip)
		return c.neutron[coll][id], 0, nil
	case "floatingips":
		netID, _ := req["floating_network_id"].(string)
		n, ok := c.neutron["networks"][netID]
		if !ok {
			return nil, http.StatusNotFound, fmt.Errorf("Network %s could not be found.", netID)
		}
		if n["router:external"] != true {
			return nil, http.StatusBadRequest, fmt.Errorf("Bad floatingip request: Network %s is not a valid external network.", netID)
		}
		if _, ok := req["floating_ip_address"]; ok {
			return nil, http.StatusBadRequest, fmt.Errorf("simcloud does not take floating_ip_address: it allocates one")
		}
		id := c.newID("floatingip", key)
		ip, err := c.floating.take(id)
		if err != nil {
			return nil, http.StatusConflict, fmt.Errorf("No more IP addresses available on network %s: %v", netID, err)
		}
		o := c.common(id, req)
		for k, v := range (obj{"floating_ip_address": ip, "floating_network_id": netID, "status": "DOWN", "port_id": nil,
			"fixed_ip_address": nil, "router_id": nil, "port_details": nil, "port_forwardings": []any{},
			"dns_name": "", "dns_domain": "", "qos_policy_id": nil}) {
			o[k] = v
		}
		c.neutron[coll][id] = o
		if port, _ := req["port_id"].(string); port != "" {
			if status, err := c.associate(o, port, after); err != nil {
				delete(c.neutron[coll], id)
				c.floating.release(ip)
				return nil, status, err
			}
		}
		return o, 0, nil
	}
	return nil, http.StatusBadRequest, fmt.Errorf("simcloud does not create %s", coll)
}

// newPort builds a port object; c.mu is held.
func (c *Cloud) newPort(id, name string, req obj, groups []string, ip string) obj {
	o := c.common(id, req)
	adminUp, ok := req["admin_state_up"].(bool)
	if !ok {
		adminUp = true
	}
	deviceID, _ := req["device_id"].(string)
	owner, _ := req["device_owner"].(string)
	for k, v := range (obj{"name": name, "network_id": c.netID, "admin_state_up": adminUp, "status": "ACTIVE",
		"mac_address": mac(id), "fixed_ips": []any{obj{"subnet_id": c.subnetID, "ip_address": ip}},
		"device_id": deviceID, "device_owner": owner, "security_groups": anyList(groups),
		"allowed_address_pairs": []any{}, "extra_dhcp_opts": []any{}, "port_security_enabled": true,
		"binding:vnic_type": "normal", "binding:host_id": "", "binding:profile": obj{}, "binding:vif_details": obj{},
		"binding:vif_type": "unbound", "dns_name": "", "dns_assignment": []any{}, "qos_policy_id": nil,
		"qos_network_policy_id": nil, "propagate_uplink_status": false, "ip_allocation": "immediate"}) {
		o[k] = v
	}
	return o
}

// associate binds floating IP f to a port; c.mu is held.
func (c *Cloud) associate(f obj, portID string, after *[]func()) (int, error) {
	p, ok := c.neutron["ports"][portID]
	if !ok {
		return http.StatusNotFound, fmt.Errorf("Port %s could not be found.", portID)
	}
	for _, other := range c.neutron["floatingips"] {
		if other["port_id"] == portID && other["id"] != f["id"] {
			return http.StatusConflict, fmt.Errorf("Cannot associate floating IP %s with port %s using fixed IP %s, as that fixed IP already has a floating IP on external network %s.",
				f["floating_ip_address"], portID, portIP(p), f["floating_network_id"])
		}
	}
	f["port_id"] = portID
	f["fixed_ip_address"] = portIP(p)
	f["status"] = "ACTIVE"
	f["router_id"] = c.newIDStable("router", "router")
	f["port_details"] = obj{"name": p["name"], "network_id": p["network_id"], "mac_address": p["mac_address"],
		"admin_state_up": p["admin_state_up"], "status": p["status"], "device_id": p["device_id"], "device_owner": p["device_owner"]}
	c.fipHook(p, f["floating_ip_address"].(string), after)
	return 0, nil
}

// disassociate unbinds floating IP f; c.mu is held.
func (c *Cloud) disassociate(f obj, after *[]func()) {
	portID, _ := f["port_id"].(string)
	if portID == "" {
		return
	}
	f["port_id"], f["fixed_ip_address"], f["router_id"], f["port_details"], f["status"] = nil, nil, nil, nil, "DOWN"
	c.fipHook(c.neutron["ports"][portID], "", after)
}

// fipHook queues FloatingIPAssociated for port p; c.mu is held.
func (c *Cloud) fipHook(p obj, ip string, after *[]func()) {
	hook := c.opts.Hooks.FloatingIPAssociated
	if hook == nil || p == nil {
		return
	}
	s := Server{FixedIP: portIP(p)}
	if srv, ok := c.servers[scalar(p["device_id"])]; ok {
		s = c.view(srv)
	}
	s.FloatingIP = ip
	*after = append(*after, func() { hook(s, ip) })
}

// newIDStable is an id that is the same on every call.
func (c *Cloud) newIDStable(kind, key string) string {
	id := c.newID(kind, key)
	c.seen[kind+"\x00"+key]--
	return id
}

// neutronUpdate applies a PUT; c.mu is held.
func (c *Cloud) neutronUpdate(coll string, o, req obj, after *[]func()) (int, error) {
	allowed := map[string][]string{
		"networks":             {"name", "description", "admin_state_up"},
		"subnets":              {"name", "description"},
		"ports":                {"name", "description", "admin_state_up", "device_id", "device_owner"},
		"security-groups":      {"name", "description", "stateful"},
		"security-group-rules": {"description"},
		"floatingips":          {"description"},
	}[coll]
	for k := range req {
		if !slices.Contains(allowed, k) && !(coll == "floatingips" && (k == "port_id" || k == "fixed_ip_address")) &&
			!(coll == "ports" && k == "security_groups") {
			return http.StatusBadRequest, fmt.Errorf("simcloud cannot update %s of %s", k, coll)
		}
	}
	if coll == "ports" {
		if v, ok := req["security_groups"]; ok {
			groups, ok := stringList(v)
			if !ok {
				return http.StatusBadRequest, fmt.Errorf("Invalid input for security_groups: not a list of ids")
			}
			for _, g := range groups {
				if _, ok := c.neutron["security-groups"][g]; !ok {
					return http.StatusNotFound, fmt.Errorf("Security group %s does not exist", g)
				}
			}
			o["security_groups"] = anyList(groups)
		}
	}
	if coll == "floatingips" {
		if v, ok := req["port_id"]; ok {
			port, _ := v.(string)
			if port == "" {
				c.disassociate(o, after)
			} else if port != o["port_id"] {
				c.disassociate(o, after)
				if status, err := c.associate(o, port, after); err != nil {
					return status, err
				}
			}
		}
	}
	for _, k := range allowed {
		if v, ok := req[k]; ok {
			o[k] = v
		}
	}
	return 0, nil
}

// neutronDelete deletes an object; c.mu is held.
func (c *Cloud) neutronDelete(coll string, o obj, after *[]func()) (int, error) {
	id := o["id"].(string)
	switch coll {
	case "networks", "subnets":
		return http.StatusConflict, fmt.Errorf("simcloud keeps its pre-created %s %s", coll, id)
	case "security-groups":
		for _, p := range c.neutron["ports"] {
			if slices.Contains(p["security_groups"].([]any), any(id)) {
				return http.StatusConflict, fmt.Errorf("Security Group %s in use.", id)
			}
		}
		for rid, rule := range c.neutron["security-group-rules"] {
			if rule["security_group_id"] == id {
				delete(c.neutron["security-group-rules"], rid)
			}
		}
	case "ports":
		c.deletePort(id, after)
		return 0, nil
	case "floatingips":
		c.disassociate(o, after)
		c.floating.release(o["floating_ip_address"].(string))
	}
	delete(c.neutron[coll], id)
	return 0, nil
}

// deletePort deletes a port, its floating IP association and its place in
// a server; c.mu is held.
func (c *Cloud) deletePort(id string, after *[]func()) {
	p := c.neutron["ports"][id]
	if p == nil {
		return
	}
	for _, f := range c.neutron["floatingips"] {
		if f["port_id"] == id {
			c.disassociate(f, after)
		}
	}
	if s, ok := c.servers[scalar(p["device_id"])]; ok {
		s.ports = slices.DeleteFunc(s.ports, func(x string) bool { return x == id })
	}
	c.fixed.release(portIP(p))
	delete(c.neutron["ports"], id)
}

// neutronTags serves /<collection>/<id>/tags[/<tag>]; c.mu is held.
func (c *Cloud) neutronTags(w http.ResponseWriter, r *http.Request, o obj, rest []string) {
	tags, _ := stringList(o["tags"])
	switch {
	case len(rest) == 0 && r.Method == http.MethodGet:
	case len(rest) == 0 && r.Method == http.MethodPut:
		body, err := decode(r)
		if err != nil {
			neutronError(w, http.StatusBadRequest, "HTTPBadRequest", "%v", err)
			return
		}
		list, ok := stringList(body["tags"])
		if !ok {
			neutronError(w, http.StatusBadRequest, "HTTPBadRequest", "Invalid input: tags must be a list of strings")
			return
		}
		tags = list
	case len(rest) == 0 && r.Method == http.MethodDelete:
		tags = nil
	case len(rest) == 1 && r.Method == http.MethodPut:
		if !slices.Contains(tags, rest[0]) {
			tags = append(tags, rest[0])
		}
	case len(rest) == 1 && r.Method == http.MethodDelete:
		tags = slices.DeleteFunc(tags, func(t string) bool { return t == rest[0] })
	default:
		c.notImplementedLocked(w, r)
		return
	}
	slices.Sort(tags)
	o["tags"] = anyList(tags)
	switch {
	case r.Method == http.MethodGet || (len(rest) == 0 && r.Method == http.MethodPut):
		writeJSON(w, http.StatusOK, obj{"tags": o["tags"]})
	case len(rest) == 1 && r.Method == http.MethodPut:
		w.WriteHeader(http.StatusCreated)
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}
