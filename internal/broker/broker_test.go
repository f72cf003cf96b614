package broker

import (
	"strings"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
)

// TestRetainedRoundTrip checks the embedded broker with a real MQTT client:
// a retained message published by one client reaches a later subscriber.
func TestRetainedRoundTrip(t *testing.T) {
	b, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if !strings.HasPrefix(b.URL(), "tcp://127.0.0.1:") {
		t.Fatalf("URL %s", b.URL())
	}
	// a second broker cannot take the same port and picks another
	b2, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	if b2.URL() == b.URL() {
		t.Fatalf("both brokers on %s", b.URL())
	}

	connect := func(id string) paho.Client {
		c := paho.NewClient(paho.NewClientOptions().AddBroker(b.URL()).SetClientID(id))
		if tok := c.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
			t.Fatalf("connect: %v", tok.Error())
		}
		return c
	}
	pub := connect("pub")
	defer pub.Disconnect(0)
	if tok := pub.Publish("demo/state", 1, true, `{"phase":"absent"}`); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("publish: %v", tok.Error())
	}
	sub := connect("sub")
	defer sub.Disconnect(0)
	got := make(chan string, 1)
	sub.Subscribe("demo/#", 1, func(_ paho.Client, m paho.Message) {
		if m.Retained() {
			got <- string(m.Payload())
		}
	})
	select {
	case p := <-got:
		if p != `{"phase":"absent"}` {
			t.Fatalf("payload %q", p)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("retained message not delivered")
	}
}
