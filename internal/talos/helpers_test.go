package talos_test

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"

	"github.com/rezuscloud/rezuscloud/internal/talos"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

var (
	bundleOnce sync.Once
	bundle     *secrets.Bundle
	bundleErr  error
)

// sharedBundle is one secrets bundle per test binary (NewBundle takes up to
// a second). Tests that need clusters of their own use their own simnode
// World.
func sharedBundle(tb testing.TB) *secrets.Bundle {
	tb.Helper()
	bundleOnce.Do(func() { bundle, bundleErr = talos.NewSecrets("v1.13.0") })
	if bundleErr != nil {
		tb.Fatal(bundleErr)
	}
	return bundle
}

var hostSeq atomic.Uint32

// loopbackHosts returns n fresh loopback addresses 127.x.y.z, distinct per
// test and per process, for nodes to listen on.
func loopbackHosts(n int) []string {
	base := uint32(os.Getpid()%200+20) << 16
	out := make([]string, n)
	for i := range out {
		v := base + hostSeq.Add(1)
		for v&0xff == 0 { // no .0 host
			v = base + hostSeq.Add(1)
		}
		out[i] = fmt.Sprintf("127.%d.%d.%d", v>>16&0xff, v>>8&0xff, v&0xff)
	}
	return out
}

// metalTenant declares cps control planes and workers workers on hosts.
func metalTenant(name string, hosts []string, cps, workers int) *tenant.Tenant {
	t := &tenant.Tenant{
		Name:              name,
		Provider:          tenant.ProviderMetal,
		TalosVersion:      "v1.13.0",
		KubernetesVersion: "1.35.0",
		ConfigPatches: []string{
			`machine: {kubelet: {extraArgs: {rotate-server-certificates: "true"}}}`,
			"cluster:\n  allowSchedulingOnControlPlanes: true\n",
		},
	}
	cp := tenant.NodeGroup{Name: "cp", Role: tenant.RoleControlPlane, Count: cps}
	wk := tenant.NodeGroup{Name: "workers", Role: tenant.RoleWorker, Count: workers}
	for i, h := range hosts {
		m := tenant.Machine{Address: h, InstallDisk: "/dev/nvme0n1"}
		if i < cps {
			cp.Machines = append(cp.Machines, m)
		} else {
			wk.Machines = append(wk.Machines, m)
		}
	}
	t.NodeGroups = []tenant.NodeGroup{cp}
	if workers > 0 {
		t.NodeGroups = append(t.NodeGroups, wk)
	}
	return t
}
