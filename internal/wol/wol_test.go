package wol

import (
	"bytes"
	"context"
	"net"
	"testing"
	"time"
)

func TestSendReachesListener(t *testing.T) {
	l, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := Send(context.Background(), "aa:bb:cc:dd:ee:31", l.LocalAddr().String()); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 200)
	l.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, _, err := l.ReadFrom(buf)
	if err != nil {
		t.Fatal(err)
	}
	got := buf[:n]
	if n != 102 || !bytes.Equal(got[:6], bytes.Repeat([]byte{0xff}, 6)) {
		t.Fatalf("packet % x", got)
	}
	mac := []byte{0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0x31}
	for i := 0; i < 16; i++ {
		if !bytes.Equal(got[6+6*i:12+6*i], mac) {
			t.Fatalf("repetition %d: % x", i, got[6+6*i:12+6*i])
		}
	}
}

func TestBadMAC(t *testing.T) {
	for _, mac := range []string{"", "zz:bb:cc:dd:ee:ff", "00:00:5e:00:53:01:02:03"} {
		if err := Send(context.Background(), mac, "127.0.0.1:9"); err == nil {
			t.Errorf("%q accepted", mac)
		}
	}
}
