package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/rezuscloud/rezuscloud/internal/config"
	"github.com/rezuscloud/rezuscloud/internal/config/supervisortest"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
)

// TestAddonFirstStart is a user's first hour in add-on mode, against a
// stand-in Supervisor (internal/config/supervisortest) and a real
// mosquitto: an install updated from 0.1.0 whose options the user had
// saved flat. The first start moves them into their sections (the base
// topic too, so the devices keep theirs) and saves them back, finds the
// broker through the Supervisor's MQTT service, writes the example tenant,
// generates the state passphrase and hands it over (a 0600 copy and the
// bridge's Problem, never the passphrase itself on MQTT or in the log),
// and gives every device its Visit link. After the user put the passphrase
// into the option, the next start removes the copy and the Problem.
func TestAddonFirstStart(t *testing.T) {
	tofuBin, _ := testenv.Tofu(t)
	broker := testenv.StartMosquitto(t)
	sup := supervisortest.New(t, "../../config.yaml", map[string]any{
		"log_level": "info", "tenants_dir": "/config/tenants", "parallel_applies": 2,
		"discovery_prefix": "homeassistant", "base_topic": "rzfirst", "discovery_cidrs": []any{},
		"discovery_interval": "5m", "assist_expose": false,
	})
	sup.SetMQTT("127.0.0.1", broker.Port, "addons", "mqtt-pw-from-the-supervisor")
	client := config.Supervisor{URL: sup.URL(), Token: supervisortest.Token, Client: sup.Client()}
	dir := t.TempDir()

	// what the add-on sees on MQTT
	var mu sync.Mutex
	seen := map[string]string{}
	c := mqttClient(t, broker.URL)
	tok := c.Subscribe("#", 0, func(_ mqtt.Client, m mqtt.Message) {
		mu.Lock()
		defer mu.Unlock()
		seen[m.Topic()] = string(m.Payload())
	})
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	get := func(topic string) string {
		mu.Lock()
		defer mu.Unlock()
		return seen[topic]
	}
	type bridgeDoc struct {
		Problem        bool   `json:"problem"`
		ProblemMessage string `json:"problem_message"`
	}
	bridge := func() bridgeDoc {
		var d bridgeDoc
		_ = json.Unmarshal([]byte(get("rzfirst/bridge/state")), &d)
		return d
	}

	start := func() (config.Config, *syncWriter, func()) {
		t.Helper()
		cfg, err := config.LoadAddon(context.Background(), sup.Start(), client)
		if err != nil {
			t.Fatal(err)
		}
		// the container's /data and /config are folders of the test
		cfg.DataDir, cfg.ConfigDir = filepath.Join(dir, "data"), filepath.Join(dir, "config")
		cfg.TenantsDir = filepath.Join(cfg.ConfigDir, "tenants")
		cfg.Tofu.Binary = tofuBin
		// no WebSocket link: ws://supervisor would be a DNS lookup off loopback
		cfg.HomeAssistant = config.HomeAssistant{}
		ctx, cancel := context.WithCancel(context.Background())
		logs := &syncWriter{}
		done := make(chan error, 1)
		go func() { done <- serve(ctx, cfg, logs, serveHooks{}) }()
		return cfg, logs, func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("serve: %v", err)
				}
			case <-time.After(time.Minute):
				t.Error("serve did not stop")
			}
			if t.Failed() {
				t.Logf("log:\n%s", logs.String())
			}
		}
	}

	cfg, logs, stop := start()
	if cfg.MQTT.BaseTopic != "rzfirst" || !cfg.Migration.Saved || cfg.MQTT.Password.Reveal() != "mqtt-pw-from-the-supervisor" {
		t.Fatalf("first start: base topic %q, migration %+v", cfg.MQTT.BaseTopic, cfg.Migration)
	}
	testenv.WaitFor(t, 30*time.Second, "the bridge's Problem about the passphrase", func() bool {
		return bridge().Problem && strings.Contains(bridge().ProblemMessage, config.PassphraseCopy)
	})
	pass, err := os.ReadFile(filepath.Join(cfg.DataDir, config.PassphraseFile))
	if err != nil {
		t.Fatal(err)
	}
	secret := strings.TrimSpace(string(pass))
	cp := filepath.Join(cfg.ConfigDir, config.PassphraseCopy)
	if b, err := os.ReadFile(cp); err != nil || strings.TrimSpace(string(b)) != secret {
		t.Fatalf("the copy for the user: %v", err)
	}
	if fi, _ := os.Stat(cp); fi.Mode().Perm() != 0o600 {
		t.Errorf("the copy is %v, want 0600", fi.Mode().Perm())
	}
	if _, err := os.Stat(filepath.Join(cfg.TenantsDir, tenant.ExampleFile)); err != nil {
		t.Errorf("no example tenant: %v", err)
	}
	var disc struct {
		Device map[string]any `json:"device"`
	}
	testenv.WaitFor(t, 30*time.Second, "the bridge's discovery", func() bool {
		return json.Unmarshal([]byte(get("homeassistant/device/rzfirst_bridge/config")), &disc) == nil
	})
	if u := disc.Device["configuration_url"]; u != "homeassistant://config/app/a0d7b954_rezuscloud/info" {
		t.Errorf("configuration_url %v", u)
	}
	if p := sup.Persist(); p["base_topic"] != nil || p["mqtt"].(map[string]any)["base_topic"] != "rzfirst" {
		t.Errorf("the Supervisor keeps %v", p)
	}
	stop()
	firstLog := logs.String()
	if !strings.Contains(logs.String(), "moved from the flat layout") || !strings.Contains(logs.String(), "base_topic → mqtt.base_topic") {
		t.Errorf("the move is not logged:\n%s", logs.String())
	}

	// the user copies the passphrase into the option
	p := sup.Persist()
	p["state"] = map[string]any{"passphrase": secret}
	sup.SetPersist(p)
	cfg, logs, stop = start()
	testenv.WaitFor(t, 30*time.Second, "the Problem cleared", func() bool {
		return get("rzfirst/bridge/state") != "" && !bridge().Problem
	})
	if _, err := os.Stat(cp); !os.IsNotExist(err) {
		t.Errorf("the copy is still there: %v", err)
	}
	if len(cfg.Migration.Moved) != 0 || sup.Posts() != 1 {
		t.Errorf("second start migrated again: %+v (%d saves)", cfg.Migration, sup.Posts())
	}
	stop()

	mu.Lock()
	for topic, payload := range seen {
		if strings.Contains(payload, secret) {
			t.Errorf("the passphrase is on MQTT (%s)", topic)
		}
	}
	mu.Unlock()
	for _, l := range []string{firstLog, logs.String()} {
		if strings.Contains(l, secret) || strings.Contains(l, "mqtt-pw-from-the-supervisor") {
			t.Error("a secret reached the log")
		}
	}
}
