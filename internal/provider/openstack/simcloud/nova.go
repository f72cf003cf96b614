package simcloud

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// novaError answers in Nova's error shape ({"itemNotFound": {...}} etc.).
func novaError(w http.ResponseWriter, status int, format string, args ...any) {
	key := map[int]string{
		http.StatusBadRequest: "badRequest", http.StatusForbidden: "forbidden", http.StatusNotFound: "itemNotFound",
		http.StatusConflict: "conflictingRequest", http.StatusRequestEntityTooLarge: "overLimit",
	}[status]
	if key == "" {
		key = "computeFault"
	}
	writeJSON(w, status, obj{key: obj{"code": status, "message": fmt.Sprintf(format, args...)}})
}

// microversion is the compute microversion a request asks for (2.1 without
// a header), as major*1000+minor.
func microversion(r *http.Request) int {
	v := r.Header.Get("X-OpenStack-Nova-API-Version")
	if h := r.Header.Get("OpenStack-API-Version"); strings.HasPrefix(h, "compute ") {
		v = strings.TrimPrefix(h, "compute ")
	}
	major, minor, ok := strings.Cut(strings.TrimSpace(v), ".")
	if !ok {
		return 2001
	}
	a, err1 := strconv.Atoi(major)
	b, err2 := strconv.Atoi(minor)
	if err1 != nil || err2 != nil {
		return 2001
	}
	return a*1000 + b
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// nova serves /compute/v2.1/...
func (c *Cloud) nova(w http.ResponseWriter, r *http.Request, seg []string) {
	if v := r.Header.Get("X-OpenStack-Nova-API-Version"); v != "" {
		w.Header().Set("X-OpenStack-Nova-API-Version", v)
		w.Header().Set("OpenStack-API-Version", "compute "+v)
	}
	if len(seg) == 1 && seg[0] == "servers" && r.Method == http.MethodPost {
		c.createServer(w, r)
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
	switch {
	case len(seg) >= 1 && seg[0] == "flavors" && r.Method == http.MethodGet:
		c.flavorsAPI(w, r, seg[1:])
	case len(seg) == 1 && seg[0] == "servers" && r.Method == http.MethodGet,
		len(seg) == 2 && seg[0] == "servers" && seg[1] == "detail" && r.Method == http.MethodGet:
		list := []any{}
		name := r.URL.Query().Get("name")
		for _, id := range sortedKeys(c.servers) {
			s := c.servers[id]
			if name != "" && !strings.Contains(s.name, name) {
				continue
			}
			if len(seg) == 1 {
				list = append(list, obj{"id": s.id, "name": s.name, "links": c.links("servers", s.id)})
			} else {
				list = append(list, c.serverView(s, microversion(r)))
			}
		}
		writeJSON(w, http.StatusOK, obj{"servers": list})
	case len(seg) >= 2 && seg[0] == "servers":
		s, ok := c.servers[seg[1]]
		if !ok {
			novaError(w, http.StatusNotFound, "Instance %s could not be found.", seg[1])
			return
		}
		c.serverAPI(w, r, s, seg[2:], &after)
	default:
		c.notImplementedLocked(w, r)
	}
}

func (c *Cloud) links(kind, id string) []any {
	return []any{
		obj{"rel": "self", "href": "http://" + c.addr + "/compute/v2.1/" + kind + "/" + id},
		obj{"rel": "bookmark", "href": "http://" + c.addr + "/compute/" + kind + "/" + id},
	}
}

// flavorsAPI serves flavors, flavors/detail and flavors/{id}; c.mu is held.
func (c *Cloud) flavorsAPI(w http.ResponseWriter, r *http.Request, rest []string) {
	view := func(f obj) obj {
		v := obj{"links": c.links("flavors", f["id"].(string))}
		for k, val := range f {
			v[k] = val
		}
		return v
	}
	switch {
	case len(rest) == 0 || (len(rest) == 1 && rest[0] == "detail"):
		list := []any{}
		for _, id := range sortedKeys(c.flavors) {
			list = append(list, view(c.flavors[id]))
		}
		writeJSON(w, http.StatusOK, obj{"flavors": list})
	case len(rest) == 1:
		f, ok := c.flavors[rest[0]]
		if !ok {
			novaError(w, http.StatusNotFound, "Flavor %s could not be found.", rest[0])
			return
		}
		writeJSON(w, http.StatusOK, obj{"flavor": view(f)})
	case len(rest) == 2 && rest[1] == "os-extra_specs":
		writeJSON(w, http.StatusOK, obj{"extra_specs": obj{}})
	default:
		c.notImplementedLocked(w, r)
	}
}

type bdm struct {
	BootIndex           *int   `json:"boot_index"`
	UUID                string `json:"uuid"`
	SourceType          string `json:"source_type"`
	DestinationType     string `json:"destination_type"`
	VolumeSize          int    `json:"volume_size"`
	DeleteOnTermination bool   `json:"delete_on_termination"`
}

type createReq struct {
	Server struct {
		Name           string            `json:"name"`
		FlavorRef      string            `json:"flavorRef"`
		ImageRef       string            `json:"imageRef"`
		UserData       string            `json:"user_data"`
		Metadata       map[string]string `json:"metadata"`
		Tags           []string          `json:"tags"`
		BlockDevices   []bdm             `json:"block_device_mapping_v2"`
		SecurityGroups []struct {
			Name string `json:"name"`
		} `json:"security_groups"`
		Networks any `json:"networks"`
	} `json:"server"`
}

// createServer is POST /servers: it validates, creates the server in BUILD
// with its ports and volumes, calls ServerActive outside the lock and
// answers 202 once the server is ACTIVE or ERROR.
func (c *Cloud) createServer(w http.ResponseWriter, r *http.Request) {
	var req createReq
	if err := decodeInto(r, &req); err != nil {
		novaError(w, http.StatusBadRequest, "Invalid input for server: %v", err)
		return
	}
	in := req.Server
	if in.Name == "" {
		novaError(w, http.StatusBadRequest, "Invalid input for field/attribute name: name is empty")
		return
	}
	userData, err := base64.StdEncoding.DecodeString(in.UserData)
	if err != nil {
		novaError(w, http.StatusBadRequest, "User data needs to be valid base 64.")
		return
	}
	if len(in.UserData) > 65535 {
		novaError(w, http.StatusBadRequest, "Invalid input for field/attribute user_data. Value: is too long")
		return
	}
	var after []func()
	s, status, err := c.buildServer(in.Name, in.FlavorRef, in.ImageRef, in.Metadata, in.Tags, in.BlockDevices, in.Networks, userData, &after)
	for _, f := range after {
		f()
	}
	if err != nil {
		novaError(w, status, "%v", err)
		return
	}
	c.mu.Lock()
	fail, fault := false, ""
	if c.failNext > 0 {
		c.failNext--
		fail, fault = true, c.failFault
	}
	view := c.view(s)
	c.mu.Unlock()
	if !fail && c.opts.Hooks.ServerActive != nil {
		if err := c.opts.Hooks.ServerActive(view); err != nil {
			fail, fault = true, err.Error()
		}
	}
	c.mu.Lock()
	if fail {
		s.status, s.fault = "ERROR", fault
	} else if s.status == "BUILD" {
		s.status = "ACTIVE"
		s.launched = time.Now()
	}
	groups := c.serverGroups(s)
	c.mu.Unlock()
	writeJSON(w, http.StatusAccepted, obj{"server": obj{
		"id": s.id, "links": c.links("servers", s.id), "OS-DCF:diskConfig": "MANUAL", "security_groups": groups,
	}})
}

func decodeInto(r *http.Request, v any) error {
	if err := json.NewDecoder(http.MaxBytesReader(nil, r.Body, 8<<20)).Decode(v); err != nil {
		return fmt.Errorf("malformed request body: %w", err)
	}
	return nil
}

// buildServer checks a create request and records the server in BUILD.
func (c *Cloud) buildServer(name, flavorRef, imageRef string, metadata map[string]string, tags []string, bdms []bdm, networks any, userData []byte, after *[]func()) (*server, int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.quota >= 0 && len(c.servers)+1 > c.quota {
		return nil, http.StatusForbidden, fmt.Errorf("Quota exceeded for instances: Requested 1, but already used %d of %d instances", len(c.servers), c.quota)
	}
	if _, ok := c.flavors[flavorRef]; !ok {
		return nil, http.StatusBadRequest, fmt.Errorf("Flavor %s could not be found.", flavorRef)
	}
	if imageRef != "" {
		if _, ok := c.images[imageRef]; !ok {
			return nil, http.StatusBadRequest, fmt.Errorf("Image %s could not be found.", imageRef)
		}
	}
	if imageRef == "" && len(bdms) == 0 {
		return nil, http.StatusBadRequest, fmt.Errorf("Missing imageRef attribute")
	}
	for _, b := range bdms {
		switch {
		case b.SourceType == "image" && b.DestinationType == "volume":
			if _, ok := c.images[b.UUID]; !ok {
				return nil, http.StatusBadRequest, fmt.Errorf("Image %s could not be found.", b.UUID)
			}
			if b.VolumeSize < 1 {
				return nil, http.StatusBadRequest, fmt.Errorf("Block Device Mapping is Invalid: volume_size must be positive")
			}
		case b.SourceType == "volume" && b.DestinationType == "volume":
			v, ok := c.volumes[b.UUID]
			if !ok {
				return nil, http.StatusBadRequest, fmt.Errorf("Block Device Mapping is Invalid: failed to get volume %s.", b.UUID)
			}
			if v["status"] != "available" {
				return nil, http.StatusBadRequest, fmt.Errorf("Block Device Mapping is Invalid: volume %s status must be 'available', not %v.", b.UUID, v["status"])
			}
		default:
			return nil, http.StatusBadRequest, fmt.Errorf("simcloud boots from image or volume block devices only, not %s to %s", b.SourceType, b.DestinationType)
		}
	}
	// networks: [{"port": id}] or [{"uuid": network}]; "auto"/"none" are not modelled.
	type netReq struct{ port, network string }
	var nets []netReq
	switch v := networks.(type) {
	case nil:
		nets = []netReq{{network: c.netID}}
	case []any:
		for _, e := range v {
			m, _ := e.(obj)
			port, _ := m["port"].(string)
			network, _ := m["uuid"].(string)
			if port == "" && network == "" {
				return nil, http.StatusBadRequest, fmt.Errorf("Invalid input for field/attribute networks: each needs a port or a uuid")
			}
			nets = append(nets, netReq{port, network})
		}
	default:
		return nil, http.StatusBadRequest, fmt.Errorf("simcloud does not model networks %v", v)
	}
	for _, n := range nets {
		if n.port != "" {
			p, ok := c.neutron["ports"][n.port]
			if !ok {
				return nil, http.StatusNotFound, fmt.Errorf("Port id %s could not be found.", n.port)
			}
			if scalar(p["device_id"]) != "" {
				return nil, http.StatusConflict, fmt.Errorf("Port %s is still in use.", n.port)
			}
		} else if n.network != c.netID {
			return nil, http.StatusBadRequest, fmt.Errorf("Network %s could not be found.", n.network)
		}
	}

	id := c.newID("server", name)
	now := time.Now()
	s := &server{id: id, name: name, status: "BUILD", flavorID: flavorRef, metadata: map[string]string{},
		tags: slices.Clone(tags), userData: userData, novaPorts: map[string]bool{}, deleteVolumes: map[string]bool{},
		created: now, launched: now}
	for k, v := range metadata {
		s.metadata[k] = v
	}
	if s.tags == nil {
		s.tags = []string{}
	}
	for _, n := range nets {
		portID := n.port
		if portID == "" {
			portID = c.newID("port", id+n.network)
			ip, err := c.fixed.take(portID)
			if err != nil {
				return nil, http.StatusConflict, fmt.Errorf("No valid host was found. %v", err)
			}
			c.neutron["ports"][portID] = c.newPort(portID, "", obj{}, nil, ip)
			s.novaPorts[portID] = true
		}
		p := c.neutron["ports"][portID]
		p["device_id"], p["device_owner"], p["binding:host_id"], p["binding:vif_type"] = id, "compute:nova", "simcloud", "ovs"
		s.ports = append(s.ports, portID)
	}
	for i, b := range bdms {
		volID := b.UUID
		if b.SourceType == "image" {
			volID = c.newID("volume", id+strconv.Itoa(i))
			c.volumes[volID] = c.newVolume(volID, "", b.VolumeSize, b.UUID)
		}
		s.volumes = append(s.volumes, volID)
		s.deleteVolumes[volID] = b.DeleteOnTermination
		c.attach(c.volumes[volID], id, i)
	}
	c.servers[id] = s
	// A port that already has a floating IP tells its hook the server now.
	for _, p := range s.ports {
		if fip := c.floatingOf(p); fip != "" {
			c.fipHook(c.neutron["ports"][p], fip, after)
		}
	}
	return s, 0, nil
}

// serverGroups are the names of the security groups of a server's ports.
func (c *Cloud) serverGroups(s *server) []any {
	var names []string
	for _, p := range s.ports {
		groups, _ := stringList(c.neutron["ports"][p]["security_groups"])
		for _, g := range groups {
			if sg, ok := c.neutron["security-groups"][g]; ok && !slices.Contains(names, sg["name"].(string)) {
				names = append(names, sg["name"].(string))
			}
		}
	}
	sort.Strings(names)
	out := []any{}
	for _, n := range names {
		out = append(out, obj{"name": n})
	}
	return out
}

// serverView is GET /servers/{id}'s server; c.mu is held.
func (c *Cloud) serverView(s *server, mv int) obj {
	addresses := obj{}
	for _, pid := range s.ports {
		p := c.neutron["ports"][pid]
		netName := scalar(c.neutron["networks"][scalar(p["network_id"])]["name"])
		list, _ := addresses[netName].([]any)
		addresses[netName] = append(list, obj{"addr": portIP(p), "version": 4, "OS-EXT-IPS:type": "fixed", "OS-EXT-IPS-MAC:mac_addr": p["mac_address"]})
	}
	vols := []any{}
	for _, v := range s.volumes {
		vols = append(vols, obj{"id": v, "delete_on_termination": s.deleteVolumes[v]})
	}
	metadata := obj{}
	for k, v := range s.metadata {
		metadata[k] = v
	}
	vm, power := map[string]string{"ACTIVE": "active", "BUILD": "building", "ERROR": "error", "SHUTOFF": "stopped",
		"VERIFY_RESIZE": "resized"}[s.status], 1
	if s.status != "ACTIVE" && s.status != "VERIFY_RESIZE" {
		power = 4
	}
	v := obj{
		"id": s.id, "name": s.name, "status": s.status, "tenant_id": c.projectID, "user_id": c.userID,
		"metadata": metadata, "hostId": "simcloud", "image": "", "flavor": obj{"id": s.flavorID, "links": c.links("flavors", s.flavorID)},
		"created": stamp(s.created), "updated": stamp(s.created), "addresses": addresses, "accessIPv4": "", "accessIPv6": "",
		"links": c.links("servers", s.id), "OS-DCF:diskConfig": "MANUAL", "progress": 0, "OS-EXT-AZ:availability_zone": "nova",
		"key_name": nil, "OS-SRV-USG:launched_at": stampNoZone(s.launched), "OS-SRV-USG:terminated_at": nil,
		"OS-EXT-STS:task_state": nil, "OS-EXT-STS:vm_state": vm, "OS-EXT-STS:power_state": power,
		"os-extended-volumes:volumes_attached": vols, "security_groups": c.serverGroups(s),
	}
	if s.status == "ERROR" {
		v["fault"] = obj{"code": 500, "created": stamp(s.created), "message": s.fault, "details": ""}
	}
	if mv >= 2009 {
		v["locked"] = false
	}
	if mv >= 2019 {
		v["description"] = nil
	}
	if mv >= 2026 {
		v["tags"] = anyList(s.tags)
	}
	return v
}

// serverAPI serves /servers/{id}[/...]; c.mu is held.
func (c *Cloud) serverAPI(w http.ResponseWriter, r *http.Request, s *server, rest []string, after *[]func()) {
	mv := microversion(r)
	switch {
	case len(rest) == 0 && r.Method == http.MethodGet:
		writeJSON(w, http.StatusOK, obj{"server": c.serverView(s, mv)})
	case len(rest) == 0 && r.Method == http.MethodPut:
		var req struct {
			Server struct {
				Name *string `json:"name"`
			} `json:"server"`
		}
		if err := decodeInto(r, &req); err != nil {
			novaError(w, http.StatusBadRequest, "Invalid input: %v", err)
			return
		}
		if req.Server.Name != nil {
			s.name = *req.Server.Name
		}
		writeJSON(w, http.StatusOK, obj{"server": c.serverView(s, mv)})
	case len(rest) == 0 && r.Method == http.MethodDelete:
		c.deleteServer(s, after)
		w.WriteHeader(http.StatusNoContent)
	case len(rest) == 1 && rest[0] == "action" && r.Method == http.MethodPost:
		body, err := decode(r)
		if err != nil {
			novaError(w, http.StatusBadRequest, "%v", err)
			return
		}
		switch {
		case has(body, "os-stop"):
			if s.status != "ACTIVE" {
				novaError(w, http.StatusConflict, "Cannot 'stop' instance %s while it is in vm_state %s", s.id, s.status)
				return
			}
			s.status = "SHUTOFF"
		case has(body, "os-start"):
			if s.status != "SHUTOFF" {
				novaError(w, http.StatusConflict, "Cannot 'start' instance %s while it is in vm_state %s", s.id, s.status)
				return
			}
			s.status = "ACTIVE"
		case has(body, "resize"):
			// done at once: the server waits in VERIFY_RESIZE for the
			// confirmation, as Nova's does
			req, _ := body["resize"].(obj)
			ref, _ := req["flavorRef"].(string)
			if _, ok := c.flavors[ref]; !ok {
				novaError(w, http.StatusBadRequest, "Invalid flavorRef provided.")
				return
			}
			if s.status != "ACTIVE" && s.status != "SHUTOFF" {
				novaError(w, http.StatusConflict, "Cannot 'resize' instance %s while it is in vm_state %s", s.id, s.status)
				return
			}
			if ref == s.flavorID {
				novaError(w, http.StatusBadRequest, "When resizing, instances must change flavor!")
				return
			}
			s.resizedFrom, s.flavorID, s.status = s.flavorID, ref, "VERIFY_RESIZE"
		case has(body, "confirmResize"), has(body, "revertResize"):
			revert := has(body, "revertResize")
			if s.status != "VERIFY_RESIZE" {
				op := map[bool]string{false: "confirmResize", true: "revertResize"}[revert]
				novaError(w, http.StatusConflict, "Cannot '%s' instance %s while it is in vm_state %s", op, s.id, s.status)
				return
			}
			if revert {
				s.flavorID = s.resizedFrom
			}
			s.resizedFrom, s.status = "", "ACTIVE"
		case has(body, "addSecurityGroup"), has(body, "removeSecurityGroup"):
		default:
			c.notImplementedLocked(w, r)
			return
		}
		w.WriteHeader(http.StatusAccepted)
	case len(rest) >= 1 && rest[0] == "tags":
		c.serverTags(w, r, s, rest[1:])
	case len(rest) >= 1 && rest[0] == "metadata":
		c.serverMetadata(w, r, s, rest[1:])
	case len(rest) == 1 && rest[0] == "os-volume_attachments" && r.Method == http.MethodGet:
		list := []any{}
		for i, v := range s.volumes {
			list = append(list, obj{"id": v, "volumeId": v, "serverId": s.id, "device": device(i)})
		}
		writeJSON(w, http.StatusOK, obj{"volumeAttachments": list})
	case len(rest) == 2 && rest[0] == "os-volume_attachments" && r.Method == http.MethodDelete:
		if !slices.Contains(s.volumes, rest[1]) {
			novaError(w, http.StatusNotFound, "volume_id not found: %s", rest[1])
			return
		}
		s.volumes = slices.DeleteFunc(s.volumes, func(v string) bool { return v == rest[1] })
		if v := c.volumes[rest[1]]; v != nil {
			detach(v)
		}
		w.WriteHeader(http.StatusAccepted)
	case len(rest) == 1 && rest[0] == "os-interface" && r.Method == http.MethodGet:
		list := []any{}
		for _, pid := range s.ports {
			p := c.neutron["ports"][pid]
			list = append(list, obj{"port_id": pid, "net_id": p["network_id"], "mac_addr": p["mac_address"], "port_state": p["status"], "fixed_ips": p["fixed_ips"]})
		}
		writeJSON(w, http.StatusOK, obj{"interfaceAttachments": list})
	default:
		c.notImplementedLocked(w, r)
	}
}

func has(m obj, key string) bool { _, ok := m[key]; return ok }

func device(i int) string { return "/dev/vd" + string(rune('a'+i%26)) }

// deleteServer removes a server at once (the next GET is a 404), deletes
// the ports Nova created, frees the ports the user created (their floating
// IPs stay, as in Neutron) and deletes or detaches its volumes; c.mu is held.
func (c *Cloud) deleteServer(s *server, after *[]func()) {
	gone := c.view(s)
	for _, pid := range slices.Clone(s.ports) {
		if s.novaPorts[pid] {
			c.deletePort(pid, after)
			continue
		}
		if p := c.neutron["ports"][pid]; p != nil {
			p["device_id"], p["device_owner"], p["binding:host_id"], p["binding:vif_type"] = "", "", "", "unbound"
		}
	}
	for _, vid := range s.volumes {
		if c.volumes[vid] == nil {
			continue
		}
		if s.deleteVolumes[vid] {
			delete(c.volumes, vid)
		} else {
			detach(c.volumes[vid])
		}
	}
	delete(c.servers, s.id)
	gone.Status = "DELETED"
	if hook := c.opts.Hooks.ServerDeleted; hook != nil {
		*after = append(*after, func() { hook(gone) })
	}
}

// serverTags serves /servers/{id}/tags[/<tag>]; c.mu is held.
func (c *Cloud) serverTags(w http.ResponseWriter, r *http.Request, s *server, rest []string) {
	switch {
	case len(rest) == 0 && r.Method == http.MethodGet:
	case len(rest) == 0 && r.Method == http.MethodPut:
		var req struct {
			Tags []string `json:"tags"`
		}
		if err := decodeInto(r, &req); err != nil {
			novaError(w, http.StatusBadRequest, "Invalid input: %v", err)
			return
		}
		s.tags = append([]string{}, req.Tags...)
	case len(rest) == 0 && r.Method == http.MethodDelete:
		s.tags = []string{}
		w.WriteHeader(http.StatusNoContent)
		return
	case len(rest) == 1 && r.Method == http.MethodPut:
		if !slices.Contains(s.tags, rest[0]) {
			s.tags = append(s.tags, rest[0])
		}
		w.WriteHeader(http.StatusCreated)
		return
	case len(rest) == 1 && r.Method == http.MethodDelete:
		s.tags = slices.DeleteFunc(s.tags, func(t string) bool { return t == rest[0] })
		w.WriteHeader(http.StatusNoContent)
		return
	case len(rest) == 1 && r.Method == http.MethodGet:
		if !slices.Contains(s.tags, rest[0]) {
			novaError(w, http.StatusNotFound, "Tag %s could not be found.", rest[0])
			return
		}
		w.WriteHeader(http.StatusNoContent)
		return
	default:
		c.notImplementedLocked(w, r)
		return
	}
	writeJSON(w, http.StatusOK, obj{"tags": anyList(s.tags)})
}

// serverMetadata serves /servers/{id}/metadata[/<key>]; c.mu is held.
func (c *Cloud) serverMetadata(w http.ResponseWriter, r *http.Request, s *server, rest []string) {
	switch {
	case len(rest) == 0 && (r.Method == http.MethodPost || r.Method == http.MethodPut):
		var req struct {
			Metadata map[string]string `json:"metadata"`
		}
		if err := decodeInto(r, &req); err != nil {
			novaError(w, http.StatusBadRequest, "Invalid input: %v", err)
			return
		}
		if r.Method == http.MethodPut {
			s.metadata = map[string]string{}
		}
		for k, v := range req.Metadata {
			s.metadata[k] = v
		}
	case len(rest) == 0 && r.Method == http.MethodGet:
	case len(rest) == 1 && r.Method == http.MethodDelete:
		if _, ok := s.metadata[rest[0]]; !ok {
			novaError(w, http.StatusNotFound, "Metadata item was not found")
			return
		}
		delete(s.metadata, rest[0])
		w.WriteHeader(http.StatusNoContent)
		return
	default:
		c.notImplementedLocked(w, r)
		return
	}
	md := obj{}
	for k, v := range s.metadata {
		md[k] = v
	}
	writeJSON(w, http.StatusOK, obj{"metadata": md})
}
