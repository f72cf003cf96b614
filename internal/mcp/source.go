// Package mcp serves rezuscloud's clusters to AI assistants over the Model
// Context Protocol (docs/design.md §11.6): Streamable HTTP at /mcp behind a
// bearer token, read tools always and write tools only when the user turns
// writes on. Every write runs through the one command path the Home
// Assistant buttons use (hass.Request → hass.Response), after a guard that
// refuses unknown clusters, counts out of range, control-plane groups and
// busy clusters with a reason. No destroy, reset or control-plane power
// tool exists.
//
// The same tools serve Home Assistant's own assistants through the Assist
// scripts (scripts.go): a script fires rezuscloud_tool_call and Call runs
// the tool exactly as an MCP client's call would.
package mcp

import (
	"context"

	tfjson "github.com/hashicorp/terraform-json"

	"github.com/rezuscloud/rezuscloud/internal/hass"
	"github.com/rezuscloud/rezuscloud/internal/talos"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// Source is what the server reads from the engine: a part of its read API
// (cmd/rezuscloud/mcp.go adapts *engine.Engine to it).
type Source interface {
	// Views is every tenant, sorted by name; View is one.
	Views() []View
	View(name string) (View, bool)
	// PendingPlan is the pending plan as tofu's JSON, nil when there is none.
	PendingPlan(ctx context.Context, name string) (*tfjson.Plan, error)
	// Machines is what discovery found on the LAN, not yet declared.
	Machines() []talos.Machine
}

// View is one tenant as Home Assistant shows it (the engine's view).
type View = tenant.View

// Status is the tenant state document.
type Status = tenant.Status

// Command is the one command path: (*hass.Bridge).HandleRequest, which the
// MQTT buttons and the request API use too. The MCP server has no command
// of its own.
type Command func(context.Context, hass.Request) hass.Response
