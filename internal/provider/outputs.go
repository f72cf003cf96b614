package provider

import (
	"encoding/json"
	"fmt"
	"sort"
)

// Output names of the output contract (see the package documentation).
const (
	OutputNodes    = "nodes"
	OutputEndpoint = "endpoint_address"
)

// NodeOutputValue builds the value of one entry of the nodes output.
func NodeOutputValue(address, privateAddress, id string) map[string]any {
	return map[string]any{"address": address, "private_address": privateAddress, "id": id}
}

// output is one entry of `tofu output -json`:
// {"name":{"sensitive":false,"type":...,"value":...}}.
type output struct {
	Sensitive bool            `json:"sensitive"`
	Type      json.RawMessage `json:"type"`
	Value     json.RawMessage `json:"value"`
}

func parseOutputs(outputsJSON []byte) (map[string]output, error) {
	var outs map[string]output
	if err := json.Unmarshal(outputsJSON, &outs); err != nil {
		return nil, fmt.Errorf("provider: tofu output -json: %w", err)
	}
	return outs, nil
}

// ParseNodes maps `tofu output -json` to the nodes its "nodes" output
// reports, sorted by name. Empty outputs ({} after a destroy, or a state with
// only the network stage) give no nodes and no error.
func ParseNodes(outputsJSON []byte) ([]NodeOutput, error) {
	outs, err := parseOutputs(outputsJSON)
	if err != nil {
		return nil, err
	}
	o, ok := outs[OutputNodes]
	if !ok || len(o.Value) == 0 || string(o.Value) == "null" {
		return nil, nil
	}
	var m map[string]struct {
		Address        *string `json:"address"`
		PrivateAddress *string `json:"private_address"`
		ID             *string `json:"id"`
	}
	if err := json.Unmarshal(o.Value, &m); err != nil {
		return nil, fmt.Errorf("provider: output %q: want a map of {address, private_address, id}: %w", OutputNodes, err)
	}
	nodes := make([]NodeOutput, 0, len(m))
	for name, v := range m {
		n := NodeOutput{Name: name}
		if v.Address != nil {
			n.Address = *v.Address
		}
		if v.PrivateAddress != nil {
			n.PrivateAddress = *v.PrivateAddress
		}
		if v.ID != nil {
			n.ID = *v.ID
		}
		nodes = append(nodes, n)
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
	return nodes, nil
}

// EndpointAddress returns the endpoint_address output: the address a cloud
// tenant's endpoint is to name (https://<address>:6443). It is an error when
// the output is absent or empty (the network stage was not applied, or the
// tenant has an explicit endpoint).
func EndpointAddress(outputsJSON []byte) (string, error) {
	outs, err := parseOutputs(outputsJSON)
	if err != nil {
		return "", err
	}
	o, ok := outs[OutputEndpoint]
	if !ok {
		return "", fmt.Errorf("provider: tofu outputs have no %q (apply the network stage first)", OutputEndpoint)
	}
	var s string
	if err := json.Unmarshal(o.Value, &s); err != nil {
		return "", fmt.Errorf("provider: output %q: want a string: %w", OutputEndpoint, err)
	}
	if s == "" {
		return "", fmt.Errorf("provider: output %q is empty", OutputEndpoint)
	}
	return s, nil
}

func sortStrings(s []string) { sort.Strings(s) }
