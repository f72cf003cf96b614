package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Tool names (docs/design.md §11.6, contract). There is no destroy, reset
// or control-plane power tool, on purpose.
const (
	ToolListClusters  = "list_clusters"
	ToolClusterStatus = "cluster_status"
	ToolPendingPlan   = "pending_plan"
	ToolListMachines  = "list_machines"
	ToolPlan          = "plan"
	ToolApply         = "apply"
	ToolScaleWorkers  = "scale_workers"
	ToolPowerWorker   = "power_worker"
	ToolBackupEtcd    = "backup_etcd"
	ToolUpgrade       = "upgrade"
)

// allTools: every tool, and whether it writes.
var allTools = map[string]bool{
	ToolListClusters: false, ToolClusterStatus: false, ToolPendingPlan: false, ToolListMachines: false,
	ToolPlan: true, ToolApply: true, ToolScaleWorkers: true, ToolPowerWorker: true, ToolBackupEtcd: true, ToolUpgrade: true,
}

// ReadTools and WriteTools list the tool names, in the order offered.
var (
	ReadTools  = []string{ToolListClusters, ToolClusterStatus, ToolPendingPlan, ToolListMachines}
	WriteTools = []string{ToolPlan, ToolApply, ToolScaleWorkers, ToolPowerWorker, ToolBackupEtcd, ToolUpgrade}
)

// tool is one tool as both paths see it: the MCP server (the SDK validates
// the arguments against input) and Call (validated here, against the same
// schema).
type tool struct {
	name     string
	write    bool
	resolved *jsonschema.Resolved
	call     func(ctx context.Context, c Caller, raw json.RawMessage) (any, error)
}

// toolDef describes a tool for addTool.
type toolDef struct {
	name, title, desc string
	write             bool
	idempotent        bool
	// schema adjusts the input schema inferred from the input type
	// (enums, bounds, patterns).
	schema func(*jsonschema.Schema)
}

// addTool registers fn as a tool on the SDK server and for Call.
func addTool[In, Out any](s *Server, d toolDef, fn func(context.Context, Caller, In) (Out, error)) {
	in, err := jsonschema.For[In](nil)
	if err != nil {
		panic(fmt.Sprintf("mcp: tool %s: %v", d.name, err)) // a programming error, caught by every test
	}
	if d.schema != nil {
		d.schema(in)
	}
	resolved, err := in.Resolve(nil)
	if err != nil {
		panic(fmt.Sprintf("mcp: tool %s: %v", d.name, err))
	}
	notDestructive := false
	ann := &sdk.ToolAnnotations{Title: d.title, ReadOnlyHint: !d.write, IdempotentHint: d.idempotent,
		DestructiveHint: &notDestructive, OpenWorldHint: &notDestructive}
	sdk.AddTool(s.sdk, &sdk.Tool{Name: d.name, Title: d.title, Description: d.desc, InputSchema: in, Annotations: ann},
		func(ctx context.Context, req *sdk.CallToolRequest, input In) (*sdk.CallToolResult, Out, error) {
			out, err := fn(ctx, callerOf(req), input)
			return nil, out, err
		})
	s.tools[d.name] = &tool{name: d.name, write: d.write, resolved: resolved,
		call: func(ctx context.Context, c Caller, raw json.RawMessage) (any, error) {
			var input In
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&input); err != nil {
				return nil, fmt.Errorf("arguments of %s: %w", d.name, err)
			}
			return fn(ctx, c, input)
		}}
	s.order = append(s.order, d.name)
}

// callJSON validates raw against the tool's input schema and runs it.
func (t *tool) callJSON(ctx context.Context, c Caller, raw json.RawMessage) (any, error) {
	if len(bytes.TrimSpace(raw)) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		raw = json.RawMessage("{}")
	}
	if len(raw) > 64<<10 {
		return nil, fmt.Errorf("arguments of %s: %d bytes, more than 64 KiB", t.name, len(raw))
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, fmt.Errorf("arguments of %s: %w", t.name, err)
	}
	if _, ok := v.(map[string]any); !ok {
		return nil, fmt.Errorf("arguments of %s: must be a JSON object", t.name)
	}
	if err := t.resolved.Validate(v); err != nil {
		return nil, fmt.Errorf("arguments of %s: %w", t.name, err)
	}
	return t.call(ctx, c, raw)
}

// errRefused marks a write the guard refused (tests match it).
var errRefused = errors.New("refused")

// refuse is a guard's answer: what was refused and why.
func refuse(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errRefused, fmt.Sprintf(format, args...))
}
