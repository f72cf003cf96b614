package hass

import (
	"strings"

	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// assistKeys are the tenant entities offered to Assist with assist_expose
// on: what a voice question needs (phase, nodes ready, problem, progress)
// and the two commands that are safe to speak (Apply converges to the
// file, Plan changes nothing). Destroy, Allow destroy, Cancel, Auto apply
// and every node's Reboot are never offered.
var assistKeys = []string{"phase", "nodes_ready", "problem", "progress", "apply", "plan"}

// AssistEntities names, by unique id, the entities of ts that rezuscloud
// exposes to Assist, each with the alias it adds ("" for none): the
// assistKeys, with "<display name> cluster" on the phase sensor, and the
// count number of each worker group with "<display name> workers" (with
// several worker groups, "<display name> <group> workers"). Control-plane
// counts are not offered: a spoken number must not touch etcd quorum.
// baseTopic is the bridge's (empty: "rezuscloud"); the unique ids are those
// the discovery payloads carry.
func AssistEntities(baseTopic string, ts []*tenant.Tenant) map[string]string {
	if baseTopic == "" {
		baseTopic = "rezuscloud"
	}
	tp := topics{base: baseTopic}
	out := map[string]string{}
	for _, t := range ts {
		if t == nil {
			continue
		}
		dev := tp.deviceID(kindTenant, ref{tenant: t.Name})
		title := strings.TrimSpace(t.Title())
		for _, key := range assistKeys {
			e := tenantEntity(key)
			if e == nil {
				continue
			}
			alias := ""
			if key == "phase" {
				alias = title + " cluster"
				if strings.HasSuffix(strings.ToLower(title), "cluster") { // "Home cluster"
					alias = title
				}
			}
			out[dev+"_"+e.compKey("")] = alias
		}
		count := tenantEntity("count")
		var workers []string
		for _, g := range t.NodeGroups {
			if g.Role != tenant.RoleControlPlane {
				workers = append(workers, g.Name)
			}
		}
		for _, g := range workers {
			alias := title + " workers"
			if len(workers) > 1 {
				alias = title + " " + strings.ReplaceAll(g, "-", " ")
				if !strings.HasSuffix(alias, "workers") && !strings.HasSuffix(alias, "worker") {
					alias += " workers"
				}
			}
			out[dev+"_"+count.compKey(g)] = alias
		}
	}
	return out
}

func tenantEntity(key string) *entity {
	for i := range entities {
		if entities[i].kind == kindTenant && entities[i].key == key {
			return &entities[i]
		}
	}
	return nil
}
