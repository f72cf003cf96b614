package wsapi

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rezuscloud/rezuscloud/internal/hass"
	"github.com/rezuscloud/rezuscloud/internal/hass/wsapi/fakeha"
	"github.com/rezuscloud/rezuscloud/internal/safefile/safefiletest"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

func assistLab(display string) *tenant.Tenant {
	return &tenant.Tenant{Name: "lab", DisplayName: display, Provider: tenant.ProviderMetal,
		NodeGroups: []tenant.NodeGroup{
			{Name: "cp", Role: tenant.RoleControlPlane, Count: 1},
			{Name: "workers", Role: tenant.RoleWorker, Count: 2},
		}}
}

// labEntities is what MQTT discovery registers for the lab tenant (and one
// of its nodes), entity id -> unique id.
var labEntities = [][2]string{
	{"sensor.rezuscloud_lab_phase", "rezuscloud_lab_phase"},
	{"sensor.rezuscloud_lab_nodes_ready", "rezuscloud_lab_nodes_ready"},
	{"binary_sensor.rezuscloud_lab_problem", "rezuscloud_lab_problem"},
	{"sensor.rezuscloud_lab_progress", "rezuscloud_lab_progress"},
	{"button.rezuscloud_lab_apply", "rezuscloud_lab_apply"},
	{"button.rezuscloud_lab_plan", "rezuscloud_lab_plan"},
	{"number.rezuscloud_lab_workers_count", "rezuscloud_lab_workers_count"},
	{"number.rezuscloud_lab_cp_count", "rezuscloud_lab_cp_count"},
	{"button.rezuscloud_lab_destroy", "rezuscloud_lab_destroy"},
	{"switch.rezuscloud_lab_destroy_armed", "rezuscloud_lab_destroy_armed"},
	{"button.rezuscloud_lab_cancel", "rezuscloud_lab_cancel"},
	{"switch.rezuscloud_lab_auto_apply", "rezuscloud_lab_auto_apply"},
	{"sensor.rezuscloud_lab_talos_version", "rezuscloud_lab_talos_version"},
	{"button.rezuscloud_lab_workers_1_reboot", "rezuscloud_lab_workers_1_reboot"},
}

// curated is what assist_expose exposes for lab (entity ids as registered).
var curated = []string{
	"binary_sensor.rezuscloud_lab_problem", "button.rezuscloud_lab_apply", "button.rezuscloud_lab_plan",
	"number.rezuscloud_lab_workers_count", "sensor.rezuscloud_lab_nodes_ready", "sensor.rezuscloud_lab_phase",
	"sensor.rezuscloud_lab_progress",
}

var neverExposed = []string{"button.rezuscloud_lab_destroy", "switch.rezuscloud_lab_destroy_armed",
	"button.rezuscloud_lab_cancel", "switch.rezuscloud_lab_auto_apply", "button.rezuscloud_lab_workers_1_reboot",
	"number.rezuscloud_lab_cp_count", "sensor.rezuscloud_lab_talos_version"}

func seedLab(fake *fakeha.Server) {
	for _, e := range labEntities {
		fake.AddEntity(fakeha.Entity{EntityID: e[0], UniqueID: e[1], Platform: "mqtt"})
	}
	// another integration's entity with a unique id like ours is not ours
	fake.AddEntity(fakeha.Entity{EntityID: "sensor.template_lab_phase", UniqueID: "rezuscloud_lab_phase", Platform: "template"})
}

func str(s string) *string { return &s }

type assistRun struct {
	a     *Assist
	syncs chan error
	errc  chan error
	stop  context.CancelFunc
}

// startAssist runs an Assist on c with the lab tenant until stop or the
// end of the test.
func startAssist(t *testing.T, c *Client, enabled bool, stateFile string, ts ...*tenant.Tenant) *assistRun {
	t.Helper()
	a := NewAssist(c, AssistOptions{Enabled: enabled, StateFile: stateFile}, nil)
	r := &assistRun{a: a, syncs: make(chan error, 64), errc: make(chan error, 1)}
	a.onSync = func(err error) { r.syncs <- err }
	a.SetEntities(hass.AssistEntities("", ts))
	ctx, cancel := context.WithCancel(context.Background())
	r.stop = cancel
	go func() { r.errc <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-r.errc
		r.errc <- nil
	})
	return r
}

// waitSync waits for the next finished sync and fails the test on its error.
func (r *assistRun) waitSync(t *testing.T) {
	t.Helper()
	ctx := waitCtx(t)
	select {
	case err := <-r.syncs:
		if err != nil {
			t.Fatalf("sync: %v", err)
		}
	case err := <-r.errc:
		r.errc <- err
		t.Fatalf("Run returned early: %v", err)
	case <-ctx.Done():
		t.Fatal("no sync")
	}
}

// waitDone waits for Run to return (the option off, all withdrawn).
func (r *assistRun) waitDone(t *testing.T) error {
	t.Helper()
	select {
	case err := <-r.errc:
		r.errc <- err
		return err
	case <-waitCtx(t).Done():
		t.Fatal("Run did not return")
		return nil
	}
}

type exposeCall struct {
	Assistants   []string `json:"assistants"`
	EntityIDs    []string `json:"entity_ids"`
	ShouldExpose bool     `json:"should_expose"`
}

func exposeCalls(t *testing.T, fake *fakeha.Server) []exposeCall {
	t.Helper()
	var out []exposeCall
	for _, c := range fake.Commands("homeassistant/expose_entity") {
		var e exposeCall
		if err := json.Unmarshal(c.Message, &e); err != nil {
			t.Fatal(err)
		}
		slices.Sort(e.EntityIDs)
		out = append(out, e)
	}
	return out
}

// aliasUpdates is entity id -> the aliases each update call set, in order.
func aliasUpdates(t *testing.T, fake *fakeha.Server) map[string][][]string {
	t.Helper()
	out := map[string][][]string{}
	for _, c := range fake.Commands("config/entity_registry/update") {
		var u struct {
			EntityID string    `json:"entity_id"`
			Aliases  []*string `json:"aliases"`
		}
		if err := json.Unmarshal(c.Message, &u); err != nil {
			t.Fatal(err)
		}
		out[u.EntityID] = append(out[u.EntityID], fakeha.AliasStrings(fakeha.Entity{Aliases: u.Aliases}))
	}
	return out
}

func aliasesOf(t *testing.T, fake *fakeha.Server, eid string) []string {
	t.Helper()
	e, ok := fake.Entity(eid)
	if !ok {
		t.Fatalf("no entity %s", eid)
	}
	return fakeha.AliasStrings(e)
}

func without1(list []string, drop ...string) []string {
	return slices.DeleteFunc(slices.Clone(list), func(s string) bool { return slices.Contains(drop, s) })
}

// TestAssistOnOffAcrossRestart is the "done when": with the option
// on, exactly the curated expose calls and merged aliases; off again (after
// a restart), exactly those withdrawn, the user's own left alone.
func TestAssistOnOffAcrossRestart(t *testing.T) {
	fake := fakeha.New(testToken)
	defer fake.Close()
	seedLab(fake)
	// the user's own choices before rezuscloud touches anything
	fake.SetExposed("sensor.rezuscloud_lab_nodes_ready", AssistAssistant, true)
	if err := fake.SetAliases("sensor.rezuscloud_lab_phase", str("Homelab"), nil); err != nil {
		t.Fatal(err)
	}
	if err := fake.SetAliases("button.rezuscloud_lab_apply", str("provision lab")); err != nil {
		t.Fatal(err)
	}
	if err := fake.RenameEntity("number.rezuscloud_lab_workers_count", "number.lab_workers"); err != nil {
		t.Fatal(err)
	}
	stateFile := filepath.Join(t.TempDir(), "assist.json")
	c := startClient(t, fake, testOptions(fake.URL, testToken))

	on := startAssist(t, c.Client, true, stateFile, assistLab("Lab"))
	on.waitSync(t)

	wantExposed := without1(curated, "sensor.rezuscloud_lab_nodes_ready", "number.rezuscloud_lab_workers_count")
	wantExposed = append(wantExposed, "number.lab_workers")
	slices.Sort(wantExposed)
	calls := exposeCalls(t, fake)
	if len(calls) != 1 || !slices.Equal(calls[0].EntityIDs, wantExposed) || !calls[0].ShouldExpose ||
		!slices.Equal(calls[0].Assistants, []string{"conversation"}) {
		t.Fatalf("expose calls = %+v\nwant one exposing %v to conversation", calls, wantExposed)
	}
	for _, eid := range append(slices.Clone(wantExposed), "sensor.rezuscloud_lab_nodes_ready") {
		if !fake.Exposed(eid, AssistAssistant) {
			t.Errorf("%s not exposed", eid)
		}
	}
	for _, eid := range neverExposed {
		if fake.Exposed(eid, AssistAssistant) {
			t.Errorf("%s exposed", eid)
		}
	}
	if fake.Exposed("sensor.template_lab_phase", AssistAssistant) {
		t.Error("another integration's entity exposed")
	}
	ups := aliasUpdates(t, fake)
	wantUps := map[string][][]string{
		"sensor.rezuscloud_lab_phase": {{"Homelab", "<name>", "Lab cluster"}},
		"number.lab_workers":          {{"Lab workers"}},
	}
	if len(ups) != len(wantUps) {
		t.Errorf("alias updates = %v, want %v", ups, wantUps)
	}
	for eid, want := range wantUps {
		if got := ups[eid]; len(got) != 1 || !slices.Equal(got[0], want[0]) {
			t.Errorf("alias updates of %s = %v, want %v", eid, got, want)
		}
	}
	if got := aliasesOf(t, fake, "button.rezuscloud_lab_apply"); !slices.Equal(got, []string{"provision lab"}) {
		t.Errorf("apply aliases = %v", got)
	}
	fi, err := os.Stat(stateFile)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("state file mode %v, want 0600", fi.Mode().Perm())
	}

	// HA restarts: the link reconnects, the sync runs again and changes nothing.
	fake.DropConnections()
	on.waitSync(t)
	if n := len(fake.Commands("homeassistant/expose_entity")); n != 1 {
		t.Errorf("%d expose calls after a reconnect, want still 1", n)
	}
	if n := len(fake.Commands("config/entity_registry/update")); n != 2 {
		t.Errorf("%d alias updates after a reconnect, want still 2", n)
	}

	// rezuscloud stops; the user adds an alias of their own meanwhile.
	on.stop()
	<-on.errc
	on.errc <- nil
	if err := fake.SetAliases("sensor.rezuscloud_lab_phase", str("Homelab"), nil, str("Lab cluster"), str("Big lab")); err != nil {
		t.Fatal(err)
	}

	// It starts again with the option off: exactly its own work is undone.
	off := startAssist(t, c.Client, false, stateFile, assistLab("Lab"))
	if err := off.waitDone(t); err != nil {
		t.Fatal(err)
	}
	calls = exposeCalls(t, fake)
	if len(calls) != 2 || calls[1].ShouldExpose || !slices.Equal(calls[1].EntityIDs, wantExposed) {
		t.Fatalf("withdraw call = %+v, want one withdrawing %v", calls[1:], wantExposed)
	}
	for _, eid := range wantExposed {
		if fake.Exposed(eid, AssistAssistant) {
			t.Errorf("%s still exposed", eid)
		}
	}
	if !fake.Exposed("sensor.rezuscloud_lab_nodes_ready", AssistAssistant) {
		t.Error("the user's own exposure was withdrawn")
	}
	if got := aliasesOf(t, fake, "sensor.rezuscloud_lab_phase"); !slices.Equal(got, []string{"Homelab", "<name>", "Big lab"}) {
		t.Errorf("phase aliases = %v, want the user's", got)
	}
	if got := aliasesOf(t, fake, "number.lab_workers"); len(got) != 0 {
		t.Errorf("workers aliases = %v, want none", got)
	}
	if got := aliasesOf(t, fake, "button.rezuscloud_lab_apply"); !slices.Equal(got, []string{"provision lab"}) {
		t.Errorf("apply aliases = %v", got)
	}
	st, err := loadAssistState(stateFile)
	if err != nil || len(st.Entities) != 0 {
		t.Errorf("state after withdrawal = %+v, %v", st, err)
	}

	// Off again with nothing recorded: not a single call.
	before := len(fake.Commands(""))
	again := startAssist(t, c.Client, false, stateFile, assistLab("Lab"))
	if err := again.waitDone(t); err != nil {
		t.Fatal(err)
	}
	if n := len(fake.Commands("")); n != before {
		t.Errorf("%d commands with nothing to withdraw", n-before)
	}
}

// TestAssistRespectsTheUser: what the user withdraws while the option is on
// is not forced back, and turning the option off then takes back only what
// is still rezuscloud's.
func TestAssistRespectsTheUser(t *testing.T) {
	fake := fakeha.New(testToken)
	defer fake.Close()
	seedLab(fake)
	stateFile := filepath.Join(t.TempDir(), "assist.json")
	c := startClient(t, fake, testOptions(fake.URL, testToken))
	on := startAssist(t, c.Client, true, stateFile, assistLab("Lab"))
	on.waitSync(t)
	if calls := exposeCalls(t, fake); len(calls) != 1 || !slices.Equal(calls[0].EntityIDs, curated) {
		t.Fatalf("expose calls = %+v", calls)
	}

	fake.SetExposed("button.rezuscloud_lab_plan", AssistAssistant, false)
	if err := fake.SetAliases("number.rezuscloud_lab_workers_count"); err != nil {
		t.Fatal(err)
	}
	fake.DropConnections()
	on.waitSync(t)
	if fake.Exposed("button.rezuscloud_lab_plan", AssistAssistant) {
		t.Error("the user's withdrawal was overridden")
	}
	if got := aliasesOf(t, fake, "number.rezuscloud_lab_workers_count"); len(got) != 0 {
		t.Errorf("removed alias came back: %v", got)
	}
	if n := len(fake.Commands("homeassistant/expose_entity")); n != 1 {
		t.Errorf("%d expose calls, want 1", n)
	}

	// The display name changes: the old alias of ours goes, the new one comes.
	on.a.SetEntities(hass.AssistEntities("", []*tenant.Tenant{assistLab("Homelab")}))
	on.waitSync(t)
	if got := aliasesOf(t, fake, "sensor.rezuscloud_lab_phase"); !slices.Equal(got, []string{"Homelab cluster"}) {
		t.Errorf("phase aliases after a rename = %v", got)
	}

	// The tenant goes away: its entities are withdrawn at once.
	on.a.SetEntities(hass.AssistEntities("", nil))
	on.waitSync(t)
	calls := exposeCalls(t, fake)
	wantBack := without1(curated, "button.rezuscloud_lab_plan")
	if len(calls) != 2 || calls[1].ShouldExpose || !slices.Equal(calls[1].EntityIDs, wantBack) {
		t.Fatalf("withdraw call = %+v, want %v", calls[1:], wantBack)
	}
	if got := aliasesOf(t, fake, "sensor.rezuscloud_lab_phase"); len(got) != 0 {
		t.Errorf("phase aliases = %v", got)
	}
}

// TestAssistLateDiscovery: entities that HA registers after the first sync
// (discovery still being processed) are exposed when the registry says so.
func TestAssistLateDiscovery(t *testing.T) {
	fake := fakeha.New(testToken)
	defer fake.Close()
	stateFile := filepath.Join(t.TempDir(), "assist.json")
	c := startClient(t, fake, testOptions(fake.URL, testToken))
	on := startAssist(t, c.Client, true, stateFile, assistLab("Lab"))
	on.waitSync(t)
	if n := len(fake.Commands("homeassistant/expose_entity")); n != 0 {
		t.Fatalf("%d expose calls with an empty registry", n)
	}
	if err := fake.WaitSubscribers(waitCtx(t), fakeha.EventRegistryUpdated, 1); err != nil {
		t.Fatal(err)
	}
	seedLab(fake)
	ctx := waitCtx(t)
	if err := fake.WaitCommands(ctx, "homeassistant/expose_entity", 1); err != nil {
		t.Fatal(err)
	}
	// the creates may come in several syncs; wait until every curated one is exposed
	for _, eid := range curated {
		for !fake.Exposed(eid, AssistAssistant) {
			select {
			case err := <-on.syncs:
				if err != nil {
					t.Fatal(err)
				}
			case <-ctx.Done():
				t.Fatalf("%s never exposed", eid)
			}
		}
	}
	for _, eid := range neverExposed {
		if fake.Exposed(eid, AssistAssistant) {
			t.Errorf("%s exposed", eid)
		}
	}
}

func TestAssistStateFile(t *testing.T) {
	tests := []struct {
		name, body string
		err        string // "" = loads
	}{
		{"garbage", "{not json", "fix it or remove it"},
		{"other version", `{"version":9,"entities":{}}`, "version 9"},
		{"fine", `{"version":1,"entities":{"rezuscloud_lab_phase":{"exposed":true}}}`, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fake := fakeha.New(testToken)
			defer fake.Close()
			seedLab(fake)
			path := filepath.Join(t.TempDir(), "assist.json")
			if err := os.WriteFile(path, []byte(tc.body), 0o600); err != nil {
				t.Fatal(err)
			}
			c := startClient(t, fake, testOptions(fake.URL, testToken))
			if err := c.WaitConnected(waitCtx(t)); err != nil {
				t.Fatal(err)
			}
			r := startAssist(t, c.Client, false, path)
			err := r.waitDone(t)
			if tc.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), path) {
				t.Fatalf("got %v, want an error naming %s with %q", err, path, tc.err)
			}
			if n := len(fake.Commands("")); n != 0 {
				t.Errorf("%d commands sent with a bad state file", n)
			}
			if b, _ := os.ReadFile(path); string(b) != tc.body {
				t.Errorf("state file changed: %s", b)
			}
		})
	}
}

// TestAssistHostileStateFile: an assist.json that is a FIFO, a symlink to
// /dev/zero, a huge sparse file or a directory is refused at once with an
// error naming it, even with assist_expose off: nothing blocks (a FIFO
// used to hold Run, and with it the add-on's stop, forever), nothing is
// read (/dev/zero used to exhaust memory), nothing is sent to Home
// Assistant and the file is left as it is.
func TestAssistHostileStateFile(t *testing.T) {
	for _, k := range safefiletest.Kinds() {
		t.Run(k.Name, func(t *testing.T) {
			fake := fakeha.New(testToken)
			defer fake.Close()
			seedLab(fake)
			path := filepath.Join(t.TempDir(), "assist.json")
			safefiletest.Put(t, k, path)
			c := startClient(t, fake, testOptions(fake.URL, testToken))
			if err := c.WaitConnected(waitCtx(t)); err != nil {
				t.Fatal(err)
			}
			a := NewAssist(c.Client, AssistOptions{Enabled: false, StateFile: path}, nil)
			errc := make(chan error, 1)
			go func() { errc <- a.Run(context.Background()) }()
			var err error
			select {
			case err = <-errc:
			case <-waitCtx(t).Done():
				t.Fatalf("Run has not returned: blocked on the %s at %s", k.Name, path)
			}
			if err == nil || !strings.Contains(err.Error(), k.Want) || !strings.Contains(err.Error(), path) {
				t.Fatalf("Run = %v, want an error naming %s with %q", err, path, k.Want)
			}
			if n := len(fake.Commands("")); n != 0 {
				t.Errorf("%d commands sent with a hostile state file", n)
			}
			safefiletest.Unchanged(t, k, path)
		})
	}
}

// TestAssistPending: a call whose outcome a crash left unknown is judged
// by what HA shows.
func TestAssistPending(t *testing.T) {
	fake := fakeha.New(testToken)
	defer fake.Close()
	seedLab(fake)
	// the expose call for phase happened, the one for plan did not; the
	// alias call for phase happened.
	fake.SetExposed("sensor.rezuscloud_lab_phase", AssistAssistant, true)
	if err := fake.SetAliases("sensor.rezuscloud_lab_phase", str("Lab cluster")); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "assist.json")
	st := `{"version":1,"entities":{
	  "rezuscloud_lab_phase":{"exposed":true,"expose_pending":true,"alias":"Lab cluster","alias_pending":true},
	  "rezuscloud_lab_plan":{"exposed":true,"expose_pending":true}}}`
	if err := os.WriteFile(path, []byte(st), 0o600); err != nil {
		t.Fatal(err)
	}
	c := startClient(t, fake, testOptions(fake.URL, testToken))
	r := startAssist(t, c.Client, false, path)
	if err := r.waitDone(t); err != nil {
		t.Fatal(err)
	}
	calls := exposeCalls(t, fake)
	if len(calls) != 1 || calls[0].ShouldExpose || !slices.Equal(calls[0].EntityIDs, []string{"sensor.rezuscloud_lab_phase"}) {
		t.Fatalf("calls = %+v, want phase withdrawn only", calls)
	}
	if got := aliasesOf(t, fake, "sensor.rezuscloud_lab_phase"); len(got) != 0 {
		t.Errorf("aliases = %v", got)
	}
}

func TestAssistDisabledLink(t *testing.T) {
	path := filepath.Join(t.TempDir(), "assist.json")
	if err := os.WriteFile(path, []byte(`{"version":1,"entities":{"x":{"exposed":true}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, enabled := range []bool{true, false} {
		a := NewAssist(New(Options{}, nil), AssistOptions{Enabled: enabled, StateFile: path}, nil)
		a.SetEntities(map[string]string{"x": ""})
		if err := a.Run(context.Background()); err != nil {
			t.Errorf("enabled=%v: %v", enabled, err)
		}
	}
	var nilAssist *Assist
	nilAssist.SetEntities(nil)
	if err := nilAssist.Run(context.Background()); err != nil {
		t.Error(err)
	}
}
