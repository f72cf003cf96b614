package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"

	"github.com/rezuscloud/rezuscloud/internal/hass/wsapi"
)

// Assist script object ids (entities script.<id>; contract: users' own
// automations may call them).
const (
	ScriptClusterStatus = "rezuscloud_cluster_status"
	ScriptPendingPlan   = "rezuscloud_pending_plan"
	ScriptScaleWorkers  = "rezuscloud_scale_workers"
	ScriptPowerWorker   = "rezuscloud_power_worker"
	ScriptBackupEtcd    = "rezuscloud_backup_etcd"
)

// answerTimeout is how long a script waits for rezuscloud's answer.
const answerTimeout = 20

// AssistScripts are the scripts that give Home Assistant's own assistants
// rezuscloud's tools (assist_scripts, docs/design.md §11.6): cluster status
// and pending plan, and with writes scale workers, power a worker and back
// up etcd. Home Assistant turns an exposed script's description and
// described fields into an LLM tool. Each script fires rezuscloud_tool_call
// for the tool of the same name, waits for rezuscloud_tool_result with its
// transaction and returns it as the script's response. The cluster field
// lists the clusters of views, so the scripts change with them.
func AssistScripts(views []View, writes bool) []wsapi.Script {
	cluster := map[string]any{"name": "Cluster", "required": true,
		"description": "The cluster's name; ask which one when the user did not say.",
		"selector":    map[string]any{"text": map[string]any{}}}
	if len(views) > 0 {
		var opts []any
		for _, v := range views {
			label := v.Name
			if v.Spec != nil {
				label = v.Spec.Title()
			}
			opts = append(opts, map[string]any{"value": v.Name, "label": label})
		}
		cluster["selector"] = map[string]any{"select": map[string]any{"options": opts}}
	}
	optCluster := map[string]any{"name": "Cluster", "required": false,
		"description": "The cluster's name; leave empty for a summary of every cluster.", "selector": cluster["selector"]}

	out := []wsapi.Script{
		{ID: ScriptClusterStatus, Config: toolScript("rezuscloud: cluster status",
			"Tells how a Kubernetes cluster of the home is doing: phase, nodes, running operation, problems and "+
				"their reasons. Without a cluster, a summary of every cluster.",
			"mdi:kubernetes",
			"{{ '"+ToolClusterStatus+"' if cluster is defined and cluster else '"+ToolListClusters+"' }}",
			map[string]any{"cluster": optCluster},
			map[string]any{"cluster": "{{ cluster | default('') }}"})},
		{ID: ScriptPendingPlan, Config: toolScript("rezuscloud: pending changes",
			"Tells what applying a cluster would change now: the resources its pending plan adds, changes and destroys.",
			"mdi:clipboard-list", ToolPendingPlan,
			map[string]any{"cluster": cluster},
			map[string]any{"cluster": "{{ cluster | default('') }}"})},
	}
	if !writes {
		return out
	}
	return append(out,
		wsapi.Script{ID: ScriptScaleWorkers, Config: toolScript("rezuscloud: scale workers",
			"Sets how many worker nodes a cluster's worker group has (never a control plane). The cluster then "+
				"plans the change, or applies it when it applies automatically.",
			"mdi:server-plus", ToolScaleWorkers,
			map[string]any{"cluster": cluster,
				"group": map[string]any{"name": "Worker group", "required": false,
					"description": "The worker group; leave empty when the cluster has one worker group.",
					"selector":    map[string]any{"text": map[string]any{}}},
				"count": map[string]any{"name": "Workers", "required": true,
					"description": "How many worker nodes the group should have.",
					"selector":    map[string]any{"number": map[string]any{"min": 0, "max": 100, "mode": "box"}}}},
			map[string]any{"cluster": "{{ cluster | default('') }}", "group": "{{ group | default('') }}",
				"count": "{{ count | default('') }}"})},
		wsapi.Script{ID: ScriptPowerWorker, Config: toolScript("rezuscloud: power a worker",
			"Powers one bare-metal worker node of a cluster on, or shuts it down gracefully and switches it off. "+
				"Control planes are refused.",
			"mdi:power", ToolPowerWorker,
			map[string]any{"cluster": cluster,
				"node": map[string]any{"name": "Node", "required": true,
					"description": "The worker node's name, as the cluster status lists it (e.g. lab-workers-2).",
					"selector":    map[string]any{"text": map[string]any{}}},
				"state": map[string]any{"name": "Power", "required": true,
					"description": "on to power the machine on, off to shut it down and switch it off.",
					"selector":    map[string]any{"select": map[string]any{"options": []any{"on", "off"}}}}},
			map[string]any{"cluster": "{{ cluster | default('') }}", "node": "{{ node | default('') }}",
				"state": "{{ state | default('') }}"})},
		wsapi.Script{ID: ScriptBackupEtcd, Config: toolScript("rezuscloud: back up etcd",
			"Takes an etcd snapshot of a cluster into the add-on's data folder.",
			"mdi:database-export", ToolBackupEtcd,
			map[string]any{"cluster": cluster},
			map[string]any{"cluster": "{{ cluster | default('') }}"})},
	)
}

// toolScript is a script that calls one tool and returns its answer.
func toolScript(alias, desc, icon, tool string, fields, args map[string]any) map[string]any {
	return map[string]any{
		"alias": alias, "description": desc, "icon": icon, "mode": "parallel", "max": 10,
		"fields": fields,
		"sequence": []any{
			map[string]any{"variables": map[string]any{"transaction": "{{ context.id }}"}},
			map[string]any{"event": wsapi.EventToolCall, "event_data": map[string]any{
				"tool": tool, "arguments": args, "transaction": "{{ transaction }}"}},
			map[string]any{"wait_for_trigger": []any{map[string]any{"trigger": "event", "event_type": wsapi.EventToolResult,
				"event_data": map[string]any{"transaction": "{{ transaction }}"}}},
				"timeout": answerTimeout, "continue_on_timeout": true},
			map[string]any{"variables": map[string]any{"result": fmt.Sprintf("{{ wait.trigger.event.data if wait.trigger "+
				"else {'status': 'error', 'error': 'rezuscloud did not answer within %d seconds'} }}", answerTimeout)}},
			map[string]any{"stop": "done", "response_variable": "result"},
		},
	}
}

// CallScript runs a tool for an Assist script: Call, after undoing what
// Home Assistant's templates do to arguments (an unset field renders as
// "", a number as 3.0).
func (s *Server) CallScript(ctx context.Context, user, name string, args json.RawMessage) (any, error) {
	var m map[string]any
	if len(bytes.TrimSpace(args)) > 0 {
		if err := json.Unmarshal(args, &m); err != nil {
			return nil, fmt.Errorf("arguments of %s: must be a JSON object: %w", name, err)
		}
	}
	for k, v := range m {
		switch x := v.(type) {
		case nil:
			delete(m, k)
		case string:
			if x == "" {
				delete(m, k)
			}
		case float64:
			if x == math.Trunc(x) && math.Abs(x) < 1<<53 {
				m[k] = int64(x)
			}
		}
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	return s.Call(ctx, Caller{Via: "assist script", User: user}, name, raw)
}
