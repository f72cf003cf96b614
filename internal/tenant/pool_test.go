package tenant

import (
	"os"
	"strings"
	"testing"
	"time"
)

const goodPool = `provider = "metal"
talos_version = "v1.13.0"
kubernetes_version = "1.35.0"

[[node_groups]]
name = "cp"
role = "controlplane"
count = 1
  [[node_groups.machines]]
  address = "192.0.2.21"
  install_disk = "/dev/sda"

[[node_groups]]
name = "workers"
role = "worker"
count = 3
  [node_groups.pool]
  mode = "observe"   # off | observe | on
  max = 3
  watts = 60
  [[node_groups.machines]]
  address = "192.0.2.31"
  mac = "aa:bb:cc:dd:ee:31"
  install_disk = "/dev/sda"
  power_sensor = "sensor.rack_plug_1_power"
  [[node_groups.machines]]
  address = "192.0.2.32"
  install_disk = "/dev/sda"
  power = "switch.rack_plug_2"
  [[node_groups.machines]]
  address = "192.0.2.33"
  mac = "aa:bb:cc:dd:ee:33"
  install_disk = "/dev/sda"
`

func TestPoolDefaults(t *testing.T) {
	tn, err := Parse("dir/lab.toml", []byte(goodPool))
	if err != nil {
		t.Fatal(err)
	}
	c, ok := tn.PoolConfig("workers")
	if !ok {
		t.Fatal("no pool")
	}
	want := PoolConfig{Mode: PoolObserve, Min: 0, Max: 3, Watts: 60, SurplusDelay: 10 * time.Minute,
		PendingDelay: 60 * time.Second, MinOn: 30 * time.Minute, MinOff: 20 * time.Minute, Cooldown: 5 * time.Minute}
	if c.PriceCeiling != nil || c.Mode != want.Mode || c.Min != want.Min || c.Max != want.Max || c.Watts != want.Watts ||
		c.SurplusDelay != want.SurplusDelay || c.PendingDelay != want.PendingDelay || c.MinOn != want.MinOn ||
		c.MinOff != want.MinOff || c.Cooldown != want.Cooldown || c.CheapHours != 0 {
		t.Fatalf("config = %+v\nwant %+v", c, want)
	}
	if _, ok := tn.PoolConfig("cp"); ok {
		t.Error("cp has a pool")
	}
	if g := tn.PooledGroups(); len(g) != 1 || g[0] != "workers" {
		t.Errorf("pooled groups = %v", g)
	}
	if s := tn.Nodes()[1].Machine.PowerSensor; s != "sensor.rack_plug_1_power" {
		t.Errorf("power sensor = %q", s)
	}
	// every key set, and a cloud group's bound is its count bound
	src := strings.Replace(goodPool, "  max = 3\n", "  min = 1\n  max = 2\n  price_ceiling = -0.05\n  cheap_hours = 3\n"+
		"  surplus_delay = \"5m\"\n  pending_delay = \"30s\"\n  min_on = \"1h\"\n  min_off = \"0s\"\n  cooldown = \"2m\"\n", 1)
	tn, err = Parse("dir/lab.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	c, _ = tn.PoolConfig("workers")
	if c.Min != 1 || c.Max != 2 || c.PriceCeiling == nil || *c.PriceCeiling != -0.05 || c.CheapHours != 3 ||
		c.SurplusDelay != 5*time.Minute || c.PendingDelay != 30*time.Second || c.MinOn != time.Hour || c.MinOff != 0 || c.Cooldown != 2*time.Minute {
		t.Fatalf("config = %+v", c)
	}
	cloud := goodOpenStack + "[[node_groups]]\nname = \"w\"\nrole = \"worker\"\ncount = 0\nflavor = \"m1.small\"\n[node_groups.pool]\nwatts = 30\nmax = 40\n"
	tn, err = Parse("dir/os.toml", []byte(cloud))
	if err != nil {
		t.Fatal(err)
	}
	if lo, hi := tn.PoolBounds(tn.Group("w")); lo != 0 || hi != 100 {
		t.Errorf("cloud bounds %d..%d", lo, hi)
	}
}

// TestPoolRules breaks one pool rule at a time, like TestRules.
func TestPoolRules(t *testing.T) {
	tests := []struct{ name, old, new, field, msg string }{
		{"pool on control plane", "count = 1\n  [[node_groups.machines]]\n  address = \"192.0.2.21\"",
			"count = 1\n  [node_groups.pool]\n  watts = 60\n  [[node_groups.machines]]\n  address = \"192.0.2.21\"",
			"node_groups[0].pool", "control-plane group cannot have a pool"},
		{"bad mode", `mode = "observe"`, `mode = "auto"`, "node_groups[1].pool.mode", "not one of off, observe, on"},
		{"unknown pool key", `mode = "observe"`, `mode = "observe"` + "\n  maximum = 2", "node_groups[1].pool.maximum", "unknown key"},
		{"typo suggests", `mode = "observe"`, `mode = "observe"` + "\n  cooldwn = \"5m\"", "node_groups[1].pool.cooldwn", `did you mean "cooldown"?`},
		{"min over max", "max = 3", "max = 2\n  min = 3", "node_groups[1].pool.min", "more than max 2"},
		{"min over count", "max = 3", "min = 4", "node_groups[1].pool.min", "more than the group's count 3"},
		{"max over count", "max = 3", "max = 4", "node_groups[1].pool.max", "more than the group's count 3"},
		{"negative min", "max = 3", "max = 3\n  min = -1", "node_groups[1].pool.min", "must not be negative"},
		{"missing watts", "  watts = 60\n", "", "node_groups[1].pool.watts", "missing: set watts"},
		{"zero watts", "watts = 60", "watts = 0", "node_groups[1].pool.watts", "more than 0 W"},
		{"bad duration", "watts = 60", "watts = 60\n  min_on = \"30 minutes\"", "node_groups[1].pool.min_on", "not a duration"},
		{"negative duration", "watts = 60", "watts = 60\n  cooldown = \"-5m\"", "node_groups[1].pool.cooldown", "not a duration"},
		{"long duration", "watts = 60", "watts = 60\n  surplus_delay = \"25h\"", "node_groups[1].pool.surplus_delay", "not a duration"},
		{"duration not a string", "watts = 60", "watts = 60\n  pending_delay = 60", "node_groups[1].pool.pending_delay", ""},
		{"cheap hours", "watts = 60", "watts = 60\n  cheap_hours = 25", "node_groups[1].pool.cheap_hours", "out of range 0..24"},
		{"unswitchable machine", "  address = \"192.0.2.33\"\n  mac = \"aa:bb:cc:dd:ee:33\"\n", "  address = \"192.0.2.33\"\n",
			"node_groups[1].machines[2].power", "the pool cannot switch machine 192.0.2.33"},
		{"bad power sensor", `power_sensor = "sensor.rack_plug_1_power"`, `power_sensor = "switch.rack_plug_1"`,
			"node_groups[1].machines[0].power_sensor", "not a sensor entity id"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(goodPool, tc.old) {
				t.Fatalf("test bug: %q not in base", tc.old)
			}
			src := strings.Replace(goodPool, tc.old, tc.new, 1)
			_, err := Parse("dir/lab.toml", []byte(src))
			ps, ok := AsProblems(err)
			if !ok {
				t.Fatalf("want problems, got %v", err)
			}
			if len(ps) != 1 {
				t.Fatalf("want exactly 1 problem, got %d:\n%v", len(ps), ps)
			}
			p := ps[0]
			if p.Field != tc.field || !strings.Contains(p.Msg, tc.msg) {
				t.Fatalf("got %s\nwant field %q and message containing %q", p.Error(), tc.field, tc.msg)
			}
			if p.Line < 1 || p.Column < 1 {
				t.Errorf("problem not located: %s", p.Error())
			}
		})
	}
}

// TestPoolProblemLocated checks the file:line:col of a pool problem.
func TestPoolProblemLocated(t *testing.T) {
	src := strings.Replace(goodPool, `mode = "observe"`, `mode = "sometimes"`, 1)
	_, err := Parse("dir/lab.toml", []byte(src))
	if err == nil || !strings.HasPrefix(err.Error(), `dir/lab.toml:18:3: group "workers": pool.mode: "sometimes" is not one of`) {
		t.Fatalf("got %v", err)
	}
}

func TestSetPool(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "lab.toml", goodPool)
	s := &Store{Dir: dir}
	on, two := "on", 2
	tn, err := s.SetPool("lab", "workers", &on, nil, &two)
	if err != nil {
		t.Fatal(err)
	}
	if c, _ := tn.PoolConfig("workers"); c.Mode != PoolOn || c.Max != 2 || c.Min != 0 {
		t.Fatalf("config after set: %+v", c)
	}
	data, _ := os.ReadFile(s.Path("lab"))
	if !strings.Contains(string(data), `mode = "on"   # off | observe | on`) || !strings.Contains(string(data), "max = 2\n") {
		t.Fatalf("file not edited in place:\n%s", data)
	}
	// a key the file lacks is added into the pool table
	one := 1
	tn, err = s.SetPool("lab", "workers", nil, &one, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c, _ := tn.PoolConfig("workers"); c.Min != 1 || c.Max != 2 {
		t.Fatalf("config after min: %+v", c)
	}
	data, _ = os.ReadFile(s.Path("lab"))
	// refusals change nothing
	three, four, bad := 3, 4, "auto"
	for _, tc := range []struct {
		name     string
		group    string
		mode     *string
		min, max *int
		msg      string
	}{
		{"min over max", "workers", nil, &three, nil, "more than max 2"},
		{"max over count", "workers", nil, nil, &four, "more than the group's count 3"},
		{"bad mode", "workers", &bad, nil, nil, `mode "auto" is not one of`},
		{"no pool", "cp", &on, nil, nil, `group "cp" has no pool`},
		{"no group", "gpu", &on, nil, nil, `no group "gpu"`},
		{"nothing", "workers", nil, nil, nil, "nothing to change"},
	} {
		if _, err := s.SetPool("lab", tc.group, tc.mode, tc.min, tc.max); err == nil || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.msg)
		}
		if again, _ := os.ReadFile(s.Path("lab")); string(again) != string(data) {
			t.Fatalf("%s: refused change modified the file", tc.name)
		}
	}
	// an inline pool table cannot take a new key, and says so
	write(t, dir, "inline.toml", strings.Replace(goodPool, "  [node_groups.pool]\n  mode = \"observe\"   # off | observe | on\n  max = 3\n  watts = 60\n",
		"pool = {mode = \"observe\", watts = 60}\n", 1))
	if _, err := s.SetPool("inline", "workers", &on, nil, nil); err != nil {
		t.Fatalf("inline mode: %v", err)
	}
	if d, _ := os.ReadFile(s.Path("inline")); !strings.Contains(string(d), `pool = {mode = "on", watts = 60}`) {
		t.Fatalf("inline edit:\n%s", d)
	}
	if _, err := s.SetPool("inline", "workers", nil, &one, nil); err == nil || !strings.Contains(err.Error(), "inline table") {
		t.Fatalf("inline min: %v", err)
	}
}

// TestOnlyPoolsDiffer: a change of a pool table or a power sensor needs no
// apply; any other change does.
func TestOnlyPoolsDiffer(t *testing.T) {
	parse := func(src string) *Tenant {
		t.Helper()
		tn, err := Parse("lab.toml", []byte(src))
		if err != nil {
			t.Fatal(err)
		}
		return tn
	}
	base := parse(goodPool)
	for _, tc := range []struct {
		name, from, to string
		only           bool
	}{
		{"mode", `mode = "observe"`, `mode = "on"`, true},
		{"max", "max = 3", "max = 2", true},
		{"power sensor", "sensor.rack_plug_1_power", "sensor.rack_plug_9_power", true},
		{"comment", "# off | observe | on", "# changed", true},
		{"machine", "count = 1\n  [[node_groups.machines]]", "count = 1\n  [[node_groups.machines]]\n  mac = \"aa:bb:cc:dd:ee:21\"", false},
		{"power", "switch.rack_plug_2", "switch.rack_plug_7", false},
		{"version", `kubernetes_version = "1.35.0"`, `kubernetes_version = "1.35.1"`, false},
	} {
		if !strings.Contains(goodPool, tc.from) {
			t.Fatalf("%s: %q not in the file", tc.name, tc.from)
		}
		changed := parse(strings.Replace(goodPool, tc.from, tc.to, 1))
		if got := OnlyPoolsDiffer(base, changed); got != tc.only {
			t.Errorf("%s: OnlyPoolsDiffer = %v, want %v", tc.name, got, tc.only)
		}
	}
	if OnlyPoolsDiffer(base, nil) {
		t.Error("nil differs")
	}
}
