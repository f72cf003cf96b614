package talos

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"testing"
)

func TestImageVersion(t *testing.T) {
	for _, tt := range []struct{ ref, want string }{
		{"registry.k8s.io/kube-apiserver:v1.35.0", "1.35.0"},
		{"ghcr.io/siderolabs/kubelet:v1.36.1", "1.36.1"},
		{"registry.k8s.io/kube-scheduler:v1.35.0@sha256:0123", "1.35.0"},
		{"localhost:5000/kube-apiserver:v1.34.2", "1.34.2"},
		{"localhost:5000/kube-apiserver", ""},
		{"kube-apiserver:", ""},
		{"", ""},
	} {
		if got := imageVersion(tt.ref); got != tt.want {
			t.Errorf("imageVersion(%q) = %q, want %q", tt.ref, got, tt.want)
		}
	}
}

// The verifier checks size and trailer whatever the chunking of the stream.
func TestSnapshotVerifier(t *testing.T) {
	db := bytes.Repeat([]byte("etcd-page"), 2048)[:512*7]
	sum := sha256.Sum256(db)
	good := append(append([]byte(nil), db...), sum[:]...)
	bad := append([]byte(nil), good...)
	bad[100] ^= 1
	for _, tt := range []struct {
		name    string
		data    []byte
		chunks  []int
		wantErr bool
	}{
		{"whole", good, []int{len(good)}, false},
		{"small chunks", good, []int{1, 5, 31, 32, 33, 7}, false},
		{"trailer split", good, []int{len(good) - 20, 3, 17}, false},
		{"flipped bit", bad, []int{1000}, true},
		{"no trailer", db, []int{512}, true},
		{"boundary cut", good[:512*3+32], []int{64}, true},
		{"empty", nil, []int{1}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			v := newSnapshotVerifier(&out)
			rest := tt.data
			for i := 0; len(rest) > 0; i++ {
				k := min(tt.chunks[i%len(tt.chunks)], len(rest))
				if _, err := v.Write(rest[:k]); err != nil {
					t.Fatal(err)
				}
				rest = rest[k:]
			}
			err := v.check()
			if (err != nil) != tt.wantErr || (err != nil && !errors.Is(err, ErrSnapshotTruncated)) {
				t.Errorf("check: %v, want error %v", err, tt.wantErr)
			}
			if !bytes.Equal(out.Bytes(), tt.data) || v.n != int64(len(tt.data)) {
				t.Error("the verifier changed the stream")
			}
		})
	}
}
