// Package broker is the embedded MQTT broker of `rezuscloud demo`
// (mochi-mqtt): loopback only, anonymous, retained messages in memory. It
// lets a newcomer see rezuscloud work with nothing else installed.
package broker

import (
	"fmt"
	"io"
	"log/slog"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/auth"
	"github.com/mochi-mqtt/server/v2/listeners"
)

// Broker is a running embedded broker.
type Broker struct {
	srv *mqtt.Server
	tcp *listeners.TCP
}

// Start listens on 127.0.0.1:1883 when that port is free, else on a free
// loopback port (a broker may already run on 1883), and serves.
func Start() (*Broker, error) {
	var last error
	for _, addr := range []string{"127.0.0.1:1883", "127.0.0.1:0"} {
		b, err := start(addr)
		if err == nil {
			return b, nil
		}
		last = err
	}
	return nil, fmt.Errorf("embedded MQTT broker: %w", last)
}

func start(addr string) (*Broker, error) {
	srv := mqtt.New(&mqtt.Options{
		InlineClient: false,
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err := srv.AddHook(new(auth.AllowHook), nil); err != nil {
		return nil, err
	}
	tcp := listeners.NewTCP(listeners.Config{ID: "loopback", Address: addr})
	if err := srv.AddListener(tcp); err != nil {
		srv.Close()
		return nil, err
	}
	go srv.Serve() // returns at once; listeners run in their own goroutines
	return &Broker{srv: srv, tcp: tcp}, nil
}

// URL is the broker's address for clients, tcp://127.0.0.1:port.
func (b *Broker) URL() string { return "tcp://" + b.tcp.Address() }

// Close stops the broker.
func (b *Broker) Close() error { return b.srv.Close() }
