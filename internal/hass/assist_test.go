package hass

import (
	"encoding/json"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

func TestAssistEntities(t *testing.T) {
	gpu := cloudTenant("prod", 2)
	gpu.DisplayName = "Production"
	gpu.NodeGroups = append(gpu.NodeGroups, tenant.NodeGroup{Name: "gpu-pool", Role: tenant.RoleWorker, Count: 1})
	tests := []struct {
		name string
		base string
		ts   []*tenant.Tenant
		want map[string]string
	}{
		{"lab", "", []*tenant.Tenant{labTenant()}, map[string]string{
			"rezuscloud_lab_phase": "Lab cluster", "rezuscloud_lab_nodes_ready": "", "rezuscloud_lab_problem": "",
			"rezuscloud_lab_progress": "", "rezuscloud_lab_apply": "", "rezuscloud_lab_plan": "",
			"rezuscloud_lab_workers_count": "Lab workers",
		}},
		{"two worker groups, other base", "rc", []*tenant.Tenant{gpu}, map[string]string{
			"rc_prod_phase": "Production cluster", "rc_prod_nodes_ready": "", "rc_prod_problem": "",
			"rc_prod_progress": "", "rc_prod_apply": "", "rc_prod_plan": "",
			"rc_prod_workers_count": "Production workers", "rc_prod_gpu_pool_count": "Production gpu pool workers",
		}},
		{"name with cluster", "", []*tenant.Tenant{{Name: "home", DisplayName: "Home cluster",
			NodeGroups: []tenant.NodeGroup{{Name: "cp", Role: tenant.RoleControlPlane, Count: 1}}}}, map[string]string{
			"rezuscloud_home_phase": "Home cluster", "rezuscloud_home_nodes_ready": "", "rezuscloud_home_problem": "",
			"rezuscloud_home_progress": "", "rezuscloud_home_apply": "", "rezuscloud_home_plan": "",
		}},
		{"none", "", nil, map[string]string{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := AssistEntities(tc.base, tc.ts)
			if !maps.Equal(got, tc.want) {
				t.Errorf("AssistEntities =\n %v\nwant\n %v", got, tc.want)
			}
			// Every id is one the discovery payload carries, and none is
			// destructive.
			base := tc.base
			if base == "" {
				base = "rezuscloud"
			}
			b := &Bridge{topics: topics{base: base, prefix: "homeassistant"}}
			published := map[string]string{} // unique id -> platform
			for _, tn := range tc.ts {
				var d struct {
					Components map[string]struct {
						UniqueID string `json:"unique_id"`
						Platform string `json:"platform"`
					} `json:"components"`
				}
				if err := json.Unmarshal(b.discoveryPayload(kindTenant, ref{tenant: tn.Name}, tn, nil), &d); err != nil {
					t.Fatal(err)
				}
				for _, c := range d.Components {
					published[c.UniqueID] = c.Platform
				}
			}
			for uid := range got {
				p, ok := published[uid]
				if !ok {
					t.Errorf("%s is not in the discovery payload", uid)
				}
				if !slices.Contains([]string{"sensor", "binary_sensor", "button", "number"}, p) {
					t.Errorf("%s: platform %q", uid, p)
				}
			}
		})
	}
	for _, k := range assistKeys {
		if tenantEntity(k) == nil {
			t.Errorf("assist key %s has no entity row", k)
		}
		if slices.Contains([]string{"destroy", "destroy_armed", "cancel", "auto_apply", "reboot"}, k) {
			t.Errorf("destructive or config entity %s offered to Assist", k)
		}
	}
}

// TestSummaryInStateDocument: the tenant state document carries the spoken
// summary the phase sensor shows as an attribute, with the spec's Talos
// version when the status has none.
func TestSummaryInStateDocument(t *testing.T) {
	failed := tenant.Status{Phase: tenant.PhaseFailed, Problem: true,
		LastOperation: &tenant.OperationResult{Name: "apply", Result: tenant.ResultFailed, Message: "quota exceeded"}}
	tests := []struct {
		name string
		st   *tenant.Status
		want string
	}{
		{"no status yet", nil, "not provisioned yet"},
		{"running", &tenant.Status{Phase: tenant.PhaseRunning, NodesReady: 3, NodesTotal: 3}, "3 of 3 nodes ready, running Talos v1.13.0"},
		{"failed", &failed, "apply failed: quota exceeded"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := &Bridge{topics: topics{base: "rezuscloud", prefix: "homeassistant"}, views: map[string]tenant.View{},
				armed: map[string]*time.Timer{}}
			v := viewOf(labTenant())
			if tc.st != nil {
				v.Status = statusOf(v.Spec, *tc.st)
			}
			b.views["lab"] = v
			var d struct {
				Summary *string `json:"summary"`
			}
			if err := json.Unmarshal(b.stateDoc(kindTenant, ref{tenant: "lab"}, labTenant()), &d); err != nil {
				t.Fatal(err)
			}
			if d.Summary == nil || *d.Summary != tc.want {
				t.Errorf("summary = %v, want %q", d.Summary, tc.want)
			}
		})
	}
}
