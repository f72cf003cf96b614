package hass

import (
	"context"
	"crypto/tls"
	"fmt"
	"strings"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/rezuscloud/rezuscloud/internal/tenant"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
)

func TestTLSWithPassword(t *testing.T) {
	m := testenv.StartMosquitto(t, testenv.MosquittoOptions{Username: "addon", Password: "s3cret-pw", TLS: true})
	opts := fastOptions(m.TLSURL)
	opts.Username, opts.Password = "addon", "s3cret-pw"
	opts.TLSConfig = &tls.Config{RootCAs: m.RootCAs, MinVersion: tls.VersionTLS12}
	b := startBridge(t, opts, newFakeCmd(), []*tenant.Tenant{labTenant()})
	_ = b

	got := make(chan string, 10)
	c := mqtt.NewClient(mqtt.NewClientOptions().AddBroker(m.TLSURL).SetClientID(fmt.Sprint("tls-obs-", time.Now().UnixNano())).
		SetUsername("addon").SetPassword("s3cret-pw").SetTLSConfig(&tls.Config{RootCAs: m.RootCAs}))
	if tok := c.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("observer: %v", tok.Error())
	}
	defer c.Disconnect(50)
	c.Subscribe("homeassistant/device/rezuscloud_lab/config", 1, func(_ mqtt.Client, mm mqtt.Message) { got <- string(mm.Payload()) })
	select {
	case p := <-got:
		if strings.Contains(p, "s3cret-pw") {
			t.Error("password on MQTT")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no discovery over TLS")
	}

	// Wrong password: Start fails within ConnectTimeout, and says so
	// without the password.
	bad := fastOptions(m.TLSURL)
	bad.Username, bad.Password = "addon", "wrong-pw"
	bad.ClientID = "other-client"
	bad.ConnectTimeout = time.Second
	bad.TLSConfig = &tls.Config{RootCAs: m.RootCAs}
	err := New(bad, newFakeCmd(), nil).Start(context.Background())
	if err == nil || strings.Contains(err.Error(), "wrong-pw") || !strings.Contains(err.Error(), "not Authorized") {
		t.Fatalf("bad password: %v", err)
	}
	// Untrusted certificate (system roots only): refused.
	untrusted := fastOptions(m.TLSURL)
	untrusted.ClientID = "third-client"
	untrusted.Username, untrusted.Password = "addon", "s3cret-pw"
	untrusted.ConnectTimeout = time.Second
	if err := New(untrusted, newFakeCmd(), nil).Start(context.Background()); err == nil {
		t.Fatal("self-signed broker accepted with system roots")
	}
}

func TestRedactURL(t *testing.T) {
	if s := redactURL("tcp://user:pw@host:1883"); strings.Contains(s, "pw") {
		t.Error(s)
	}
}

func TestStartWithoutBrokerFails(t *testing.T) {
	o := fastOptions("tcp://127.0.0.1:1")
	o.ConnectTimeout = 700 * time.Millisecond
	start := time.Now()
	err := New(o, newFakeCmd(), nil).Start(context.Background())
	if err == nil || time.Since(start) > 3*time.Second {
		t.Fatalf("err %v after %v", err, time.Since(start))
	}
	t.Log(err)
}
