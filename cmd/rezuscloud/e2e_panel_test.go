package main

// Issue 22's tests through the built binary: the panel served by
// `rezuscloud run` ([panel] listen), in a real headless Chromium, through
// webtest's stand-in for the Supervisor's ingress, with the real broker,
// the real tofu and simulated nodes.

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"

	"github.com/rezuscloud/rezuscloud/internal/talos/simnode"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
	"github.com/rezuscloud/rezuscloud/internal/web/webtest"
)

// panelIngressFrom is the address the test ingress connects to the panel
// from (standing in for the Supervisor's 172.30.32.2): the only trusted
// peer. Every other loopback address is "another address".
var panelIngressFrom = netip.MustParseAddr("127.0.0.2")

// panelUser is the Home Assistant user of the ingress session.
var panelUser = webtest.User{ID: "5e2ec0ffee5e2ec0ffee5e2ec0ffee01", Name: "alice", DisplayName: "Alice"}

// panelDelays: the control plane stays installing for a while after its
// machine config, so that the apply is still running when its log lines
// reach the browser (the test checks it is, at that moment).
var panelDelays = simnode.Options{
	InstallDelay: 6 * time.Second, RebootDelay: 100 * time.Millisecond,
	DownDelay: 200 * time.Millisecond, BootDelay: 200 * time.Millisecond, ResetDelay: 100 * time.Millisecond,
}

// panelLab is the lab of the panel test: auto_apply off (the panel shows
// Approve under the plan only then), the control plane declared with its
// MAC, no workers yet (adopted from the Machines page).
func panelLab(m0 machine) string {
	hw := m0.node.Hardware()
	return fmt.Sprintf(`# the lab: planned, approved and grown from the panel
display_name       = "Lab"
provider           = "metal"
talos_version      = %q
kubernetes_version = "1.35.0"
auto_apply         = false   # the panel's Approve applies

[[node_groups]]
name  = "cp"
role  = "controlplane"
count = 1
  [[node_groups.machines]]
  address      = %q
  mac          = %q
  install_disk = %q

# workers: none yet, the Machines page adopts them
[[node_groups]]
name  = "workers"
role  = "worker"
count = 0   # raised by Adopt
`, simnode.DefaultTalosVersion, m0.addr, hw.MAC, hw.InstallDisk)
}

// TestE2EPanel is issue 22's browser test against the built binary: the
// panel ([panel] listen on loopback, trusting only the ingress's address)
// through the ingress stand-in in headless Chromium. It proves that the
// overview lists the clusters; Plan shows tofu's diff; Approve runs the
// apply and its log lines reach the page while it runs; a machine found by
// discovery is adopted from the Machines page and the file gets it with its
// comments kept; a tenant made with the form is validated at its fields,
// then written valid and announced as a device on MQTT; an invalid edit is
// refused with its file:line shown and the file unchanged; a direct
// connection from another address and a cross-origin POST are refused.
// It saves screenshots of every page at desktop and phone width.
func TestE2EPanel(t *testing.T) {
	e := newEnv(t, envOptions{tenant: "lab", machines: 3, workers: 0, delays: panelDelays})
	m0, found := e.machines[0], e.machines[1:]
	if err := os.WriteFile(e.tenantFile, []byte(panelLab(m0)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.tenantsDir, "cloud.toml"), []byte(cloudTenantDoc), 0o644); err != nil {
		t.Fatal(err)
	}
	nw := m0.addr[:strings.LastIndexByte(m0.addr, '.')]
	panelAddr := fmt.Sprintf("127.0.0.1:%d", freeLoopbackPort(t))
	e.appendConfig(fmt.Sprintf(`[discovery]
cidrs    = [%q]
interval = "1h"
[panel]
listen  = %q
trusted = [%q]
`, nw+".0/24", panelAddr, panelIngressFrom.String()))

	e.start()
	e.proc.waitLog(startTimeout, panelAddr) // the "panel" line with its listen address
	e.cap.wait(e.proc, phaseTimeout, "the two maintenance machines found by the first scan", func() bool {
		for _, m := range found {
			if !e.deviceShown(machineDevID(m.node.Hardware().MAC)) {
				return false
			}
		}
		return true
	})

	in := webtest.NewIngress(t, panelAddr, panelIngressFrom, panelUser)
	b := webtest.NewBrowser(t)
	p := webtest.NewPanel(t, b, in)
	p.Wait = phaseTimeout
	var shots []string
	shot := func(name string) { shots = append(shots, p.Shots(name)...) }

	// the overview lists the clusters
	if got := p.Clusters(); strings.Join(got, ",") != "cloud,lab" {
		t.Fatalf("the overview lists %v, want cloud and lab", got)
	}
	if err := p.Contains("Lab"); err != nil {
		t.Error(err)
	}
	shot("overview")

	// Plan (on the overview) runs tofu's plan; the cluster page shows the diff
	mark := e.cap.mark()
	if msg := p.Press("lab", "plan"); !strings.Contains(msg, "Plan of lab queued") {
		t.Fatalf("Plan answered %q", msg)
	}
	e.mustSucceed(mark, "plan")
	p.Open("tenants/lab")
	diff := p.WaitPlan("terraform_data.lab-cp-1")
	for _, want := range []string{"Added", "+ terraform_data.lab-cp-1", "Approve and apply"} {
		if !strings.Contains(diff, want) {
			t.Errorf("the plan lacks %q:\n%s", want, diff)
		}
	}
	if head := b.Text("#plan-head"); head != "1 to add, 0 to change, 0 to destroy" {
		t.Errorf("the plan's head says %q, want 1 to add, 0 to change, 0 to destroy", head)
	}
	if strings.Contains(diff, "Auto apply is on") {
		t.Errorf("auto_apply is off, yet the plan says it is on:\n%s", diff)
	}
	shot("cluster-planned")
	p.Open("tenants/lab/plan")
	p.WaitPlan("terraform_data.lab-cp-1")
	shot("plan")

	// Approve runs the apply; its lines reach the page while it runs
	p.Open("tenants/lab")
	p.WaitPlan("terraform_data.lab-cp-1")
	mark = e.cap.mark()
	if msg := p.Approve(); !strings.Contains(msg, "Apply of lab queued") {
		t.Fatalf("Approve answered %q", msg)
	}
	p.WaitLog("terraform_data.lab-cp-1: Creation complete") // a tofu -json event of the apply
	cpNode := e.node("cp", 1)
	p.WaitLog("node " + cpNode + ": machine config given in maintenance mode; installing") // a Talos step
	// the node installs for panelDelays.InstallDelay after that line: the
	// apply cannot have ended yet
	running := webtest.Eval[bool](b, `document.getElementById("status").innerText.toLowerCase().indexOf("apply running") >= 0`)
	stage := m0.node.Stage()
	ended := false
	for _, ev := range e.events(mark) {
		if ev.Operation == "apply" && ev.EventType != "started" {
			ended = true
		}
	}
	if !running || ended || stage != runtime.MachineStageInstalling {
		t.Errorf("when the Talos step's line showed: status says apply running %v, apply ended on MQTT %v, "+
			"control plane stage %v (want running, not ended, installing)", running, ended, stage)
	}
	shot("cluster-applying")
	e.mustSucceed(mark, "apply")
	p.WaitLog("apply succeeded")
	e.waitTenant("running, 1 of 1 ready", func(d tenantDoc) bool { return d.Phase == "running" && d.NodesReady == 1 })
	b.WaitText(p.Wait, "#nodes", "ready")
	b.WaitText(p.Wait, "#status", "1 of 1 node ready")
	// the phase badge in the heading follows the live page too
	b.WaitJS(p.Wait, "the phase badge to say running",
		`(function(){var e=document.getElementById("phase"); return !!e && e.textContent.toLowerCase().indexOf("running") >= 0})()`)
	p.Open("tenants/lab")
	if badge := b.Text("#phase"); !strings.Contains(strings.ToLower(badge), "running") {
		t.Errorf("the reloaded cluster page's phase badge says %q, want running", badge)
	}
	shot("cluster")

	// a cross-origin POST through the ingress is refused, even with the
	// page's token; the same POST from the panel's origin goes through
	hc, tok := panelClient(t, in)
	logBefore := e.proc.stderr.String()
	for _, c := range []struct{ origin, site, want string }{
		{"http://evil.example", "", `refused: this request did not come from the panel's own page (from "http://evil.example", not "` +
			strings.TrimPrefix(in.URL, "http://") + `")`},
		{"http://evil.example", "cross-site", "refused: this request did not come from the panel's own page (Sec-Fetch-Site: cross-site)"},
		{"", "", "refused: this request did not come from the panel's own page (no Origin or Referer)"},
	} {
		code, body := panelPost(t, hc, in, "plan", url.Values{"tenant": {"lab"}, "_token": {tok}}, c.origin, c.site)
		var ans struct{ Status, Error string }
		_ = json.Unmarshal([]byte(body), &ans)
		if code != http.StatusForbidden || ans.Status != "error" || !strings.Contains(ans.Error, c.want) {
			t.Errorf("POST from origin %q (Sec-Fetch-Site %q): HTTP %d %s, want 403 saying %q", c.origin, c.site, code, body, c.want)
		}
	}
	mark = e.cap.mark()
	if code, body := panelPost(t, hc, in, "plan", url.Values{"tenant": {"lab"}, "_token": {tok}}, in.URL, ""); code != http.StatusOK ||
		!strings.Contains(body, "Plan of lab queued") {
		t.Fatalf("the same POST from the panel's origin: HTTP %d %s", code, body)
	}
	e.mustSucceed(mark, "plan")
	logAfter := strings.TrimPrefix(e.proc.stderr.String(), logBefore)
	if n := strings.Count(logAfter, "panel: request refused"); n != 3 {
		t.Errorf("the log has %d refusals, want 3:\n%s", n, logAfter)
	}
	if n := len(regexp.MustCompile(`panel: request\s+\{"action": "plan"`).FindAllString(logAfter, -1)); n != 1 {
		t.Errorf("%d panel requests reached the command path, want only the one from the panel's origin:\n%s", n, logAfter)
	}

	// a machine found by discovery is adopted from the Machines page
	p.Open("machines")
	for _, m := range found {
		b.WaitText(p.Wait, "#machines", m.addr)
	}
	shot("machines")
	adopt := found[0]
	hw := adopt.node.Hardware()
	before, _ := os.ReadFile(e.tenantFile)
	if msg := p.Adopt(hw.MAC, "lab/workers", hw.InstallDisk); !strings.Contains(msg, fmt.Sprintf("Adopted %s into lab/workers", adopt.addr)) {
		t.Fatalf("Adopt answered %q", msg)
	}
	after, _ := os.ReadFile(e.tenantFile)
	for _, keep := range []string{"# the lab: planned, approved and grown from the panel", "# the panel's Approve applies",
		"# workers: none yet, the Machines page adopts them", "# raised by Adopt"} {
		if !strings.Contains(string(after), keep) {
			t.Errorf("adopting lost the comment %q:\n%s", keep, after)
		}
	}
	if !regexp.MustCompile(`count = 1\s+# raised by Adopt`).Match(after) {
		t.Errorf("the workers' count was not raised to 1:\n%s", after)
	}
	flat := strings.Join(strings.Fields(string(after)), " ")
	for _, want := range []string{fmt.Sprintf(`address = %q`, adopt.addr), fmt.Sprintf(`mac = %q`, hw.MAC),
		fmt.Sprintf(`install_disk = %q`, hw.InstallDisk)} {
		if !strings.Contains(flat, want) {
			t.Errorf("the adopted file lacks %s:\n%s", want, after)
		}
	}
	if grown := strings.Replace(string(before), "count = 0   # raised by Adopt", "count = 1   # raised by Adopt", 1); !strings.HasPrefix(string(after), grown) {
		t.Errorf("adopting rewrote the file instead of adding to it:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if _, err := tenant.Parse("lab.toml", after); err != nil {
		t.Errorf("the adopted file does not validate: %v", err)
	}
	b.WaitJS(p.Wait, "the adopted machine gone from the Machines page", fmt.Sprintf(
		`document.getElementById("machines").innerText.indexOf(%q) < 0`, adopt.addr))

	// a new tenant from the form: problems at their fields first, nothing
	// written; then valid, written, and announced on MQTT
	edgeAddr := nw + ".200" // nothing listens there
	p.CreateTenant(map[string]string{"name": "Edge", "node_groups[0].count": "2", "node_groups[0].machines": edgeAddr + " /dev/sda"})
	if msg := p.FieldError("name"); !strings.Contains(msg, "lower-case") {
		t.Errorf("the name's problem is %q", msg)
	}
	if msg := p.FieldError("node_groups[0].count"); !strings.Contains(msg, "odd count") {
		t.Errorf("the count's problem is %q", msg)
	}
	shot("new-problems")
	for _, n := range []string{"Edge.toml", "edge.toml"} {
		if _, err := os.Stat(filepath.Join(e.tenantsDir, n)); err == nil {
			t.Fatalf("an invalid form wrote %s", n)
		}
	}
	p.CreateTenant(map[string]string{"name": "edge", "display_name": "Edge box", "node_groups[0].count": "1",
		"node_groups[0].machines": edgeAddr + " /dev/sda"})
	if err := p.Contains("Cluster edge created", "Edge box"); err != nil {
		t.Fatal(err)
	}
	edge, err := os.ReadFile(filepath.Join(e.tenantsDir, "edge.toml"))
	if err != nil {
		t.Fatalf("the new tenant was not written: %v", err)
	}
	if _, err := tenant.Parse("edge.toml", edge); err != nil {
		t.Fatalf("the written tenant does not validate: %v\n%s", err, edge)
	}
	edgeID := base + "_edge"
	e.cap.wait(e.proc, phaseTimeout, "the new tenant's device discovery (retained)", func() bool {
		m, ok := e.cap.lastMsg(e.discTopic(edgeID))
		return ok && m.Retained && len(m.Payload) > 0
	})
	if dev, _ := e.discovery(edgeID)["device"].(map[string]any); dev == nil || !strings.Contains(fmt.Sprint(dev["name"]), "Edge box") {
		t.Errorf("the new tenant's device: %v, want the name Edge box", dev)
	}
	p.Open("new")
	shot("new")

	// an invalid edit is refused with its line shown; the file is unchanged
	lab, _ := os.ReadFile(e.tenantFile)
	line := 0
	for i, l := range strings.Split(string(lab), "\n") {
		if strings.Contains(l, `role  = "worker"`) {
			line = i + 1
		}
	}
	if line == 0 {
		t.Fatalf("no worker role line in:\n%s", lab)
	}
	p.EditTenant("lab", strings.Replace(string(lab), `role  = "worker"`, `role  = "boss"`, 1), false)
	probs := p.Problems()
	want := fmt.Sprintf(`lab.toml:%d:1 node_groups[1].role: "boss" is not one of controlplane, worker`, line)
	if len(probs) != 1 || !strings.Contains(probs[0], want) {
		t.Errorf("the editor's problems %q, want one with %q", probs, want)
	}
	shot("edit-problems")
	if now, _ := os.ReadFile(e.tenantFile); string(now) != string(lab) {
		t.Fatalf("a refused edit changed the file:\n%s", now)
	}
	p.Open("tenants/lab/edit")
	shot("edit")

	// a direct connection from another address than the ingress's is refused
	for _, from := range []string{"127.0.0.1", "127.0.0.3"} {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
		c := &http.Client{Transport: &http.Transport{DialContext: d.DialContext}, Timeout: 30 * time.Second}
		resp, err := c.Get("http://" + panelAddr + "/")
		if err != nil {
			t.Fatalf("direct GET from %s: %v", from, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "only Home Assistant's ingress may connect") {
			t.Errorf("a direct connection from %s: HTTP %d %s, want 403", from, resp.StatusCode, body)
		}
	}
	if text := b.Visit("http://" + panelAddr + "/"); !strings.Contains(text, "403 forbidden: only Home Assistant's ingress may connect") {
		t.Errorf("the browser connecting directly sees %q", text)
	}

	// nothing the pages asked for left the ingress's origin
	var ext []string
	for _, r := range b.ExternalRequests(in.URL) {
		if !strings.HasPrefix(r, "http://"+panelAddr+"/") { // the direct visit above
			ext = append(ext, r)
		}
	}
	if len(ext) > 0 {
		t.Errorf("the pages made requests elsewhere: %v", ext)
	}

	t.Logf("screenshots (in %s):\n%s", b.Artefacts, strings.Join(shots, "\n"))
	checkNoSecrets(t, e.cap.all(), []string{e.passphrase})
	checkLogNoSecrets(t, e.proc.stderr.String()+e.proc.stdout.String(), []string{e.passphrase})
	e.stop()
}

// panelClient is a plain HTTP client with an ingress session, and the
// panel's token for its user (from the page's meta tag).
func panelClient(t *testing.T, in *webtest.Ingress) (*http.Client, string) {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	hc := &http.Client{Jar: jar, Timeout: 60 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := hc.Get(in.URL + "/session")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	resp, err = hc.Get(in.Entry())
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := regexp.MustCompile(`<meta name="panel-token" content="([^"]+)"`).FindSubmatch(page)
	if resp.StatusCode != http.StatusOK || m == nil {
		t.Fatalf("the overview through the ingress: HTTP %d, no panel token:\n%.2000s", resp.StatusCode, page)
	}
	return hc, string(m[1])
}

// panelPost POSTs a request action through the ingress as a page's
// script would (asking for JSON), with the Origin and Sec-Fetch-Site
// headers given ("" leaves one out).
func panelPost(t *testing.T, hc *http.Client, in *webtest.Ingress, action string, form url.Values, origin, site string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, in.Entry()+"api/request/"+action, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	if site != "" {
		req.Header.Set("Sec-Fetch-Site", site)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}
