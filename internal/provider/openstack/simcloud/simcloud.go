// Package simcloud is a stand-in OpenStack API for tests and the demo: just
// enough Keystone v3, Nova, Neutron, Cinder v3 and Glance v2 for the real
// terraform-provider-openstack v3.4.0 to apply and destroy what the
// openstack renderer produces. It listens on 127.0.0.1 (a random port),
// hands out fixed and floating IPs from loopback ranges only, and uses the
// standard library only.
//
// Every object reaches its final state at once (a server is ACTIVE on its
// first GET, a deleted object is gone at once), so the provider's wait loops
// never sleep. Hooks tell the caller when a server becomes active, when a
// floating IP is (dis)associated and when a server is deleted, so that a
// simulated Talos node can be booted from the server's user_data.
// DeleteServerOutside and ChangeServerOutside do what someone in the cloud
// console would, behind tofu's back (drift).
//
// It is not a cloud: no quotas but the instance quota, no pagination, no
// routers, and only password authentication with a project scope. Requests
// it does not implement get a 501 and are listed by Unhandled.
package simcloud

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"
)

// Options configures a stand-in cloud. Empty fields take the defaults in
// parentheses.
type Options struct {
	// Username, Password and Project are what Keystone accepts (admin,
	// secret, demo); the user and project are in the domain "Default".
	Username, Password, Project string
	// Region is the region of every catalog endpoint (RegionOne).
	Region string
	// Network is the pre-created private network (private) and Image the
	// pre-created Talos image (talos).
	Network, Image string
	// Flavors are pre-created (m1.small, m1.medium, m1.large).
	Flavors []string
	// FixedCIDR is the private network's subnet (127.77.0.0/24) and
	// FloatingCIDR the floating pool's (127.78.0.0/24); both must be inside
	// 127.0.0.0/8 and must not overlap.
	FixedCIDR, FloatingCIDR string
	// FloatingPool is the external network floating IPs come from (public).
	FloatingPool string
	// Hooks are called outside the cloud's lock; nil hooks are skipped.
	Hooks Hooks
	// Logf, when set, receives one line per request (method, path, status;
	// never a body, so no user_data or password).
	Logf func(format string, args ...any)
}

// Hooks let the caller act on what happens to servers.
type Hooks struct {
	// ServerActive is called (outside locks, before the server is reported
	// ACTIVE) with the server's name, id, fixed IP, metadata and decoded
	// user_data. Returning an error puts the server into ERROR with that
	// error text as its fault.
	ServerActive func(s Server) error
	// FloatingIPAssociated is called when a floating IP is associated with a
	// port (of a server, if it has one) and with "" when disassociated. For a
	// port without a server, s holds only FixedIP and FloatingIP; it is
	// called again, with the server, when a server is created on a port that
	// already has a floating IP (before ServerActive).
	FloatingIPAssociated func(s Server, floatingIP string)
	// ServerDeleted is called after a server is deleted.
	ServerDeleted func(s Server)
	// Request, when set, is called with every authenticated request's
	// method, path and token (each tofu process gets a token of its own)
	// before it is handled; false refuses it with 503, handling nothing.
	Request func(method, path, token string) bool
}

// Server is a copy of a Nova server as the hooks and Servers see it.
type Server struct {
	ID, Name, FixedIP, FloatingIP string
	Flavor                        string // the flavor's name
	Metadata                      map[string]string
	Tags                          []string
	UserData                      []byte
	Status                        string
}

// Inventory counts what tofu created (pre-created networks, subnets, images
// and flavors are not counted).
type Inventory struct {
	Servers, Volumes, Ports, FloatingIPs, SecurityGroups int
}

// obj is a Neutron, Cinder or Glance object as it goes on the wire.
type obj = map[string]any

// server is a Nova server; the wire form is built on every read.
type server struct {
	id, name, status, fault string
	flavorID                string
	resizedFrom             string // the flavor before a resize, until it is confirmed
	metadata                map[string]string
	tags                    []string
	userData                []byte
	ports                   []string        // in boot order
	novaPorts               map[string]bool // ports Nova created (deleted with the server)
	volumes                 []string
	deleteVolumes           map[string]bool // delete_on_termination
	created, launched       time.Time
}

// Cloud is a running stand-in OpenStack API.
type Cloud struct {
	opts Options
	addr string // host:port it listens on
	srv  *http.Server

	mu        sync.Mutex
	ln        net.Listener
	down      bool
	closed    bool
	tokens    map[string]bool
	projectID string
	userID    string
	seen      map[string]int // kind+key -> occurrences, for deterministic ids
	quota     int            // instances; < 0 means none
	failNext  int
	failFault string
	unhandled []string

	servers  map[string]*server
	volumes  map[string]obj
	neutron  map[string]map[string]obj // collection -> id -> object
	images   map[string]obj
	flavors  map[string]obj
	fixed    *ipPool
	floating *ipPool
	netID    string // the private network
	poolID   string // the floating pool's network
	subnetID string
	fipSubID string
}

// Neutron collections the stand-in serves, by URL name.
var neutronKinds = map[string]string{
	"networks": "network", "subnets": "subnet", "ports": "port",
	"security-groups": "security_group", "security-group-rules": "security_group_rule",
	"floatingips": "floatingip",
}

// Start starts a stand-in cloud on 127.0.0.1 with a random port.
func Start(opts Options) (*Cloud, error) {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&opts.Username, "admin")
	def(&opts.Password, "secret")
	def(&opts.Project, "demo")
	def(&opts.Region, "RegionOne")
	def(&opts.Network, "private")
	def(&opts.Image, "talos")
	def(&opts.FixedCIDR, "127.77.0.0/24")
	def(&opts.FloatingCIDR, "127.78.0.0/24")
	def(&opts.FloatingPool, "public")
	if len(opts.Flavors) == 0 {
		opts.Flavors = []string{"m1.small", "m1.medium", "m1.large"}
	}
	fixed, err := newIPPool("FixedCIDR", opts.FixedCIDR)
	if err != nil {
		return nil, err
	}
	floating, err := newIPPool("FloatingCIDR", opts.FloatingCIDR)
	if err != nil {
		return nil, err
	}
	if fixed.prefix.Overlaps(floating.prefix) {
		return nil, fmt.Errorf("simcloud: FixedCIDR %s and FloatingCIDR %s overlap", opts.FixedCIDR, opts.FloatingCIDR)
	}
	if opts.Network == opts.FloatingPool {
		return nil, fmt.Errorf("simcloud: Network and FloatingPool are both %q", opts.Network)
	}
	c := &Cloud{
		opts: opts, tokens: map[string]bool{}, seen: map[string]int{}, quota: -1,
		servers: map[string]*server{}, volumes: map[string]obj{}, images: map[string]obj{}, flavors: map[string]obj{},
		neutron: map[string]map[string]obj{}, fixed: fixed, floating: floating,
	}
	for coll := range neutronKinds {
		c.neutron[coll] = map[string]obj{}
	}
	c.seed()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("simcloud: listen: %w", err)
	}
	c.ln = ln
	c.addr = ln.Addr().String()
	c.srv = &http.Server{Handler: c, ReadHeaderTimeout: 10 * time.Second}
	go c.serve(ln)
	return c, nil
}

func (c *Cloud) serve(ln net.Listener) { _ = c.srv.Serve(ln) }

// Close stops the cloud and closes every connection.
func (c *Cloud) Close() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	_ = c.srv.Close()
}

// AuthURL is the Keystone URL for OS_AUTH_URL: http://127.0.0.1:port/v3.
func (c *Cloud) AuthURL() string { return "http://" + c.addr + "/v3" }

// Options returns the options the cloud runs with, defaults filled in.
func (c *Cloud) Options() Options { return c.opts }

// SetInstanceQuota limits the number of servers (ERROR ones count, as in
// Nova); a negative n removes the limit. Creating a server beyond it is
// refused with Nova's 403 "Quota exceeded for instances".
func (c *Cloud) SetInstanceQuota(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.quota = n
}

// FailNextServers makes the next n created servers go to ERROR with fault as
// their fault message (e.g. "No valid host was found. There are not enough
// hosts available."), without calling ServerActive.
func (c *Cloud) FailNextServers(n int, fault string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failNext, c.failFault = n, fault
}

// SetDown takes the API down (new connections are refused, requests on open
// connections get a 503) or brings it back on the same address.
func (c *Cloud) SetDown(down bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errors.New("simcloud: closed")
	}
	if down == c.down {
		return nil
	}
	if down {
		c.down = true
		return c.ln.Close()
	}
	ln, err := net.Listen("tcp", c.addr)
	if err != nil {
		return fmt.Errorf("simcloud: listen again on %s: %w", c.addr, err)
	}
	c.ln, c.down = ln, false
	go c.serve(ln)
	return nil
}

// DeleteServerOutside deletes the server named name and its ports as
// someone in the cloud console would, behind tofu's back: the server, its
// volumes that go with it and every port it has (also the ones tofu
// created; their floating IPs stay, disassociated) are gone at once, so
// that the next refresh meets a 404. ServerDeleted (and
// FloatingIPAssociated with "") are called as for a delete through the API.
func (c *Cloud) DeleteServerOutside(name string) error {
	var after []func()
	defer func() {
		for _, f := range after {
			f()
		}
	}()
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.serverNamed(name)
	if s == nil {
		return fmt.Errorf("simcloud: no server %q", name)
	}
	ports := slices.Clone(s.ports)
	c.deleteServer(s, &after)
	for _, p := range ports {
		c.deletePort(p, &after)
	}
	return nil
}

// ServerChange is a change made to a server outside tofu (ChangeServerOutside).
type ServerChange struct {
	// Metadata sets these keys; an empty value deletes the key.
	Metadata map[string]string
	// Flavor, when set, is the flavor (by name) the server is resized to.
	Flavor string
}

// ChangeServerOutside changes the server named name as someone in the
// cloud console would, behind tofu's back, so that the next refresh sees
// the change (a refresh-only plan reports it as drift). The provider
// (v3.4.0) reads a server's metadata back into all_metadata only: a
// metadata change is drift of the refresh but no change a plan makes; a
// flavor change is both (the next apply resizes the server back).
func (c *Cloud) ChangeServerOutside(name string, ch ServerChange) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.serverNamed(name)
	if s == nil {
		return fmt.Errorf("simcloud: no server %q", name)
	}
	if ch.Flavor != "" {
		id := ""
		for fid, f := range c.flavors {
			if f["name"] == ch.Flavor {
				id = fid
			}
		}
		if id == "" {
			return fmt.Errorf("simcloud: no flavor %q", ch.Flavor)
		}
		s.flavorID = id
	}
	for k, v := range ch.Metadata {
		if v == "" {
			delete(s.metadata, k)
		} else {
			s.metadata[k] = v
		}
	}
	return nil
}

// serverNamed is the server named name, nil when there is none; c.mu is held.
func (c *Cloud) serverNamed(name string) *server {
	for _, s := range c.servers {
		if s.name == name {
			return s
		}
	}
	return nil
}

// Unhandled lists the requests ("METHOD /path") the stand-in answered with
// 501 because it does not implement them; tests assert it is empty.
func (c *Cloud) Unhandled() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.unhandled)
}

// ClearUnhandled forgets the requests Unhandled lists.
func (c *Cloud) ClearUnhandled() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.unhandled = nil
}

// Inventory counts the objects tofu created.
func (c *Cloud) Inventory() Inventory {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Inventory{
		Servers: len(c.servers), Volumes: len(c.volumes), Ports: len(c.neutron["ports"]),
		FloatingIPs: len(c.neutron["floatingips"]), SecurityGroups: len(c.neutron["security-groups"]),
	}
}

// Servers returns the servers, sorted by name.
func (c *Cloud) Servers() []Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]Server, 0, len(c.servers))
	for _, s := range c.servers {
		out = append(out, c.view(s))
	}
	slices.SortFunc(out, func(a, b Server) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// view copies s for the hooks; c.mu is held.
func (c *Cloud) view(s *server) Server {
	v := Server{ID: s.id, Name: s.name, Status: s.status, Metadata: map[string]string{}, Tags: slices.Clone(s.tags), UserData: slices.Clone(s.userData)}
	if f := c.flavors[s.flavorID]; f != nil {
		v.Flavor, _ = f["name"].(string)
	}
	for k, val := range s.metadata {
		v.Metadata[k] = val
	}
	if len(s.ports) > 0 {
		v.FixedIP = portIP(c.neutron["ports"][s.ports[0]])
		v.FloatingIP = c.floatingOf(s.ports[0])
	}
	return v
}

// floatingOf is the floating IP associated with a port, or "".
func (c *Cloud) floatingOf(portID string) string {
	for _, f := range c.neutron["floatingips"] {
		if f["port_id"] == portID {
			return f["floating_ip_address"].(string)
		}
	}
	return ""
}

// seed creates the pre-created objects; they do not count in Inventory.
func (c *Cloud) seed() {
	c.projectID = c.newID("project", c.opts.Project)
	c.userID = c.newID("user", c.opts.Username)
	mkNet := func(name string, external bool, pool *ipPool) (string, string) {
		id := c.newID("network", name)
		sub := c.newID("subnet", name)
		now := stamp(time.Now())
		c.neutron["networks"][id] = obj{
			"id": id, "name": name, "status": "ACTIVE", "admin_state_up": true, "shared": external,
			"router:external": external, "subnets": []any{sub}, "mtu": 1500, "project_id": c.projectID,
			"tenant_id": c.projectID, "tags": []any{}, "description": "", "availability_zones": []any{"nova"},
			"availability_zone_hints": []any{}, "port_security_enabled": true, "ipv4_address_scope": nil,
			"ipv6_address_scope": nil, "is_default": external, "revision_number": 1, "created_at": now, "updated_at": now,
			"provider:network_type": "vxlan", "provider:physical_network": nil, "provider:segmentation_id": 1,
		}
		c.neutron["subnets"][sub] = obj{
			"id": sub, "name": name + "-subnet", "network_id": id, "cidr": pool.prefix.String(), "ip_version": 4,
			"gateway_ip": pool.gateway.String(), "enable_dhcp": true, "project_id": c.projectID, "tenant_id": c.projectID,
			"allocation_pools": []any{obj{"start": pool.first.String(), "end": pool.last.String()}},
			"dns_nameservers":  []any{}, "host_routes": []any{}, "tags": []any{}, "description": "",
			"ipv6_address_mode": nil, "ipv6_ra_mode": nil, "subnetpool_id": nil, "service_types": []any{},
			"revision_number": 1, "created_at": now, "updated_at": now,
		}
		return id, sub
	}
	c.netID, c.subnetID = mkNet(c.opts.Network, false, c.fixed)
	c.poolID, c.fipSubID = mkNet(c.opts.FloatingPool, true, c.floating)
	imgID := c.newID("image", c.opts.Image)
	now := stamp(time.Now())
	c.images[imgID] = obj{
		"id": imgID, "name": c.opts.Image, "status": "active", "visibility": "public", "container_format": "bare",
		"disk_format": "raw", "size": 1 << 30, "virtual_size": 1 << 30, "min_disk": 0, "min_ram": 0,
		"checksum": hex.EncodeToString(sha256.New().Sum(nil))[:32], "os_hash_algo": "sha512", "os_hash_value": "",
		"owner": c.projectID, "tags": []any{}, "protected": false, "os_hidden": false, "created_at": now, "updated_at": now,
		"file": "/v2/images/" + imgID + "/file", "self": "/v2/images/" + imgID, "schema": "/v2/schemas/image",
	}
	for i, name := range c.opts.Flavors {
		id := c.newID("flavor", name)
		c.flavors[id] = obj{
			"id": id, "name": name, "vcpus": 1 << min(i, 4), "ram": 2048 << min(i, 4), "disk": 20, "swap": "",
			"OS-FLV-EXT-DATA:ephemeral": 0, "OS-FLV-DISABLED:disabled": false, "os-flavor-access:is_public": true,
			"rxtx_factor": 1.0, "description": nil, "extra_specs": obj{},
		}
	}
}

// newID derives a UUID from the kind of object, a key (its name, or its
// request) and how often that pair came before, so that runs that create
// the same objects in another order get the same ids.
func (c *Cloud) newID(kind, key string) string {
	k := kind + "\x00" + key
	n := c.seen[k]
	c.seen[k] = n + 1
	sum := sha256.Sum256([]byte(fmt.Sprintf("%s\x00%d", k, n)))
	sum[6] = sum[6]&0x0f | 0x40
	sum[8] = sum[8]&0x3f | 0x80
	h := hex.EncodeToString(sum[:16])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// ipPool hands out addresses of a loopback prefix.
type ipPool struct {
	prefix               netip.Prefix
	gateway, first, last netip.Addr
	used                 map[netip.Addr]bool
	size                 int
}

var loopback = netip.MustParsePrefix("127.0.0.0/8")

func newIPPool(field, cidr string) (*ipPool, error) {
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		return nil, fmt.Errorf("simcloud: %s %q: %w", field, cidr, err)
	}
	p = p.Masked()
	if !p.Addr().Is4() || !loopback.Contains(p.Addr()) || p.Bits() < 8 || p.Bits() > 28 {
		return nil, fmt.Errorf("simcloud: %s %q must be an IPv4 prefix of /8 to /28 inside 127.0.0.0/8", field, cidr)
	}
	gw := p.Addr().Next()
	first := gw.Next()
	size := 1<<(32-p.Bits()) - 3 // network, gateway, broadcast
	last := first
	for i := 1; i < size; i++ {
		last = last.Next()
	}
	return &ipPool{prefix: p, gateway: gw, first: first, last: last, used: map[netip.Addr]bool{}, size: size}, nil
}

// take allocates an address derived from id, probing upwards on collisions.
func (p *ipPool) take(id string) (string, error) {
	sum := sha256.Sum256([]byte(id))
	start := int(uint32(sum[0])<<24|uint32(sum[1])<<16|uint32(sum[2])<<8|uint32(sum[3])) % p.size
	for i := 0; i < p.size; i++ {
		a := p.first
		for j := 0; j < (start+i)%p.size; j++ {
			a = a.Next()
		}
		if !p.used[a] {
			p.used[a] = true
			return a.String(), nil
		}
	}
	return "", fmt.Errorf("no free address left in %s", p.prefix)
}

func (p *ipPool) release(ip string) {
	if a, err := netip.ParseAddr(ip); err == nil {
		delete(p.used, a)
	}
}

func mac(id string) string {
	sum := sha256.Sum256([]byte("mac" + id))
	return fmt.Sprintf("fa:16:3e:%02x:%02x:%02x", sum[0], sum[1], sum[2])
}

// stamp is the RFC 3339 UTC form Nova (created, updated), Neutron and Glance use.
func stamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05Z") }

// stampNoZone is the form Cinder and Nova's launched_at use: gophercloud
// rejects a zone there.
func stampNoZone(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000000") }

func randomToken() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return "gAAAA" + hex.EncodeToString(b)
}

// ServeHTTP routes a request to its service. The answer is buffered and
// sent once the handler and the hooks it queued are done, so that a client
// never sees an answer before the hooks have run.
func (c *Cloud) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec := &bufferedWriter{header: http.Header{}, status: http.StatusOK}
	c.route(rec, r)
	for k, v := range rec.header {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.status)
	_, _ = w.Write(rec.body.Bytes())
	if c.opts.Logf != nil {
		c.opts.Logf("simcloud: %s %s -> %d", r.Method, r.URL.RequestURI(), rec.status)
	}
}

func (c *Cloud) route(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	down := c.down
	c.mu.Unlock()
	if down {
		w.Header().Set("Connection", "close")
		http.Error(w, "503 Service Unavailable", http.StatusServiceUnavailable)
		return
	}
	path := strings.TrimSuffix(r.URL.Path, "/")
	if path == "/v3/auth/tokens" && r.Method == http.MethodPost {
		c.authenticate(w, r)
		return
	}
	c.mu.Lock()
	ok := c.tokens[r.Header.Get("X-Auth-Token")]
	c.mu.Unlock()
	if !ok {
		writeJSON(w, http.StatusUnauthorized, obj{"error": obj{"code": 401, "title": "Unauthorized", "message": "The request you have made requires authentication."}})
		return
	}
	if h := c.opts.Hooks.Request; h != nil && !h(r.Method, path, r.Header.Get("X-Auth-Token")) {
		http.Error(w, "503 Service Unavailable", http.StatusServiceUnavailable)
		return
	}
	seg := strings.Split(strings.TrimPrefix(path, "/"), "/")
	switch {
	case len(seg) >= 2 && seg[0] == "compute" && seg[1] == "v2.1":
		c.nova(w, r, seg[2:])
	case len(seg) >= 2 && seg[0] == "network" && seg[1] == "v2.0":
		c.neutronAPI(w, r, seg[2:])
	case len(seg) >= 3 && seg[0] == "volume" && seg[1] == "v3" && seg[2] == c.projectID:
		c.cinder(w, r, seg[3:])
	case len(seg) >= 2 && seg[0] == "image" && seg[1] == "v2":
		c.glance(w, r, seg[2:])
	default:
		c.notImplemented(w, r)
	}
}

// bufferedWriter holds an answer until ServeHTTP sends it.
type bufferedWriter struct {
	header      http.Header
	status      int
	wroteHeader bool
	body        bytes.Buffer
}

func (b *bufferedWriter) Header() http.Header { return b.header }

func (b *bufferedWriter) WriteHeader(code int) {
	if !b.wroteHeader {
		b.status, b.wroteHeader = code, true
	}
}

func (b *bufferedWriter) Write(p []byte) (int, error) {
	b.wroteHeader = true
	return b.body.Write(p)
}

func (c *Cloud) notImplemented(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	c.unhandled = append(c.unhandled, r.Method+" "+r.URL.Path)
	c.mu.Unlock()
	writeJSON(w, http.StatusNotImplemented, obj{"error": obj{"code": 501, "message": "simcloud does not implement " + r.Method + " " + r.URL.Path}})
}

func writeJSON(w http.ResponseWriter, status int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

// decode reads a JSON request body into a map.
func decode(r *http.Request) (obj, error) {
	var m obj
	if err := json.NewDecoder(http.MaxBytesReader(nil, r.Body, 8<<20)).Decode(&m); err != nil {
		return nil, fmt.Errorf("malformed request body: %w", err)
	}
	return m, nil
}

// canon is a stable text of a request, for ids of unnamed objects.
func canon(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// authenticate is Keystone's POST /v3/auth/tokens with a password.
func (c *Cloud) authenticate(w http.ResponseWriter, r *http.Request) {
	unauthorized := func() {
		writeJSON(w, http.StatusUnauthorized, obj{"error": obj{"code": 401, "title": "Unauthorized", "message": "The request you have made requires authentication."}})
	}
	var req struct {
		Auth struct {
			Identity struct {
				Methods  []string `json:"methods"`
				Password struct {
					User struct {
						ID, Name, Password string
					} `json:"user"`
				} `json:"password"`
			} `json:"identity"`
			Scope struct {
				Project struct {
					ID, Name string
				} `json:"project"`
			} `json:"scope"`
		} `json:"auth"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(nil, r.Body, 1<<20)).Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, obj{"error": obj{"code": 400, "title": "Bad Request", "message": "malformed request body"}})
		return
	}
	u, p := req.Auth.Identity.Password.User, req.Auth.Scope.Project
	if !slices.Contains(req.Auth.Identity.Methods, "password") ||
		(u.Name != c.opts.Username && u.ID != c.userID) || u.Password != c.opts.Password {
		unauthorized()
		return
	}
	if p.Name != c.opts.Project && p.ID != c.projectID {
		unauthorized()
		return
	}
	token := randomToken()
	c.mu.Lock()
	c.tokens[token] = true
	c.mu.Unlock()
	base := "http://" + c.addr
	endpoint := func(kind, name, url string) obj {
		return obj{"type": kind, "name": name, "id": kind, "endpoints": []any{obj{
			"id": kind + "-public", "interface": "public", "region": c.opts.Region, "region_id": c.opts.Region, "url": url,
		}}}
	}
	now := time.Now().UTC()
	domain := obj{"id": "default", "name": "Default"}
	w.Header().Set("X-Subject-Token", token)
	writeJSON(w, http.StatusCreated, obj{"token": obj{
		"methods":    []any{"password"},
		"expires_at": now.Add(12 * time.Hour).Format("2006-01-02T15:04:05.000000Z"),
		"issued_at":  now.Format("2006-01-02T15:04:05.000000Z"),
		"user":       obj{"id": c.userID, "name": c.opts.Username, "domain": domain, "password_expires_at": nil},
		"project":    obj{"id": c.projectID, "name": c.opts.Project, "domain": domain},
		"roles":      []any{obj{"id": "member", "name": "member"}},
		"is_domain":  false,
		"catalog": []any{
			endpoint("identity", "keystone", base+"/v3"),
			endpoint("compute", "nova", base+"/compute/v2.1"),
			endpoint("network", "neutron", base+"/network"),
			endpoint("volumev3", "cinderv3", base+"/volume/v3/"+c.projectID),
			endpoint("image", "glance", base+"/image"),
		},
	}})
}
