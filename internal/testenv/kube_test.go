package testenv

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFindKubeMissing(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("REZUSCLOUD_KUBE_BIN", dir)
	for _, set := range []string{"", "CI"} { // fails with and without $CI: never a silent skip
		t.Setenv("CI", set)
		r := &recorder{TB: t}
		if b := FindKube(r); b.APIServer != "" || !strings.Contains(r.fatal, "kube-apiserver not found; run make tools") || r.skipped != "" {
			t.Errorf("CI=%q: %+v fatal=%q skipped=%q", set, b, r.fatal, r.skipped)
		}
	}
	for _, name := range []string{"kube-apiserver", "kube-scheduler"} {
		os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"), 0o755)
	}
	r := &recorder{TB: t}
	if FindKube(r); !strings.Contains(r.fatal, filepath.Join(dir, "etcd")+" not found") {
		t.Errorf("without etcd: fatal=%q", r.fatal)
	}
	os.WriteFile(filepath.Join(dir, "etcd"), []byte("#!/bin/sh\n"), 0o755)
	r = &recorder{TB: t}
	if b := FindKube(r); r.fatal != "" || b.Etcd != filepath.Join(dir, "etcd") {
		t.Errorf("all there: %+v fatal=%q", b, r.fatal)
	}
}

// TestStartKube runs the real control plane: the admin credentials work,
// the version is the pinned one, and the API server stops and comes back
// on its port.
func TestStartKube(t *testing.T) {
	k := StartKube(t)
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(k.CA) {
		t.Fatalf("CA: %q", k.CA)
	}
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	get := func(path, token string) (*http.Response, error) {
		req, _ := http.NewRequest(http.MethodGet, k.URL+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		return c.Do(req)
	}
	resp, err := get("/version", k.Token)
	if err != nil {
		t.Fatal(err)
	}
	var v struct{ GitVersion string }
	json.NewDecoder(resp.Body).Decode(&v)
	resp.Body.Close()
	if v.GitVersion != KubeVersion {
		t.Errorf("version %q, want %q", v.GitVersion, KubeVersion)
	}
	if resp, err := get("/api/v1/namespaces/default", "wrong"); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("wrong token: %v %v", resp.Status, err)
	}
	for _, want := range []string{"server: " + k.URL, "certificate-authority-data: ", "token: " + k.Token} {
		if !strings.Contains(string(k.Kubeconfig), want) {
			t.Errorf("kubeconfig lacks %q:\n%s", want, k.Kubeconfig)
		}
	}
	k.StopAPIServer()
	if _, err := get("/version", k.Token); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("stopped API server answered: %v", err)
	}
	k.StartAPIServer()
	if resp, err := get("/readyz", k.Token); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("restarted API server: %v %v", resp, err)
	}
}
