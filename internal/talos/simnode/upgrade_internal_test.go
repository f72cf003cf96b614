package simnode

import "testing"

func TestInstallerImage(t *testing.T) {
	for _, tt := range []struct {
		ref, version, schematic string
		ok                      bool
	}{
		{"ghcr.io/siderolabs/installer:v1.13.1", "v1.13.1", "", true},
		{"factory.talos.dev/installer/abc123:v1.13.1", "v1.13.1", "abc123", true},
		{"factory.talos.dev/metal-installer-secureboot/abc123:v1.13.0@sha256:00", "v1.13.0", "abc123", true},
		{"localhost:5000/installer", "", "", false},
		{"ghcr.io/siderolabs/installer:latest", "", "", false},
	} {
		in, err := installerImage(tt.ref)
		if (err == nil) != tt.ok || in.version != tt.version || in.schematic != tt.schematic {
			t.Errorf("installerImage(%q) = %+v, %v", tt.ref, in, err)
		}
	}
}
