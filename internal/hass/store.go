package hass

import (
	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/eclipse/paho.mqtt.golang/packets"
)

// copyStore is paho's memory store, except that it keeps its own copy of a
// PUBLISH packet (taken in Put, before paho hands the packet to its writer)
// and hands out copies. On reconnect paho's resume() sets the DUP flag on
// the packet it gets from the store while a Publish call that was blocked
// across the reconnect may be writing the very same packet: a data race
// (eclipse-paho/paho.mqtt.golang#703). With copies, each goroutine has its
// own packet; the payload bytes are shared and only read.
type copyStore struct {
	*mqtt.MemoryStore
}

func newCopyStore() mqtt.Store { return copyStore{mqtt.NewMemoryStore()} }

func (s copyStore) Put(key string, p packets.ControlPacket) {
	if pub, ok := p.(*packets.PublishPacket); ok {
		cp := *pub
		p = &cp
	}
	s.MemoryStore.Put(key, p)
}

func (s copyStore) Get(key string) packets.ControlPacket {
	p := s.MemoryStore.Get(key)
	if pub, ok := p.(*packets.PublishPacket); ok {
		cp := *pub
		return &cp
	}
	return p
}
