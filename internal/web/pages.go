package web

import (
	"bytes"
	"context"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/rezuscloud/rezuscloud/internal/talos"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// page is what every page's template gets.
type page struct {
	Title    string
	Nav      string // the active tab: overview, machines, new
	Base     string // <base href>: the ingress path + "/"
	Token    string
	User     User
	Admin    bool
	AdminErr string
	Notice   string // the answer to a form posted without JavaScript
	Failed   bool   // Notice is an error
	Asset    string // the static files' version
	Stream   string // the page's event stream, relative to Base
	Version  string
	Data     any
}

// newPage fills the parts every page has.
func (s *Server) newPage(r *http.Request, title, nav string, data any) *page {
	u := userOf(r)
	admin, aerr := s.isAdmin(r)
	p := &page{Title: title, Nav: nav, Base: ingressPath(r) + "/", Token: s.token(u), User: u, Admin: admin,
		Asset: s.assetVer, Stream: "api/events", Version: s.version, Data: data}
	if aerr != nil {
		p.AdminErr = aerr.Error()
	}
	q := r.URL.Query()
	if m := q.Get("error"); m != "" {
		p.Notice, p.Failed = truncate(m, 500), true
	} else if m := q.Get("ok"); m != "" {
		p.Notice = truncate(m, 500)
	}
	return p
}

// render writes a page; a template that fails writes nothing but a 500.
func (s *Server) render(w http.ResponseWriter, status int, name string, p *page) {
	var b bytes.Buffer
	if err := s.pages[name].ExecuteTemplate(&b, "layout", p); err != nil {
		s.log.Error("panel: rendering a page", zap.String("page", name), zap.Error(err))
		http.Error(w, "500 the page could not be rendered: "+err.Error(), http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes())
}

// fail shows an error page.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, status int, msg string) {
	p := s.newPage(r, http.StatusText(status), "", msg)
	s.render(w, status, "error", p)
}

// card is one cluster as the overview shows it.
type card struct {
	Name, Title, Provider string
	Phase                 tenant.Phase
	Ready, Total          int
	Talos, Kubernetes     string // the file's versions
	TalosRunning          string
	KubernetesRunning     string
	Operation             string // the running one, "" when idle
	Progress              int
	Last                  *tenant.OperationResult
	Problem               bool
	Summary               string
	Pending               tenant.Changes
	AutoApply             bool
	Orphaned              bool
}

func newCard(v View) card {
	st := v.Status
	c := card{Name: v.Name, Title: v.Name, Phase: st.Phase, Ready: st.NodesReady, Total: st.NodesTotal,
		Talos: st.TalosVersion, Kubernetes: st.KubernetesVersion, TalosRunning: st.TalosVersionRunning,
		KubernetesRunning: st.KubernetesVersionRunning, Progress: st.Progress, Last: st.LastOperation,
		Problem: st.Problem, Summary: tenant.Summary(st), Pending: st.Pending,
		Orphaned: st.Phase == tenant.PhaseOrphaned}
	if c.Phase == "" {
		c.Phase = tenant.PhaseAbsent
	}
	if st.Operation != nil {
		c.Operation = *st.Operation
	}
	if v.Spec != nil {
		c.Title, c.Provider, c.AutoApply = v.Spec.Title(), string(v.Spec.Provider), v.Spec.AutoApply
		if c.Talos == "" {
			c.Talos, c.Kubernetes = v.Spec.TalosVersion, v.Spec.KubernetesVersion
		}
	}
	return c
}

// HasChanges reports pending changes.
func (c card) HasChanges() bool { return c.Pending.Add+c.Pending.Change+c.Pending.Destroy > 0 }

// Exists reports whether the cluster has infrastructure (so etcd,
// kubeconfig and talosconfig may exist).
func (c card) Exists() bool {
	switch c.Phase {
	case tenant.PhaseAbsent, tenant.PhasePlanned, "":
		return false
	}
	return true
}

func (s *Server) overview(w http.ResponseWriter, r *http.Request) {
	var cards []card
	for _, v := range s.src.Views() {
		cards = append(cards, newCard(v))
	}
	s.render(w, http.StatusOK, "overview", s.newPage(r, "Clusters", "overview", cards))
}

// clusterData is the cluster page.
type clusterData struct {
	card
	Nodes     []nodeRow
	Log       []LogLine
	Backups   []tenant.BackupInfo
	BackupErr string
	Upgrades  []upgradeRow
	Metal     bool
	PlanKey   string // changes when the pending plan may have
}

type nodeRow struct {
	Name, Group, Address, Version, Power string
	Role                                 tenant.Role
	Stage                                tenant.Stage
	Ready, Metal                         bool
}

type upgradeRow struct {
	Component, Label, Installed, Target string
}

// Behind reports an installed version that is not the target.
func (u upgradeRow) Behind() bool { return u.Installed != "" && u.Installed != u.Target }

// maxLogLines bounds the log a page shows.
const maxLogLines = 400

func (s *Server) cluster(w http.ResponseWriter, r *http.Request) {
	v, ok := s.view(w, r)
	if !ok {
		return
	}
	d := clusterData{card: newCard(v), Metal: v.Spec != nil && v.Spec.Provider == tenant.ProviderMetal}
	d.Nodes = nodeRows(v)
	d.Log = tail(s.src.Log(v.Name), maxLogLines)
	if d.Exists() {
		bs, err := s.src.Backups(v.Name)
		if err != nil {
			d.BackupErr = err.Error()
		}
		d.Backups = bs
	}
	d.Upgrades = []upgradeRow{
		{Component: "talos", Label: "Talos", Installed: d.TalosRunning, Target: d.Talos},
		{Component: "kubernetes", Label: "Kubernetes", Installed: d.KubernetesRunning, Target: d.Kubernetes},
	}
	d.PlanKey = planKey(v.Status)
	p := s.newPage(r, d.Title, "overview", d)
	p.Stream = "api/tenants/" + url.PathEscape(v.Name) + "/log"
	s.render(w, http.StatusOK, "cluster", p)
}

// planKey identifies what the pending plan depends on.
func planKey(st tenant.Status) string {
	k := fmt.Sprintf("%d.%d.%d", st.Pending.Add, st.Pending.Change, st.Pending.Destroy)
	if lo := st.LastOperation; lo != nil {
		k += "." + lo.Name + "." + lo.At.UTC().Format(time.RFC3339Nano)
	}
	return k
}

// nodeRows lists the declared nodes in file order, then any others the
// engine still knows (a scaled-down or orphaned tenant's).
func nodeRows(v View) []nodeRow {
	metal := v.Spec != nil && v.Spec.Provider == tenant.ProviderMetal
	var rows []nodeRow
	seen := map[string]bool{}
	row := func(name string, n tenant.Node, ok bool) nodeRow {
		ns := v.Nodes[name]
		r := nodeRow{Name: name, Group: ns.Group, Role: ns.Role, Stage: ns.Stage, Ready: ns.Ready,
			Address: ns.Address, Version: ns.TalosVersion, Metal: metal}
		if ok {
			r.Group, r.Role = n.Group, n.Role
			if r.Address == "" && n.Machine != nil {
				r.Address = n.Machine.Address
			}
		}
		if r.Stage == "" {
			r.Stage = tenant.StagePending
		}
		r.Power = r.Stage.Power()
		return r
	}
	if v.Spec != nil {
		for _, n := range v.Spec.Nodes() {
			rows = append(rows, row(n.Name, n, true))
			seen[n.Name] = true
		}
	}
	var rest []string
	for name := range v.Nodes {
		if !seen[name] {
			rest = append(rest, name)
		}
	}
	slices.Sort(rest)
	for _, name := range rest {
		rows = append(rows, row(name, tenant.Node{}, false))
	}
	return rows
}

func tail[T any](s []T, n int) []T {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// view finds the page's tenant, or answers 404.
func (s *Server) view(w http.ResponseWriter, r *http.Request) (View, bool) {
	name := r.PathValue("t")
	v, ok := s.src.View(name)
	if !ok {
		s.fail(w, r, http.StatusNotFound, fmt.Sprintf("There is no cluster %q.", truncate(name, 60)))
	}
	return v, ok
}

// planData is the plan section (and page).
type planData struct {
	card
	Plan *planView
	Err  string
}

// plan renders the pending plan: the cluster page loads it into its plan
// section (?part=1), and without JavaScript it is a page of its own.
func (s *Server) plan(w http.ResponseWriter, r *http.Request) {
	v, ok := s.view(w, r)
	if !ok {
		return
	}
	d := planData{card: newCard(v)}
	ctx, cancel := context.WithTimeout(r.Context(), time.Minute)
	defer cancel()
	pl, err := s.src.PendingPlan(ctx, v.Name)
	if err != nil {
		d.Err = err.Error()
	}
	d.Plan = newPlanView(pl)
	p := s.newPage(r, "Plan of "+d.Title, "overview", d)
	if r.URL.Query().Get("part") == "1" {
		var b bytes.Buffer
		if err := s.pages["plan"].ExecuteTemplate(&b, "plan", p); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write(b.Bytes())
		return
	}
	s.render(w, http.StatusOK, "plan", p)
}

// machinesData is the machines page.
type machinesData struct {
	Machines []machineCard
	Groups   []groupOption
}

type machineCard struct {
	talos.Machine
	Memory      string
	Disks       []diskRow
	DefaultDisk string
}

type diskRow struct {
	talos.Disk
	Size  string
	Notes string
}

type groupOption struct{ Tenant, Group, Label string }

// Value is the option's form value.
func (g groupOption) Value() string { return g.Tenant + "/" + g.Group }

func (s *Server) machines(w http.ResponseWriter, r *http.Request) {
	d := machinesData{Groups: metalGroups(s.src.Views())}
	for _, m := range s.src.Machines() {
		c := machineCard{Machine: m, Memory: size(int64(m.MemoryBytes))}
		if dk, err := talos.InstallDisk(m.Disks); err == nil {
			c.DefaultDisk = dk.DevPath
		}
		for _, dk := range m.Disks {
			var notes []string
			if dk.Removable() {
				notes = append(notes, "removable")
			}
			if dk.Readonly {
				notes = append(notes, "read-only")
			}
			if dk.CDROM {
				notes = append(notes, "CD-ROM")
			}
			if dk.Rotational {
				notes = append(notes, "spinning")
			}
			c.Disks = append(c.Disks, diskRow{Disk: dk, Size: size(int64(dk.Size)), Notes: strings.Join(notes, ", ")})
		}
		d.Machines = append(d.Machines, c)
	}
	s.render(w, http.StatusOK, "machines", s.newPage(r, "Machines", "machines", d))
}

// metalGroups are the groups a machine can be adopted into: metal worker
// groups (a control plane's count must stay odd).
func metalGroups(vs []View) []groupOption {
	var out []groupOption
	for _, v := range vs {
		if v.Spec == nil || v.Spec.Provider != tenant.ProviderMetal || v.Status.Phase == tenant.PhaseOrphaned {
			continue
		}
		for _, g := range v.Spec.NodeGroups {
			if g.Role == tenant.RoleWorker {
				out = append(out, groupOption{Tenant: v.Name, Group: g.Name,
					Label: fmt.Sprintf("%s / %s (%s)", v.Spec.Title(), g.Name, plural(g.Count, "node"))})
			}
		}
	}
	return out
}

// plural is "1 node", "2 nodes".
func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// funcs are the templates' helpers.
var funcs = template.FuncMap{
	"ago": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		d := time.Since(t)
		switch {
		case d < time.Minute:
			return "just now"
		case d < time.Hour:
			return fmt.Sprintf("%d min ago", int(d.Minutes()))
		case d < 48*time.Hour:
			return fmt.Sprintf("%d h ago", int(d.Hours()))
		}
		return fmt.Sprintf("%d days ago", int(d.Hours()/24))
	},
	"iso":   func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
	"clock": func(t time.Time) string { return t.Local().Format("15:04:05") },
	"date":  func(t time.Time) string { return t.Local().Format("2006-01-02 15:04") },
	"size":  size,
	"tone":  tone,
	"words": func(s string) string { return strings.ReplaceAll(s, "_", " ") },
	"upper": func(s string) string {
		if s == "" {
			return s
		}
		return strings.ToUpper(s[:1]) + s[1:]
	},
	"pathesc": url.PathEscape,
	"act":     act,
	"cls":     func(c string, b actionBtn) actionBtn { b.Class = c; return b },
	"unless": func(ok bool, reason string, b actionBtn) actionBtn {
		if !ok && b.Disabled == "" {
			b.Disabled = reason
		}
		return b
	},
	"fld": fld,
	"ver": func(installed, target string) struct{ Installed, Target string } {
		return struct{ Installed, Target string }{installed, target}
	},
	"sym": func(action string) string {
		return map[string]string{"create": "+", "update": "~", "replace": "±", "delete": "−"}[action]
	},
	"or2": func(a, b string) string {
		if a != "" {
			return a
		}
		return b
	},
}

// actionBtn is a button that posts one request to the command path.
type actionBtn struct {
	Action, Label, Class, Back, Token, Disabled string
	Fields                                      []kv
}

type kv struct{ K, V string }

// act makes an action button on page p: label, the page to come back to
// without JavaScript, and the request's fields as key, value pairs.
// Administrators only: for anyone else it is disabled.
func act(p *page, action, label, back string, kvs ...string) actionBtn {
	b := actionBtn{Action: action, Label: label, Back: back, Token: p.Token}
	for i := 0; i+1 < len(kvs); i += 2 {
		b.Fields = append(b.Fields, kv{kvs[i], kvs[i+1]})
	}
	if !p.Admin {
		b.Disabled = "Only administrators may do this"
	}
	return b
}

// fieldData is one text input of a form.
type fieldData struct{ ID, Name, Label, Value, Err, Hint, Placeholder string }

var idReplacer = strings.NewReplacer("[", "-", "]", "", ".", "-", "_", "-")

// fld is the input name of the new-cluster form f.
func fld(f *newForm, name, label, value, hint string) fieldData {
	d := fieldData{ID: "f-" + idReplacer.Replace(name), Name: name, Label: label, Value: value, Err: f.Err(name)}
	if strings.HasPrefix(hint, "e.g. ") {
		d.Placeholder = strings.TrimPrefix(hint, "e.g. ")
	} else {
		d.Hint = hint
	}
	return d
}

// tone is a state's colour class: ok, busy, bad or idle.
func tone(s any) string {
	switch fmt.Sprint(s) {
	case "running", "succeeded", "on", "true":
		return "ok"
	case "provisioning", "bootstrapping", "upgrading", "destroying", "installing", "booting", "rebooting",
		"resetting", "shutting_down", "started", "maintenance":
		return "busy"
	case "degraded", "failed", "orphaned", "unreachable", "off", "refused", "cancelled":
		return "bad"
	}
	return "idle"
}

// size is a byte count for people.
func size(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
