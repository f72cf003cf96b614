package webtest

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// Panel is the panel in a browser, through an ingress: the steps of its
// flows, each waiting for what the user would see. A test against the
// fake engine and one against the built binary run the same steps.
type Panel struct {
	T  testing.TB
	B  *Browser
	In *Ingress
	// Wait bounds every step (default 20 s; an apply of the real binary
	// may want more for its log lines).
	Wait time.Duration
}

// NewPanel opens an ingress session in the browser.
func NewPanel(t testing.TB, b *Browser, in *Ingress) *Panel {
	t.Helper()
	p := &Panel{T: t, B: b, In: in, Wait: 20 * time.Second}
	b.Open(in.URL + "/session")
	return p
}

// Open shows a page of the panel ("" is the overview, "machines", "new",
// "tenants/<name>").
func (p *Panel) Open(page string) {
	p.T.Helper()
	p.B.Open(p.In.Entry() + page)
}

// OpenInFrame shows a page inside the stand-in for Home Assistant's
// frontend (theme "light" or "dark").
func (p *Panel) OpenInFrame(page, theme string) {
	p.T.Helper()
	p.B.Do(p.Wait, navigate(p.In.URL+"/?theme="+theme+"&page="+page))
	p.B.WaitJS(p.Wait, "the framed panel to be ready", `(function(){var f=document.querySelector("iframe");
 return !!f && !!f.contentDocument && f.contentDocument.documentElement.dataset.ready === "1"})()`)
}

// Clusters opens the overview and lists the clusters it shows.
func (p *Panel) Clusters() []string {
	p.T.Helper()
	p.Open("")
	return Eval[[]string](p.B, `Array.from(document.querySelectorAll(".cards > li.card")).map(function(e){return e.id.replace(/^cluster-/, "")})`)
}

// Press presses a cluster card's action button on the overview ("plan",
// "apply") and waits for the answer.
func (p *Panel) Press(cluster, action string) string {
	p.T.Helper()
	p.B.Click(fmt.Sprintf(`#cluster-%s form[action="api/request/%s"] button`, cluster, action))
	return p.Answer()
}

// PressOnPage presses an action button of the current page by its action
// (the first such button) and waits for the answer.
func (p *Panel) PressOnPage(action string) string {
	p.T.Helper()
	p.B.Click(fmt.Sprintf(`form[action="api/request/%s"] button`, action))
	return p.Answer()
}

// Answer waits for the answer of the action just pressed (the toast) and
// returns it.
func (p *Panel) Answer() string {
	p.T.Helper()
	p.B.WaitJS(p.Wait, "an answer", `(function(){var t=document.getElementById("toast"); return !!t && !t.hidden})()`)
	msg := p.B.Text("#toast")
	Eval[bool](p.B, `(function(){document.getElementById("toast").hidden = true; return true})()`)
	return msg
}

// WaitPlan waits for the cluster page's pending plan to show resource
// address and returns the plan's text.
func (p *Panel) WaitPlan(address string) string {
	p.T.Helper()
	p.B.WaitText(p.Wait, "#plan", address)
	return p.B.Text("#plan")
}

// Approve presses "Approve and apply" under the plan.
func (p *Panel) Approve() string {
	p.T.Helper()
	p.B.Click(`#plan form[action="api/request/apply"] button`)
	return p.Answer()
}

// WaitLog waits for a log line containing text on the cluster page.
func (p *Panel) WaitLog(text string) {
	p.T.Helper()
	p.B.WaitText(p.Wait, "#log", text)
}

// Adopt adopts the machine with mac on the machines page into target
// ("<cluster>/<group>") with the install disk, and returns the answer.
func (p *Panel) Adopt(mac, target, disk string) string {
	p.T.Helper()
	p.Open("machines")
	form := fmt.Sprintf(`form.adopt:has(input[name="mac"][value=%q])`, mac)
	p.B.Click(fmt.Sprintf(`%s input[name="install_disk"][value=%q]`, form, disk))
	p.B.Fill(fmt.Sprintf(`%s select[name="target"]`, form), target)
	p.B.Click(form + " button")
	return p.Answer()
}

// CreateTenant fills the new-cluster form (inputs by name, e.g. "name",
// "node_groups[1].count", "node_groups[0].machines") and presses Create.
// The answer is the new cluster's page, or the form with its problems.
func (p *Panel) CreateTenant(fields map[string]string) {
	p.T.Helper()
	p.Open("new")
	if pv, ok := fields["provider"]; ok {
		p.B.Fill(`select[name="provider"]`, pv)
	}
	for k, v := range fields {
		if k == "provider" {
			continue
		}
		p.B.Fill(fmt.Sprintf(`[name=%q]`, k), v)
	}
	p.B.Submit(`.newform .actions button[value="create"]`)
}

// FieldError is the problem shown at a form input ("" when none).
func (p *Panel) FieldError(name string) string {
	return Eval[string](p.B, fmt.Sprintf(`(function(){var e=document.querySelector('[name=%q]');
 var f=e && e.closest(".field"); var x=f && f.querySelector(".err"); return x ? x.innerText : ""})()`, name))
}

// EditTenant replaces a tenant file's text in the editor and saves.
// ok: the save must succeed (the cluster page), else it must be refused
// (the editor with its problems).
func (p *Panel) EditTenant(name, text string, ok bool) {
	p.T.Helper()
	p.Open("tenants/" + name + "/edit")
	p.B.Fill(`#text`, text)
	p.B.Submit(`.editor button.primary`)
	if ok {
		p.B.WaitJS(p.Wait, "the saved cluster page", `!/\/edit$/.test(location.pathname)`)
	} else {
		p.B.WaitJS(p.Wait, "the editor's problems", `!!document.getElementById("problems")`)
	}
}

// Problems are the editor's problems as shown.
func (p *Panel) Problems() []string {
	return Eval[[]string](p.B, `Array.from(document.querySelectorAll("#problems li")).map(function(e){return e.innerText})`)
}

// Shots saves the current page at desktop and phone width, in the
// system's light and dark scheme: name-desktop.png, name-phone-dark.png...
func (p *Panel) Shots(name string, schemes ...string) []string {
	p.T.Helper()
	if len(schemes) == 0 {
		schemes = []string{"light"}
	}
	var out []string
	for _, s := range schemes {
		p.B.Scheme(s)
		for _, v := range []Viewport{Desktop, Phone} {
			p.B.View(v)
			n := name + "-" + v.Name
			if s != "light" {
				n += "-" + s
			}
			out = append(out, p.B.Screenshot(n))
		}
	}
	p.B.Scheme("light")
	p.B.View(Desktop)
	return out
}

// Contains reports whether the page text has every one of the strings.
func (p *Panel) Contains(ss ...string) error {
	text := p.B.Text("body")
	for _, s := range ss {
		if !strings.Contains(text, s) {
			return fmt.Errorf("the page lacks %q; it says:\n%s", s, text)
		}
	}
	return nil
}

// PressWithKeyboard reaches a cluster card's action button with Tab and
// presses it with Enter, and waits for the answer.
func (p *Panel) PressWithKeyboard(cluster, action string) string {
	p.T.Helper()
	p.B.Tab(fmt.Sprintf(`#cluster-%s form[action="api/request/%s"] button`, cluster, action))
	if d, visible := p.B.Focused(); !visible {
		p.T.Errorf("the focused %s shows no focus ring", d)
	}
	p.B.Key("\r")
	return p.Answer()
}

// Destroy destroys a cluster from its page: the button stays disabled
// until the cluster's name is typed; it returns the answer.
func (p *Panel) Destroy(name string) string {
	p.T.Helper()
	p.Open("tenants/" + name)
	btn := `form[action="api/request/destroy"] button`
	if !Eval[bool](p.B, fmt.Sprintf(`document.querySelector(%q).disabled`, btn)) {
		p.T.Errorf("Destroy is enabled before the name is typed")
	}
	p.B.Fill(`form[action="api/request/destroy"] input[name="confirm"]`, name+"x")
	if !Eval[bool](p.B, fmt.Sprintf(`document.querySelector(%q).disabled`, btn)) {
		p.T.Errorf("Destroy is enabled for a wrong name")
	}
	p.B.Fill(`form[action="api/request/destroy"] input[name="confirm"]`, name)
	p.B.Click(btn)
	return p.Answer()
}
