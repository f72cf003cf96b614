package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/cloudsim"
	"github.com/rezuscloud/rezuscloud/internal/hass/wsapi/fakeha"
	"github.com/rezuscloud/rezuscloud/internal/provider/openstack/simcloud"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
)

// roleOf is the bridge state's Role sensor document.
type roleOf struct {
	Role *struct {
		State    string   `json:"state"`
		Instance string   `json:"instance"`
		Standbys []string `json:"standbys"`
	} `json:"role"`
}

func (e *env) bridgeRole() (roleOf, bool) {
	var r roleOf
	m, ok := e.cap.lastMsg(base + "/bridge/state")
	if !ok || json.Unmarshal(m.Payload, &r) != nil || r.Role == nil {
		return r, false
	}
	return r, true
}

// TestE2ETwoInstances: two instances of the binary on one broker and one
// real PostgreSQL. The first leads; the second stands by without
// publishing anything. The leader's machine dies (SIGKILL of rezuscloud
// and its tofu) during a cloud apply on the stand-in: the standby leads and
// publishes the same devices, the tenant shows the apply interrupted, and
// Apply converges with no duplicate instance. The old leader, restarted,
// stands by; the Role sensor names the leader and the standbys.
func TestE2ETwoInstances(t *testing.T) {
	pg := testenv.StartPostgres(t)
	e, cloud, held, release := newHeldCloudEnv(t)
	e.appendConfig(sharedConfig(pg, "a"))
	cfgA, err := os.ReadFile(e.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	// b: the same configuration, another data folder and name
	dataB := filepath.Join(e.dir, "data-b")
	cfgB := strings.Replace(string(cfgA), fmt.Sprintf("data_dir    = %q", e.dataDir), fmt.Sprintf("data_dir    = %q", dataB), 1)
	cfgB = strings.Replace(cfgB, `instance = "a"`, `instance = "b"`, 1)
	pathB := filepath.Join(e.dir, "rezuscloud-b.toml")
	if err := os.WriteFile(pathB, []byte(cfgB), 0o600); err != nil {
		t.Fatal(err)
	}

	e.start()
	e.proc.waitLog(startTimeout, "leading the state store")
	a := e.proc
	b := startProc(t, "rezuscloud b", nil, "run", "--config", pathB)
	b.waitLog(startTimeout, "standing by: another instance leads")
	e.cap.wait(a, startTimeout, "the Role sensor names a as leader and b as standby", func() bool {
		r, ok := e.bridgeRole()
		return ok && r.Role.State == "leader" && r.Role.Instance == "a" && strings.Join(r.Role.Standbys, ",") == "b"
	})
	if strings.Contains(b.stderr.String(), "connected to MQTT") {
		t.Fatal("the standby connected to MQTT")
	}

	e.applyUntilHeld(held)
	// the leader's machine dies: rezuscloud and its tofu (own process groups)
	tofus := childrenNamed(a.pid(), "tofu")
	if len(tofus) == 0 {
		t.Fatal("no tofu runs under the leader while it applies")
	}
	mark := e.cap.mark()
	killed := time.Now()
	_ = syscall.Kill(-a.pid(), syscall.SIGKILL)
	for _, pid := range tofus {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	}
	<-a.done
	e.cap.wait(b, startTimeout, "b leads and publishes the bridge online", func() bool {
		r, ok := e.bridgeRole()
		on := false
		for _, m := range e.cap.since(mark) {
			if m.Topic == base+"/bridge/availability" {
				on = string(m.Payload) == "online"
			}
		}
		return on && ok && r.Role.Instance == "b"
	})
	failover := time.Since(killed)
	t.Logf("failover: the standby published the bridge online %v after the leader died", failover.Round(time.Millisecond))
	close(release)
	e.proc = b
	e.waitTenant("the apply shown interrupted", func(d tenantDoc) bool {
		return d.LastOperation != nil && d.LastOperation.Result == "failed" && strings.Contains(d.LastOperation.Message, "interrupted")
	})
	e.checkNoDeviceCleared(mark, "lab-cp-1", "lab-workers-1", "lab-workers-2")

	e.convergeOnce(cloud)

	// the old leader comes back: it stands by, and the Role sensor says so
	a2 := startProc(t, "rezuscloud a again", nil, "run", "--config", e.cfgPath)
	a2.waitLog(startTimeout, "standing by: another instance leads")
	e.cap.wait(b, startTimeout, "the Role sensor names b as leader and a as standby", func() bool {
		r, ok := e.bridgeRole()
		return ok && r.Role.Instance == "b" && strings.Join(r.Role.Standbys, ",") == "a"
	})
	if code, _ := a2.terminate(stopTimeout); code != 0 {
		t.Errorf("the standby exited with code %d", code)
	}
	e.stop()
}

// applyUntilHeld presses Apply and waits until the stand-in holds the
// first instance's create.
func (e *env) applyUntilHeld(held <-chan struct{}) {
	e.tb.Helper()
	mark := e.cap.mark()
	e.publish(base+"/lab/apply", "PRESS")
	select {
	case <-held:
	case <-time.After(phaseTimeout):
		e.tb.Fatalf("the instances' apply never reached the cloud; events %v", e.opsBetween(mark, e.cap.mark()))
	}
}

// convergeOnce presses Apply, waits for the cluster to run and checks the
// cloud holds each instance and the floating IP once.
func (e *env) convergeOnce(cloud *cloudsim.Cloud) {
	e.tb.Helper()
	mark := e.cap.mark()
	e.publish(base+"/lab/apply", "PRESS")
	e.mustSucceed(mark, "apply")
	e.waitTenant("running", func(d tenantDoc) bool { return d.Phase == "running" && d.NodesReady == 3 })
	inv := cloud.Inventory()
	e.tb.Logf("cloud after converging: %+v", inv)
	if inv.Servers != 3 || inv.FloatingIPs != 1 {
		e.tb.Fatalf("after converging (a duplicate or a leak): %+v", inv)
	}
}

// newHeldCloudEnv is newCloudEnv whose stand-in holds the first instance's
// create (before the cloud does it) and everything else the tofu process
// that asked for it asks, until release is closed; then it refuses them
// (that tofu is gone or stopping). held is closed when it holds.
func newHeldCloudEnv(t *testing.T) (e *env, cloud *cloudsim.Cloud, held, release chan struct{}) {
	t.Helper()
	held, release = make(chan struct{}), make(chan struct{})
	var once sync.Once
	var mu sync.Mutex
	var heldToken string
	e, cloud = newCloudEnv(t, simcloud.Hooks{Request: func(method, path, token string) bool {
		mu.Lock()
		if method == "POST" && path == "/compute/v2.1/servers" {
			once.Do(func() { heldToken = token; close(held) })
		}
		hold := heldToken != "" && token == heldToken
		mu.Unlock()
		if !hold {
			return true
		}
		<-release
		return false
	}})
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	return e, cloud, held, release
}

// sharedConfig is the [state] table of an instance named instance on pg.
func sharedConfig(pg *testenv.Postgres, instance string) string {
	return fmt.Sprintf("[state]\nurl      = %q\npassword = %q\ninstance = %q\n", pg.URL, pg.Password, instance)
}

// TestE2ESharedStoreLost: PostgreSQL stops in the middle of a cloud apply.
// The leadership ends: tofu is interrupted at once, the bridge goes
// offline; the state upload of the interrupted tofu is retried until the
// database is back. Then the instance leads again (a new epoch), the apply
// shows failed, and Apply converges without a duplicate.
func TestE2ESharedStoreLost(t *testing.T) {
	pg := testenv.StartPostgres(t)
	e, cloud, held, release := newHeldCloudEnv(t)
	e.appendConfig(sharedConfig(pg, "a"))
	e.start()
	e.proc.waitLog(startTimeout, "leading the state store")
	e.applyUntilHeld(held)
	mark := e.cap.mark()
	pg.Stop()
	e.proc.waitLog(startTimeout, "interrupting tofu")
	close(release) // the held create is refused: tofu stops and uploads its state
	e.proc.waitLog(startTimeout, `"method": "POST", "state": "lab", "status": 500`)
	pg.Start()
	e.proc.waitLog(phaseTimeout, "lost the leadership of the state store")
	e.cap.wait(e.proc, phaseTimeout, "offline, then leading again and online", func() bool {
		var off, on bool
		for _, m := range e.cap.since(mark) {
			if m.Topic == base+"/bridge/availability" {
				off = off || string(m.Payload) == "offline"
				on = off && string(m.Payload) == "online"
			}
		}
		return on && strings.Count(e.proc.stderr.String(), "leading the state store") >= 2
	})
	log := e.proc.stderr.String()
	if !strings.Contains(log, `"epoch": 2`) {
		t.Error("the second leadership is not epoch 2")
	}
	// the interrupted tofu's state upload met the outage and was retried
	i := strings.Index(log, `"method": "POST", "state": "lab", "status": 500`)
	if !strings.Contains(log[i:], `"method": "POST", "state": "lab", "status": 200`) {
		t.Error("the interrupted tofu's state upload was not retried once the database was back")
	}
	e.waitTenant("the apply shown failed", func(d tenantDoc) bool {
		return d.LastOperation != nil && d.LastOperation.Name == "apply" && d.LastOperation.Result == "failed"
	})
	e.convergeOnce(cloud)
	e.stop()
}

// TestE2ESharedStoreUnreachable: PostgreSQL is down when rezuscloud
// starts. It retries (logged), publishes nothing on MQTT (another instance
// may lead), and Home Assistant gets a persistent notification that says
// why; once the server is up it leads, comes online and takes the
// notification back. A wrong password stops the start with a notification
// that names it, and without the password in it.
func TestE2ESharedStoreUnreachable(t *testing.T) {
	pg := testenv.StartPostgres(t)
	pg.Stop()
	const token = "store-ha-token"
	ha := fakeha.New(token)
	t.Cleanup(ha.Close)
	e := newEnv(t, envOptions{tenant: "lab", machines: 1, delays: quickDelays})
	e.appendConfig(fmt.Sprintf("[homeassistant]\nurl   = %q\ntoken = %q\n", ha.URL, token) + sharedConfig(pg, "a"))
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	e.proc = startProc(t, "rezuscloud run", nil, "run", "--config", e.cfgPath)
	e.proc.waitLog(startTimeout, "the state store cannot be reached; trying again")
	if err := ha.WaitNotifications(ctx, func(ns map[string]fakeha.Notification) bool {
		n, ok := ns[storeNotificationID]
		return ok && strings.Contains(n.Message, "cannot reach the server")
	}); err != nil {
		t.Fatalf("no notification that the store cannot be reached: %v (%v)", err, ha.Notifications())
	}
	for _, m := range e.cap.all() {
		if strings.HasPrefix(m.Topic, base+"/") || strings.HasPrefix(m.Topic, prefix+"/") {
			t.Fatalf("published on MQTT before it leads: %s", m.Topic)
		}
	}
	pg.Start()
	e.cap.wait(e.proc, startTimeout, "online once the store is up", func() bool {
		m, ok := e.cap.lastMsg(base + "/bridge/availability")
		return ok && string(m.Payload) == "online"
	})
	if err := ha.WaitNotifications(ctx, func(ns map[string]fakeha.Notification) bool {
		_, ok := ns[storeNotificationID]
		return !ok
	}); err != nil {
		t.Fatalf("the notification stayed after the store opened: %v", err)
	}
	e.stop()

	// a wrong password: no retry, the start fails and says so
	cfg, err := os.ReadFile(e.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	wrong := "wrong-" + pg.Password
	if err := os.WriteFile(e.cfgPath, []byte(strings.Replace(string(cfg), fmt.Sprintf("password = %q", pg.Password), fmt.Sprintf("password = %q", wrong), 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startProc(t, "rezuscloud run (wrong password)", nil, "run", "--config", e.cfgPath)
	select {
	case <-p.done:
	case <-time.After(startTimeout):
		t.Fatal("a wrong password did not stop the start")
	}
	if p.code == 0 || !strings.Contains(p.stderr.String(), "refused the password") {
		t.Fatalf("exit %d; log:\n%s", p.code, p.stderr.String())
	}
	n := ha.Notifications()[storeNotificationID]
	if !strings.Contains(n.Message, "refused the password") || strings.Contains(n.Message, wrong) || strings.Contains(p.stderr.String(), wrong) {
		t.Fatalf("the wrong password's notification %q (or the log) does not name the refusal, or shows the password", n.Message)
	}
}
