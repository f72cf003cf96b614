package provider

import (
	"fmt"
	"sort"

	tfjson "github.com/hashicorp/terraform-json"
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

// ParseNodes maps tofu's outputs (`tofu output -json`) to the nodes its
// "nodes" output reports, sorted by name. Empty outputs ({} after a
// destroy, or a state with only the network stage) give no nodes and no
// error.
func ParseNodes(outs map[string]*tfjson.StateOutput) ([]NodeOutput, error) {
	o := outs[OutputNodes]
	if o == nil || o.Value == nil {
		return nil, nil
	}
	m, ok := o.Value.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("provider: output %q: want a map of {address, private_address, id}, got %T", OutputNodes, o.Value)
	}
	nodes := make([]NodeOutput, 0, len(m))
	for name, raw := range m {
		v, ok := raw.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("provider: output %q: node %s: want {address, private_address, id}, got %T", OutputNodes, name, raw)
		}
		n := NodeOutput{Name: name}
		for key, dst := range map[string]*string{"address": &n.Address, "private_address": &n.PrivateAddress, "id": &n.ID} {
			switch x := v[key].(type) {
			case string:
				*dst = x
			case nil:
			default:
				return nil, fmt.Errorf("provider: output %q: node %s: %s is a %T, not a string", OutputNodes, name, key, x)
			}
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
func EndpointAddress(outs map[string]*tfjson.StateOutput) (string, error) {
	o := outs[OutputEndpoint]
	if o == nil {
		return "", fmt.Errorf("provider: tofu outputs have no %q (apply the network stage first)", OutputEndpoint)
	}
	s, ok := o.Value.(string)
	if !ok {
		return "", fmt.Errorf("provider: output %q: want a string, got %T", OutputEndpoint, o.Value)
	}
	if s == "" {
		return "", fmt.Errorf("provider: output %q is empty", OutputEndpoint)
	}
	return s, nil
}

func sortStrings(s []string) { sort.Strings(s) }
