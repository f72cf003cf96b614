// Package command is the one request and response of every transport that
// commands rezuscloud: the MQTT request API and entity commands, Home
// Assistant events over the WebSocket link, the panel and the MCP server.
// It is a leaf: the transports share it, the action table that runs a
// request lives in package hass.
package command

import "encoding/json"

// Request is a decoded, syntactically valid request.
type Request struct {
	Action      string          `json:"-"`
	Tenant      string          `json:"tenant,omitempty"`
	Group       string          `json:"group,omitempty"`
	Count       *int            `json:"count,omitempty"`
	Node        string          `json:"node,omitempty"`
	Confirm     string          `json:"confirm,omitempty"`
	Enabled     *bool           `json:"enabled,omitempty"`
	Level       string          `json:"level,omitempty"`
	Component   string          `json:"component,omitempty"`
	Version     string          `json:"version,omitempty"`
	MAC         string          `json:"mac,omitempty"`
	InstallDisk string          `json:"install_disk,omitempty"`
	State       string          `json:"state,omitempty"`
	Mode        *string         `json:"mode,omitempty"` // pool: off, observe, on
	Min         *int            `json:"min,omitempty"`
	Max         *int            `json:"max,omitempty"`
	Transaction json.RawMessage `json:"transaction,omitempty"`
}

// Response is the answer to a request:
// {"status":"ok"|"error","data":…,"error":"…","transaction":…}, the
// request's transaction echoed (docs/design.md §4).
type Response struct {
	Status      string          `json:"status"`
	Data        any             `json:"data"`
	Error       string          `json:"error,omitempty"`
	Transaction json.RawMessage `json:"transaction,omitempty"`
}

// OK reports whether the response is a success.
func (r Response) OK() bool { return r.Status == "ok" }

// Error is the error answer to a request with that transaction.
func Error(transaction json.RawMessage, err error) Response {
	return Response{Status: "error", Data: struct{}{}, Error: err.Error(), Transaction: transaction}
}
