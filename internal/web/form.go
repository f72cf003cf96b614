package web

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/gendata"
	"go.uber.org/zap"

	"github.com/rezuscloud/rezuscloud/internal/hass"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// newForm is the new-cluster form: every value as typed, and the problems
// by input name (the tenant file's key paths, so the validator's problems
// land at their field).
type newForm struct {
	Name, DisplayName, Provider string
	Talos, Kubernetes, Endpoint string
	AutoApply                   bool
	OCI                         struct{ CompartmentOCID, Region, SubnetOCID, ImageOCID, AvailabilityDomain string }
	OpenStack                   struct{ Region, Network, Image, FloatingIPPool string }
	Groups                      []groupForm
	// Errors are the problems by input name; General the rest.
	Errors  map[string]string
	General []string
	// TOML is the file the form makes (shown as a preview).
	TOML string
}

type groupForm struct {
	Index                                int
	Name, Role, Count                    string
	Machines                             string // metal: one per line, "address install_disk [mac]"
	Shape, OCPUs, MemoryGB, BootVolumeGB string // OCI
	Flavor, VolumeGB                     string // OpenStack
}

// Providers lists the choices of the provider select.
func (f *newForm) Providers() []tenant.Provider { return tenant.Providers }

// Err is the problem of an input.
func (f *newForm) Err(name string) string { return f.Errors[name] }

// maxGroups bounds the groups of the form.
const maxGroups = 8

func defaultForm() *newForm {
	return &newForm{Provider: string(tenant.ProviderMetal), Talos: gendata.VersionTag,
		Kubernetes: constants.DefaultKubernetesVersion,
		Groups: []groupForm{{Index: 0, Name: "cp", Role: "controlplane", Count: "1"},
			{Index: 1, Name: "workers", Role: "worker", Count: "0"}}}
}

// readForm reads the posted form.
func readForm(v url.Values) *newForm {
	f := &newForm{Name: strings.TrimSpace(v.Get("name")), DisplayName: strings.TrimSpace(v.Get("display_name")),
		Provider: v.Get("provider"), Talos: strings.TrimSpace(v.Get("talos_version")),
		Kubernetes: strings.TrimSpace(v.Get("kubernetes_version")), Endpoint: strings.TrimSpace(v.Get("endpoint")),
		AutoApply: v.Get("auto_apply") != ""}
	f.OCI.CompartmentOCID, f.OCI.Region = v.Get("oci.compartment_ocid"), v.Get("oci.region")
	f.OCI.SubnetOCID, f.OCI.ImageOCID, f.OCI.AvailabilityDomain = v.Get("oci.subnet_ocid"), v.Get("oci.image_ocid"), v.Get("oci.availability_domain")
	f.OpenStack.Region, f.OpenStack.Network = v.Get("openstack.region"), v.Get("openstack.network")
	f.OpenStack.Image, f.OpenStack.FloatingIPPool = v.Get("openstack.image"), v.Get("openstack.floating_ip_pool")
	for i := 0; i < maxGroups; i++ {
		p := fmt.Sprintf("node_groups[%d].", i)
		if _, ok := v[p+"name"]; !ok {
			break
		}
		g := groupForm{Name: strings.TrimSpace(v.Get(p + "name")), Role: v.Get(p + "role"), Count: strings.TrimSpace(v.Get(p + "count")),
			Machines: v.Get(p + "machines"), Shape: v.Get(p + "shape"), OCPUs: v.Get(p + "ocpus"), MemoryGB: v.Get(p + "memory_gb"),
			BootVolumeGB: v.Get(p + "boot_volume_gb"), Flavor: v.Get(p + "flavor"), VolumeGB: v.Get(p + "volume_gb")}
		f.Groups = append(f.Groups, g)
	}
	f.renumber()
	return f
}

func (f *newForm) renumber() {
	for i := range f.Groups {
		f.Groups[i].Index = i
	}
}

// problem records a problem at an input.
func (f *newForm) problem(field, msg string) {
	if f.Errors == nil {
		f.Errors = map[string]string{}
	}
	if old, ok := f.Errors[field]; ok {
		msg = old + "\n" + msg
	}
	f.Errors[field] = msg
}

// toml writes the tenant file the form describes. Values that cannot be
// written (a count that is not a number) are problems at their input.
func (f *newForm) toml(now time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s: written by the rezuscloud panel on %s.\n", f.Name, now.Format("2006-01-02"))
	b.WriteString("# Edit it in the panel's editor or any other: rezuscloud picks up the change.\n")
	kv := func(indent, k, v string) { fmt.Fprintf(&b, "%s%-18s = %s\n", indent, k, v) }
	if f.DisplayName != "" {
		kv("", "display_name", tomlString(f.DisplayName))
	}
	kv("", "provider", tomlString(f.Provider))
	kv("", "talos_version", tomlString(f.Talos))
	kv("", "kubernetes_version", tomlString(f.Kubernetes))
	if f.Endpoint != "" {
		kv("", "endpoint", tomlString(f.Endpoint))
	}
	kv("", "auto_apply", strconv.FormatBool(f.AutoApply))
	str := func(indent, k, v string) {
		if v = strings.TrimSpace(v); v != "" {
			kv(indent, k, tomlString(v))
		}
	}
	switch tenant.Provider(f.Provider) {
	case tenant.ProviderOCI:
		b.WriteString("\n[oci]\n")
		str("", "compartment_ocid", f.OCI.CompartmentOCID)
		str("", "region", f.OCI.Region)
		str("", "subnet_ocid", f.OCI.SubnetOCID)
		str("", "image_ocid", f.OCI.ImageOCID)
		str("", "availability_domain", f.OCI.AvailabilityDomain)
	case tenant.ProviderOpenStack:
		b.WriteString("\n[openstack]\n")
		str("", "region", f.OpenStack.Region)
		str("", "network", f.OpenStack.Network)
		str("", "image", f.OpenStack.Image)
		str("", "floating_ip_pool", f.OpenStack.FloatingIPPool)
	}
	num := func(field, v string, float bool) (string, bool) {
		v = strings.TrimSpace(v)
		if v == "" {
			return "", false
		}
		if float {
			if x, err := strconv.ParseFloat(v, 64); err == nil {
				return strconv.FormatFloat(x, 'f', -1, 64), true
			}
			f.problem(field, fmt.Sprintf("%q is not a number", truncate(v, 20)))
			return "", false
		}
		if n, err := strconv.Atoi(v); err == nil {
			return strconv.Itoa(n), true
		}
		f.problem(field, fmt.Sprintf("%q is not a whole number", truncate(v, 20)))
		return "", false
	}
	for i, g := range f.Groups {
		p := fmt.Sprintf("node_groups[%d].", i)
		b.WriteString("\n[[node_groups]]\n")
		str("", "name", g.Name)
		str("", "role", g.Role)
		if n, ok := num(p+"count", g.Count, false); ok {
			kv("", "count", n)
		}
		switch tenant.Provider(f.Provider) {
		case tenant.ProviderMetal:
			for _, m := range parseMachines(g.Machines, func(line int, msg string) {
				f.problem(p+"machines", fmt.Sprintf("line %d: %s", line, msg))
			}) {
				b.WriteString("  [[node_groups.machines]]\n")
				str("  ", "address", m.Address)
				str("  ", "install_disk", m.InstallDisk)
				str("  ", "mac", m.MAC)
			}
		case tenant.ProviderOCI:
			str("", "shape", g.Shape)
			for _, x := range []struct {
				k, v  string
				float bool
			}{{"ocpus", g.OCPUs, true}, {"memory_gb", g.MemoryGB, true}, {"boot_volume_gb", g.BootVolumeGB, false}} {
				if n, ok := num(p+x.k, x.v, x.float); ok {
					kv("", x.k, n)
				}
			}
		case tenant.ProviderOpenStack:
			str("", "flavor", g.Flavor)
			if n, ok := num(p+"volume_gb", g.VolumeGB, false); ok {
				kv("", "volume_gb", n)
			}
		}
	}
	return b.String()
}

// parseMachines reads the machines box: one machine a line, its address,
// its install disk (/dev/…) and optionally its MAC, in any order after the
// address, separated by spaces or commas.
func parseMachines(text string, bad func(line int, msg string)) []tenant.Machine {
	var out []tenant.Machine
	for i, line := range strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n") {
		if j := strings.IndexByte(line, '#'); j >= 0 {
			line = line[:j]
		}
		fs := strings.FieldsFunc(line, func(r rune) bool { return r == ' ' || r == '\t' || r == ',' })
		if len(fs) == 0 {
			continue
		}
		m := tenant.Machine{Address: fs[0]}
		for _, tok := range fs[1:] {
			if _, err := net.ParseMAC(tok); err == nil && m.MAC == "" {
				m.MAC = tok
			} else if strings.HasPrefix(tok, "/dev/") && m.InstallDisk == "" {
				m.InstallDisk = tok
			} else {
				bad(i+1, fmt.Sprintf("%q is neither an install disk (/dev/…) nor a MAC address", truncate(tok, 40)))
			}
		}
		if m.InstallDisk == "" {
			bad(i+1, "needs the install disk, e.g. 192.168.1.21 /dev/sda")
		}
		out = append(out, m)
	}
	return out
}

// tomlString is a TOML basic string.
func tomlString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\u%04X`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// reMachineField is a machine's key path in a group.
var reMachineField = regexp.MustCompile(`^(node_groups\[\d+\])\.machines\[(\d+)\]`)

// place puts the validator's problems at their inputs.
func (f *newForm) place(ps tenant.Problems) {
	for _, p := range ps {
		field := p.Field
		switch {
		case field == "" && strings.HasPrefix(p.Msg, "tenant name"):
			f.problem("name", strings.TrimPrefix(p.Msg, "tenant name (the file name) "))
		case field == "" || field == "node_groups":
			f.General = append(f.General, p.Msg)
		case field == "oci" || field == "openstack":
			f.General = append(f.General, p.Msg)
		default:
			if m := reMachineField.FindStringSubmatch(field); m != nil {
				n, _ := strconv.Atoi(m[2])
				f.problem(m[1]+".machines", fmt.Sprintf("machine %d: %s", n+1, p.Msg))
				continue
			}
			f.problem(field, p.Msg)
		}
	}
}

func (s *Server) newForm(w http.ResponseWriter, r *http.Request) {
	f := defaultForm()
	s.render(w, http.StatusOK, "new", s.newPage(r, "New cluster", "new", f))
}

// newSave takes the form: op add-group and remove-group-<i> change the
// form, preview shows the file, create writes it (when valid).
func (s *Server) newSave(w http.ResponseWriter, r *http.Request) {
	if !s.formAllowed(w, r, "new") {
		return
	}
	f := readForm(r.PostForm)
	op := r.PostFormValue("op")
	switch {
	case op == "add-group" && len(f.Groups) < maxGroups:
		f.Groups = append(f.Groups, groupForm{Name: fmt.Sprintf("group%d", len(f.Groups)+1), Role: "worker", Count: "0"})
		f.renumber()
		s.render(w, http.StatusOK, "new", s.newPage(r, "New cluster", "new", f))
		return
	case strings.HasPrefix(op, "remove-group-"):
		if i, err := strconv.Atoi(strings.TrimPrefix(op, "remove-group-")); err == nil && i >= 0 && i < len(f.Groups) {
			f.Groups = append(f.Groups[:i], f.Groups[i+1:]...)
			f.renumber()
		}
		s.render(w, http.StatusOK, "new", s.newPage(r, "New cluster", "new", f))
		return
	}
	name := f.Name
	switch {
	case name == "":
		f.problem("name", "must not be empty")
		name = "new"
	case strings.ContainsAny(name, "/\\."):
		f.problem("name", "must be lower-case letters, digits and '-' (it is the file's name)")
		name = "new"
	}
	data := f.toml(s.now())
	f.TOML = data
	if _, err := tenant.Parse(name+".toml", []byte(data)); err != nil {
		if ps, ok := tenant.AsProblems(err); ok {
			f.place(ps)
		} else {
			f.General = append(f.General, err.Error())
		}
	}
	if len(f.Errors) > 0 || len(f.General) > 0 || op == "preview" {
		status := http.StatusOK
		if op != "preview" {
			status = http.StatusUnprocessableEntity
		}
		s.render(w, status, "new", s.newPage(r, "New cluster", "new", f))
		return
	}
	if _, err := s.files.Create(f.Name, []byte(data)); err != nil {
		if ps, ok := tenant.AsProblems(err); ok {
			f.place(ps)
		} else if errors.Is(err, tenant.ErrExists) {
			f.problem("name", fmt.Sprintf("a cluster %q exists already", f.Name))
		} else {
			f.General = append(f.General, err.Error())
		}
		s.render(w, http.StatusUnprocessableEntity, "new", s.newPage(r, "New cluster", "new", f))
		return
	}
	s.log.Info("panel: tenant file created", zap.String("tenant", f.Name), zap.String("user", userOf(r).Label()))
	s.reload(r.Context())
	http.Redirect(w, r, ingressPath(r)+"/tenants/"+url.PathEscape(f.Name)+"?"+
		url.Values{"ok": {fmt.Sprintf("Cluster %s created: its file is written. Plan or Apply when ready.", f.Name)}}.Encode(),
		http.StatusSeeOther)
}

// formAllowed checks a form post: same origin, token, administrator.
func (s *Server) formAllowed(w http.ResponseWriter, r *http.Request, back string) bool {
	if err := r.ParseForm(); err != nil {
		s.fail(w, r, http.StatusBadRequest, "The form could not be read: "+err.Error())
		return false
	}
	u := userOf(r)
	if err := s.sameOrigin(r, u); err != nil {
		s.log.Warn("panel: form refused", zap.String("page", back), zap.String("user", u.Label()), zap.Error(err))
		s.fail(w, r, http.StatusForbidden, err.Error())
		return false
	}
	if err := s.mustBeAdmin(r); err != nil {
		s.fail(w, r, http.StatusForbidden, err.Error())
		return false
	}
	return true
}

// reload has the engine read the tenant files now (the command path's
// reload), so that a written file shows without waiting for the watcher.
func (s *Server) reload(ctx context.Context) {
	if resp := s.cmd(ctx, hass.Request{Action: hass.ActionReload}); !resp.OK() {
		s.log.Warn("panel: reload after a write", zap.String("error", resp.Error))
	}
}

// editData is the editor.
type editData struct {
	Name, Text, Base string
	Problems         []problemRow
	Err              string
}

type problemRow struct {
	Loc, Field, Msg string
	Line            int
	Source          string // the line as written
}

func (s *Server) editForm(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("t")
	data, err := s.files.Read(name)
	if err != nil {
		s.fail(w, r, http.StatusNotFound, fmt.Sprintf("The file of cluster %q cannot be read: %v", truncate(name, 60), err))
		return
	}
	d := editData{Name: name, Text: string(data), Base: tenant.Sum(data)}
	s.render(w, http.StatusOK, "edit", s.newPage(r, "Edit "+name, "overview", d))
}

// editSave replaces the file with the edit, if it validates; an invalid
// edit is shown again with its problems at their lines, and nothing is
// written.
func (s *Server) editSave(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("t")
	if !s.formAllowed(w, r, "tenants/"+name+"/edit") {
		return
	}
	text, base := r.PostFormValue("text"), r.PostFormValue("base")
	old, err := s.files.Read(name)
	if err != nil {
		s.fail(w, r, http.StatusNotFound, fmt.Sprintf("The file of cluster %q cannot be read: %v", truncate(name, 60), err))
		return
	}
	// a textarea posts CRLF line ends: keep the file's own
	if !strings.Contains(string(old), "\r\n") {
		text = strings.ReplaceAll(text, "\r\n", "\n")
	}
	d := editData{Name: name, Text: text, Base: base}
	if text == string(old) {
		http.Redirect(w, r, ingressPath(r)+"/tenants/"+url.PathEscape(name)+"?"+url.Values{"ok": {"Nothing changed."}}.Encode(), http.StatusSeeOther)
		return
	}
	if _, err := s.files.Replace(name, []byte(text), base); err != nil {
		ps, ok := tenant.AsProblems(err)
		if !ok {
			d.Err = err.Error()
		}
		lines := strings.Split(text, "\n")
		for _, p := range ps {
			row := problemRow{Field: p.Field, Msg: p.Msg, Line: p.Line, Loc: p.File}
			if p.Line > 0 {
				row.Loc = fmt.Sprintf("%s:%d:%d", p.File, p.Line, p.Column)
				if p.Line <= len(lines) {
					row.Source = strings.TrimRight(lines[p.Line-1], "\r")
				}
			}
			d.Problems = append(d.Problems, row)
		}
		s.render(w, http.StatusUnprocessableEntity, "edit", s.newPage(r, "Edit "+name, "overview", d))
		return
	}
	s.log.Info("panel: tenant file edited", zap.String("tenant", name), zap.String("user", userOf(r).Label()))
	s.reload(r.Context())
	http.Redirect(w, r, ingressPath(r)+"/tenants/"+url.PathEscape(name)+"?"+url.Values{"ok": {"Saved: the file is valid and written."}}.Encode(), http.StatusSeeOther)
}
