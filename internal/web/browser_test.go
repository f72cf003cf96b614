package web

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/tenant"
	"github.com/rezuscloud/rezuscloud/internal/web/webtest"
)

// TestPanelInBrowser runs the panel's flows in a real Chromium, through a
// stand-in of Home Assistant's ingress, against the fake engine behind
// the real command path and a real tenant store, and saves a screenshot
// of every page at desktop and phone width.
func TestPanelInBrowser(t *testing.T) {
	h := newHarness(t)
	b := webtest.NewBrowser(t)
	p := webtest.NewPanel(t, b, h.in)

	// the overview lists the clusters
	if got := p.Clusters(); strings.Join(got, ",") != "cloud,lab" {
		t.Fatalf("overview lists %v, want cloud and lab", got)
	}
	p.Shots("overview", "light", "dark")

	// with the keyboard alone: Tab to a button, Enter presses it
	if msg := p.PressWithKeyboard("cloud", "plan"); !strings.Contains(msg, "Plan of cloud queued") {
		t.Fatalf("plan by keyboard answered %q", msg)
	}

	// Plan (on the overview) makes a plan; the cluster page shows its diff
	if msg := p.Press("lab", "plan"); !strings.Contains(msg, "Plan of lab queued") {
		t.Fatalf("plan answered %q", msg)
	}
	if !h.eng.called("plan lab") {
		t.Fatalf("the engine got %v, want plan lab", h.eng.Calls())
	}
	p.Open("tenants/lab")
	diff := p.WaitPlan("terraform_data.lab-workers-3")
	if head := b.Text("#plan-head"); head != "2 to add, 1 to change, 2 to destroy" {
		t.Errorf("the plan's head says %q", head)
	}
	for _, want := range []string{"Added", "terraform_data.lab-workers-3",
		"Changed in place", "terraform_data.lab-cp-1", "input.config_sha256", "Replaced", "forces replacement",
		"Destroyed", "terraform_data.lab-workers-2", "because the tenant no longer declares it"} {
		if !strings.Contains(diff, want) {
			t.Errorf("the plan lacks %q:\n%s", want, diff)
		}
	}

	// Approve sends apply; the log follows the running operation
	if msg := p.Approve(); !strings.Contains(msg, "Apply of lab queued") {
		t.Fatalf("approve answered %q", msg)
	}
	if !h.eng.called("apply lab") {
		t.Fatalf("the engine got %v, want apply lab", h.eng.Calls())
	}
	b.WaitText(10*time.Second, "#status", "Apply running")
	for i, line := range []string{"terraform_data.lab-workers-3: Creating...", "terraform_data.lab-workers-3: Creation complete after 0s",
		"lab-workers-3: applying the machine config (maintenance mode)"} {
		src := "tofu"
		if i == 2 {
			src = "talos"
		}
		h.eng.emit(LogLine{Tenant: "lab", Operation: "apply", At: time.Now(), Source: src, Level: "info", Text: line})
		p.WaitLog(line)
	}
	h.eng.emit(LogLine{Tenant: "lab", Operation: "apply", At: time.Now(), Source: "tofu", Level: "error",
		Text: "terraform_data.lab-workers-2: Still destroying... [10s elapsed]"})
	p.WaitLog("Still destroying")
	h.eng.update("lab", func(v *View) {
		v.Status.Progress = 60
		v.Nodes["lab-cp-1"] = tenant.NodeStatus{Stage: tenant.StageRunning, Ready: true, Address: "192.168.1.21",
			Role: tenant.RoleControlPlane, Group: "cp", TalosVersion: "v1.13.0"}
		v.Nodes["lab-workers-1"] = tenant.NodeStatus{Stage: tenant.StageInstalling, Address: "192.168.1.31",
			Role: tenant.RoleWorker, Group: "workers"}
		v.Status.NodesReady = 1
	})
	b.WaitText(10*time.Second, "#nodes", "installing")
	h.eng.update("lab", func(v *View) {
		v.Status.Backup = &tenant.BackupInfo{At: time.Now(), Size: 4 << 20, File: "etcd-20261202T040000Z.snapshot"}
	})
	h.eng.mu.Lock()
	h.eng.backups["lab"] = []tenant.BackupInfo{{At: time.Date(2026, 12, 2, 4, 0, 0, 0, time.UTC), Size: 4 << 20, File: "etcd-20261202T040000Z.snapshot"}}
	h.eng.mu.Unlock()
	p.Open("tenants/lab")
	p.WaitPlan("terraform_data.lab-cp-1")
	p.Shots("cluster", "light", "dark")
	p.Open("tenants/lab/plan")
	p.Shots("plan")

	// a machine is adopted from the machines page: the file has it, its
	// comments kept
	p.Open("machines")
	p.Shots("machines")
	if msg := p.PressOnPage("discover"); msg != "Scan finished." || !h.eng.called("discover") {
		t.Fatalf("scan answered %q; the engine got %v", msg, h.eng.Calls())
	}
	if msg := p.Adopt("02:00:00:00:00:50", "lab/workers", "/dev/nvme0n1"); !strings.Contains(msg, "Adopted 192.168.1.50 into lab/workers") {
		t.Fatalf("adopt answered %q", msg)
	}
	data, err := h.store.Read("lab")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"# the lab cluster, by hand", "# workers: adopted from the panel", "count = 2   # raised by adopting",
		`address = "192.168.1.50"`, `mac = "02:00:00:00:00:50"`, `install_disk = "/dev/nvme0n1"`} {
		if !strings.Contains(strings.Join(strings.Fields(string(data)), " "), strings.Join(strings.Fields(want), " ")) {
			t.Errorf("the adopted file lacks %q:\n%s", want, data)
		}
	}
	b.WaitText(10*time.Second, "#machines", "No machine found yet")

	// a new tenant from the form: problems at their field first, then valid
	p.CreateTenant(map[string]string{"name": "Edge", "node_groups[0].count": "2", "node_groups[0].machines": "10.0.0.5 /dev/sda"})
	if e := p.FieldError("name"); !strings.Contains(e, "lower-case") {
		t.Errorf("name problem = %q", e)
	}
	if e := p.FieldError("node_groups[0].count"); !strings.Contains(e, "odd count") {
		t.Errorf("count problem = %q", e)
	}
	p.Shots("new-problems")
	if _, err := h.store.Read("Edge"); err == nil {
		t.Fatal("an invalid tenant was written")
	}
	p.CreateTenant(map[string]string{"name": "edge", "display_name": "Edge box", "node_groups[0].count": "1",
		"node_groups[0].machines": "10.0.0.5 /dev/sda", "node_groups[1].machines": "10.0.0.6 /dev/nvme0n1 02:00:00:00:00:06\n10.0.0.7 /dev/sda",
		"node_groups[1].count": "2"})
	if err := p.Contains("Cluster edge created", "Edge box"); err != nil {
		t.Fatal(err)
	}
	edge, err := h.store.Read("edge")
	if err != nil {
		t.Fatalf("the new tenant was not written: %v", err)
	}
	if _, err := tenant.Parse("edge.toml", edge); err != nil {
		t.Fatalf("the written tenant does not validate: %v\n%s", err, edge)
	}
	if !h.eng.called("reload") {
		t.Fatalf("the engine was not told to reload: %v", h.eng.Calls())
	}
	p.Open("new")
	p.Shots("new")

	// an invalid edit is refused with its line shown, and nothing written
	before, _ := h.store.Read("edge")
	p.EditTenant("edge", strings.Replace(string(edge), `role               = "worker"`, `role               = "boss"`, 1), false)
	line := 0
	for i, l := range strings.Split(string(edge), "\n") {
		if strings.Contains(l, `"worker"`) {
			line = i + 1
		}
	}
	probs := p.Problems()
	if want := fmt.Sprintf(`edge.toml:%d:1 node_groups[1].role: "boss" is not one of controlplane, worker`, line); len(probs) != 1 || !strings.Contains(probs[0], want) {
		t.Fatalf("problems %q, want one with %q", probs, want)
	}
	b.Click(`#problems button[data-line]`)
	if sel := webtest.Eval[string](b, `(function(){var t=document.getElementById("text"); return t.value.slice(t.selectionStart, t.selectionEnd)})()`); !strings.Contains(sel, `"boss"`) {
		t.Errorf("the problem's line is not selected: %q", sel)
	}
	p.Shots("edit-problems")
	if after, _ := h.store.Read("edge"); string(after) != string(before) {
		t.Fatal("a refused edit changed the file")
	}
	p.EditTenant("edge", strings.Replace(string(edge), `display_name       = "Edge box"`, `display_name       = "Edge"`, 1), true)
	if after, _ := h.store.Read("edge"); !strings.Contains(string(after), `"Edge"`) {
		t.Fatalf("a valid edit was not saved:\n%s", after)
	}

	// Destroy only once the cluster's name is typed
	if msg := p.Destroy("cloud"); msg != "Destroy of cloud queued." || !h.eng.called("destroy cloud cloud") {
		t.Fatalf("destroy answered %q; the engine got %v", msg, h.eng.Calls())
	}

	// in Home Assistant's frame, with its dark theme
	p.OpenInFrame("tenants/lab", "dark")
	b.Screenshot("frame-dark-desktop")
	b.View(webtest.Phone)
	b.Screenshot("frame-dark-phone")
	b.View(webtest.Desktop)
	if bg := webtest.Eval[string](b, `getComputedStyle(document.querySelector("iframe").contentDocument.body).backgroundColor`); bg != "rgb(17, 17, 17)" {
		t.Errorf("the framed panel's background is %s, want Home Assistant's dark rgb(17, 17, 17)", bg)
	}
	p.OpenInFrame("", "light")
	b.Screenshot("frame-light-desktop")

	// a direct connection from another address than the ingress's is refused
	if text := b.Visit("http://" + h.addr + "/"); !strings.Contains(text, "403 forbidden: only Home Assistant's ingress may connect") {
		t.Fatalf("a direct connection shows %q", text)
	}
	// a cross-origin POST (another port of the same host: the same site, so
	// the ingress cookie goes along) is refused, even with a stolen token
	p.Open("")
	tok := webtest.Eval[string](b, `document.querySelector('meta[name="panel-token"]').content`)
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<!doctype html><form method="post" action="%sapi/request/destroy">
<input name="tenant" value="lab"><input name="confirm" value="lab"><input name="_token" value="%s"></form>
<script>document.forms[0].submit()</script>`, h.in.Entry(), tok)
	}))
	defer evil.Close()
	calls := len(h.eng.Calls())
	b.Visit(evil.URL)
	b.WaitJS(10*time.Second, "the forged post's answer", `location.href.indexOf("/api/hassio_ingress/") >= 0 && document.body.innerText.indexOf("refused") >= 0`)
	if err := p.Contains("refused: this request did not come from the panel's own page (Sec-Fetch-Site: same-site)"); err != nil {
		t.Fatal(err)
	}
	if got := h.eng.Calls(); len(got) != calls {
		t.Fatalf("the forged post reached the engine: %v", got[calls:])
	}

	// nothing left the ingress's origin, and nothing broke the CSP
	var ext []string
	for _, r := range b.ExternalRequests(h.in.URL) {
		if !strings.HasPrefix(r, evil.URL) && !strings.HasPrefix(r, "http://"+h.addr+"/") { // the two visits above
			ext = append(ext, r)
		}
	}
	if len(ext) > 0 {
		t.Errorf("requests to elsewhere: %v", ext)
	}
	p.Open("")
	if v := b.CSPViolations(); len(v) > 0 {
		t.Errorf("CSP violations: %v", v)
	}
	if os.Getenv("REZUSCLOUD_ARTIFACTS") == "" {
		t.Logf("screenshots in %s", b.Artefacts)
	}
}
