package simcloud_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"syscall"
	"testing"

	"github.com/rezuscloud/rezuscloud/internal/provider/openstack/simcloud"
)

// api is a minimal OpenStack client for the fast tests.
type api struct {
	t     *testing.T
	base  string // http://127.0.0.1:port
	token string
}

func (a *api) do(method, path string, body any) (int, map[string]any) {
	a.t.Helper()
	var rd bytes.Buffer
	if body != nil {
		if err := json.NewEncoder(&rd).Encode(body); err != nil {
			a.t.Fatal(err)
		}
	}
	req, err := http.NewRequest(method, a.base+path, &rd)
	if err != nil {
		a.t.Fatal(err)
	}
	if a.token != "" {
		req.Header.Set("X-Auth-Token", a.token)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	if resp.StatusCode == http.StatusCreated && path == "/v3/auth/tokens" {
		a.token = resp.Header.Get("X-Subject-Token")
	}
	return resp.StatusCode, out
}

func authBody(user, pass, project string) map[string]any {
	return map[string]any{"auth": map[string]any{
		"identity": map[string]any{"methods": []string{"password"}, "password": map[string]any{
			"user": map[string]any{"name": user, "password": pass, "domain": map[string]any{"name": "Default"}}}},
		"scope": map[string]any{"project": map[string]any{"name": project, "domain": map[string]any{"name": "Default"}}},
	}}
}

func newAPI(t *testing.T, c *simcloud.Cloud) *api {
	t.Helper()
	a := &api{t: t, base: strings.TrimSuffix(c.AuthURL(), "/v3")}
	if code, _ := a.do("POST", "/v3/auth/tokens", authBody("admin", password, "demo")); code != http.StatusCreated || a.token == "" {
		t.Fatalf("auth: %d, token %q", code, a.token)
	}
	return a
}

func TestStartRejectsBadOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts simcloud.Options
		want string
	}{
		{"fixed outside loopback", simcloud.Options{FixedCIDR: "10.0.0.0/24"}, `FixedCIDR "10.0.0.0/24" must be`},
		{"floating outside loopback", simcloud.Options{FloatingCIDR: "203.0.113.0/24"}, `FloatingCIDR "203.0.113.0/24" must be`},
		{"not a prefix", simcloud.Options{FixedCIDR: "127.77.0.1"}, `FixedCIDR "127.77.0.1"`},
		{"ipv6", simcloud.Options{FloatingCIDR: "::1/128"}, `FloatingCIDR "::1/128" must be`},
		{"overlap", simcloud.Options{FixedCIDR: "127.77.0.0/16", FloatingCIDR: "127.77.1.0/24"}, "overlap"},
		{"same network", simcloud.Options{Network: "public"}, `both "public"`},
	} {
		c, err := simcloud.Start(tc.opts)
		if err == nil {
			c.Close()
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}

func TestAuth(t *testing.T) {
	c := start(t, simcloud.Hooks{})
	for _, tc := range []struct {
		name, user, pass, project string
		want                      int
	}{
		{"right", "admin", password, "demo", http.StatusCreated},
		{"wrong password", "admin", "nope", "demo", http.StatusUnauthorized},
		{"wrong user", "root", password, "demo", http.StatusUnauthorized},
		{"wrong project", "admin", password, "other", http.StatusUnauthorized},
	} {
		a := &api{t: t, base: strings.TrimSuffix(c.AuthURL(), "/v3")}
		code, body := a.do("POST", "/v3/auth/tokens", authBody(tc.user, tc.pass, tc.project))
		if code != tc.want {
			t.Errorf("%s: status %d, want %d", tc.name, code, tc.want)
		}
		if code != http.StatusCreated {
			if raw, _ := json.Marshal(body); bytes.Contains(raw, []byte(tc.pass)) {
				t.Errorf("%s: the answer echoes the password", tc.name)
			}
			continue
		}
		catalog := body["token"].(map[string]any)["catalog"].([]any)
		types := map[string]string{}
		for _, e := range catalog {
			e := e.(map[string]any)
			ep := e["endpoints"].([]any)[0].(map[string]any)
			types[e["type"].(string)] = ep["url"].(string)
			if ep["region"] != "RegionOne" || ep["interface"] != "public" {
				t.Errorf("endpoint %v", ep)
			}
		}
		for kind, suffix := range map[string]string{"compute": "/compute/v2.1", "network": "/network", "image": "/image", "identity": "/v3"} {
			if types[kind] != a.base+suffix {
				t.Errorf("catalog %s = %q, want %q", kind, types[kind], a.base+suffix)
			}
		}
		if !strings.HasPrefix(types["volumev3"], a.base+"/volume/v3/") {
			t.Errorf("catalog volumev3 = %q", types["volumev3"])
		}
	}
	anon := &api{t: t, base: strings.TrimSuffix(c.AuthURL(), "/v3")}
	if code, _ := anon.do("GET", "/compute/v2.1/flavors/detail", nil); code != http.StatusUnauthorized {
		t.Errorf("a request without a token: %d, want 401", code)
	}
}

// network looks the pre-created network of that name up.
func (a *api) network(name string) string {
	a.t.Helper()
	code, body := a.do("GET", "/network/v2.0/networks?name="+name, nil)
	list := body["networks"].([]any)
	if code != http.StatusOK || len(list) != 1 {
		a.t.Fatalf("networks?name=%s: %d %v", name, code, body)
	}
	return list[0].(map[string]any)["id"].(string)
}

func (a *api) create(path, kind string, req map[string]any) map[string]any {
	a.t.Helper()
	code, body := a.do("POST", path, map[string]any{kind: req})
	if code != http.StatusCreated && code != http.StatusAccepted {
		a.t.Fatalf("POST %s: %d %v", path, code, body)
	}
	return body[kind].(map[string]any)
}

func TestNeutronAndNova(t *testing.T) {
	var deleted []string
	c := start(t, simcloud.Hooks{ServerDeleted: func(s simcloud.Server) { deleted = append(deleted, s.Name) }})
	a := newAPI(t, c)
	netID := a.network("private")
	sg := a.create("/network/v2.0/security-groups", "security_group", map[string]any{"name": "sg"})
	if rules := sg["security_group_rules"].([]any); len(rules) != 2 {
		t.Errorf("a new group has %d rules, want the 2 default egress rules", len(rules))
	}
	seen := map[string]bool{}
	var ports []string
	for i := range 20 {
		p := a.create("/network/v2.0/ports", "port", map[string]any{"name": "p" + string(rune('a'+i)), "network_id": netID, "security_groups": []string{sg["id"].(string)}})
		ip := p["fixed_ips"].([]any)[0].(map[string]any)["ip_address"].(string)
		if !inNet(fixedNet, ip) || seen[ip] {
			t.Errorf("port IP %s: outside %s or given twice", ip, fixedNet)
		}
		seen[ip] = true
		ports = append(ports, p["id"].(string))
	}
	if code, body := a.do("DELETE", "/network/v2.0/security-groups/"+sg["id"].(string), nil); code != http.StatusConflict {
		t.Errorf("deleting a group in use: %d %v, want 409", code, body)
	}
	fip := a.create("/network/v2.0/floatingips", "floatingip", map[string]any{"floating_network_id": a.network("public")})
	if ip := fip["floating_ip_address"].(string); !inNet(floatingNet, ip) {
		t.Errorf("floating IP %s outside %s", ip, floatingNet)
	}

	_, flavors := a.do("GET", "/compute/v2.1/flavors/detail", nil)
	flavor := flavors["flavors"].([]any)[0].(map[string]any)["id"]
	_, images := a.do("GET", "/image/v2/images?name=talos&sort=name:asc&status=active", nil)
	image := images["images"].([]any)[0].(map[string]any)["id"]
	server := func(name, port string) (int, map[string]any) {
		return a.do("POST", "/compute/v2.1/servers", map[string]any{"server": map[string]any{
			"name": name, "flavorRef": flavor, "imageRef": "", "networks": []any{map[string]any{"port": port}},
			"user_data": base64.StdEncoding.EncodeToString([]byte("machine: {}\n")),
			"block_device_mapping_v2": []any{map[string]any{"boot_index": 0, "uuid": image, "source_type": "image",
				"destination_type": "volume", "volume_size": 10, "delete_on_termination": true}},
		}})
	}
	code, body := server("a", ports[0])
	if code != http.StatusAccepted {
		t.Fatalf("create server: %d %v", code, body)
	}
	id := body["server"].(map[string]any)["id"].(string)
	if code, _ := server("b", ports[0]); code != http.StatusConflict {
		t.Errorf("a second server on a port in use: %d, want 409", code)
	}
	c.SetInstanceQuota(1)
	code, body = server("c", ports[1])
	if msg, _ := json.Marshal(body); code != http.StatusForbidden || !strings.Contains(string(msg), "Quota exceeded for instances: Requested 1, but already used 1 of 1 instances") {
		t.Errorf("beyond the quota: %d %s", code, msg)
	}
	c.SetInstanceQuota(-1)

	_, got := a.do("GET", "/compute/v2.1/servers/"+id, nil)
	srv := got["server"].(map[string]any)
	if srv["status"] != "ACTIVE" || srv["addresses"].(map[string]any)["private"] == nil {
		t.Errorf("server %v", srv)
	}
	if _, ok := srv["tags"]; ok {
		t.Error("tags without microversion 2.26")
	}
	vols := srv["os-extended-volumes:volumes_attached"].([]any)
	if inv := c.Inventory(); inv.Volumes != 1 || len(vols) != 1 {
		t.Errorf("inventory %+v, attached %v", inv, vols)
	}

	// resize: VERIFY_RESIZE until confirmed (or reverted)
	other := flavors["flavors"].([]any)[1].(map[string]any)["id"]
	action := func(body map[string]any) int {
		code, _ := a.do("POST", "/compute/v2.1/servers/"+id+"/action", body)
		return code
	}
	status := func() (string, any) {
		_, got := a.do("GET", "/compute/v2.1/servers/"+id, nil)
		s := got["server"].(map[string]any)
		return s["status"].(string), s["flavor"].(map[string]any)["id"]
	}
	for _, tc := range []struct {
		name   string
		body   map[string]any
		code   int
		status string
		flavor any
	}{
		{"confirm without a resize", map[string]any{"confirmResize": nil}, http.StatusConflict, "ACTIVE", flavor},
		{"to the same flavor", map[string]any{"resize": map[string]any{"flavorRef": flavor}}, http.StatusBadRequest, "ACTIVE", flavor},
		{"to no flavor", map[string]any{"resize": "m1.large"}, http.StatusBadRequest, "ACTIVE", flavor},
		{"resize", map[string]any{"resize": map[string]any{"flavorRef": other}}, http.StatusAccepted, "VERIFY_RESIZE", other},
		{"revert", map[string]any{"revertResize": nil}, http.StatusAccepted, "ACTIVE", flavor},
		{"resize again", map[string]any{"resize": map[string]any{"flavorRef": other}}, http.StatusAccepted, "VERIFY_RESIZE", other},
		{"confirm", map[string]any{"confirmResize": nil}, http.StatusAccepted, "ACTIVE", other},
	} {
		if code := action(tc.body); code != tc.code {
			t.Errorf("%s: %d, want %d", tc.name, code, tc.code)
		}
		if st, fl := status(); st != tc.status || fl != tc.flavor {
			t.Errorf("%s: status %s flavor %v, want %s %v", tc.name, st, fl, tc.status, tc.flavor)
		}
	}
	if code, _ := a.do("DELETE", "/compute/v2.1/servers/"+id, nil); code != http.StatusNoContent {
		t.Errorf("delete server: %d", code)
	}
	if code, _ := a.do("GET", "/compute/v2.1/servers/"+id, nil); code != http.StatusNotFound {
		t.Errorf("GET after delete: %d, want 404 at once", code)
	}
	if inv := c.Inventory(); inv.Servers != 0 || inv.Volumes != 0 || inv.Ports != 20 {
		t.Errorf("after the delete: %+v (the volume goes, the user's ports stay)", inv)
	}
	if len(deleted) != 1 || deleted[0] != "a" {
		t.Errorf("ServerDeleted for %v", deleted)
	}
	if code, _ := a.do("GET", "/compute/v2.1/os-hypervisors", nil); code != http.StatusNotImplemented {
		t.Errorf("an unknown request: %d, want 501", code)
	}
	if u := c.Unhandled(); len(u) != 1 || u[0] != "GET /compute/v2.1/os-hypervisors" {
		t.Errorf("Unhandled %v", u)
	}
	c.ClearUnhandled() // that 501 was expected

}

func TestSetDown(t *testing.T) {
	c := start(t, simcloud.Hooks{})
	if err := c.SetDown(true); err != nil {
		t.Fatal(err)
	}
	_, err := http.Post(c.AuthURL()+"/auth/tokens", "application/json", strings.NewReader("{}"))
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("with the API down: %v, want connection refused", err)
	}
	if err := c.SetDown(false); err != nil {
		t.Fatal(err)
	}
	newAPI(t, c)
}

func TestDeterministicIDs(t *testing.T) {
	ids := func() []string {
		c := start(t, simcloud.Hooks{})
		a := newAPI(t, c)
		var out []string
		for _, name := range []string{"x", "y", "x"} {
			out = append(out, a.create("/network/v2.0/security-groups", "security_group", map[string]any{"name": name})["id"].(string))
		}
		return out
	}
	first, second := ids(), ids()
	if strings.Join(first, ",") != strings.Join(second, ",") || first[0] == first[2] {
		t.Errorf("ids %v then %v: want the same, and two groups of one name distinct", first, second)
	}
}
