package talos

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/client"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// fakeDialer hands out lazy clients (nothing is dialled) and records the
// endpoints asked for.
type fakeDialer struct{ asked []string }

func (d *fakeDialer) get(ctx context.Context, endpoint string, _ []byte) (*client.Client, func(error), error) {
	d.asked = append(d.asked, endpoint)
	c, err := maintenanceClient(ctx, endpoint)
	if err != nil {
		return nil, nil, err
	}
	return c, func(error) { _ = c.Close() }, nil
}

func TestTargetCallFallback(t *testing.T) {
	down := status.Error(codes.Unavailable, "connection error: dial tcp: connect: connection refused")
	refused := status.Error(codes.PermissionDenied, "not authorized")
	for _, tc := range []struct {
		name      string
		from      int
		errs      map[string]error // per endpoint; nil answers
		wantAsked []string
		wantIdx   int
		wantCode  codes.Code
	}{
		{"first answers", 0, nil, []string{"a"}, 0, codes.OK},
		{"first down", 0, map[string]error{"a": down}, []string{"a", "b"}, 1, codes.OK},
		{"remembered second", 1, nil, []string{"b"}, 1, codes.OK},
		{"remembered second down, wraps", 1, map[string]error{"b": down, "c": down}, []string{"b", "c", "a"}, 0, codes.OK},
		{"all down", 0, map[string]error{"a": down, "b": down, "c": down}, []string{"a", "b", "c"}, 2, codes.Unavailable},
		{"refusal is final", 0, map[string]error{"a": refused}, []string{"a"}, 0, codes.PermissionDenied},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &fakeDialer{}
			tg := Route([]string{"a", "b", "c"}, "10.0.0.7")
			i, err := tg.call(context.Background(), d, tc.from, nil, func(ctx context.Context, c *client.Client) error {
				md, _ := metadata.FromOutgoingContext(ctx)
				if got := md.Get("node"); len(got) != 1 || got[0] != "10.0.0.7" {
					t.Errorf("node metadata %v", got)
				}
				return tc.errs[d.asked[len(d.asked)-1]]
			})
			if !slices.Equal(d.asked, tc.wantAsked) || i != tc.wantIdx || client.StatusCode(err) != tc.wantCode {
				t.Errorf("asked %v, index %d, err %v", d.asked, i, err)
			}
		})
	}
	// Direct targets name no node.
	d := &fakeDialer{}
	_, _ = Direct("a").call(context.Background(), d, 0, nil, func(ctx context.Context, _ *client.Client) error {
		if md, _ := metadata.FromOutgoingContext(ctx); len(md.Get("node")) != 0 {
			t.Error("direct call names a node")
		}
		return nil
	})
	if _, err := (Target{}).call(context.Background(), d, 0, nil, nil); err == nil {
		t.Error("target without endpoints: want error")
	}
}

func TestRoutedErrorClassification(t *testing.T) {
	legDown := &routedError{node: "10.0.0.7", err: status.Error(codes.Unavailable, "transport: authentication handshake failed: x509: certificate signed by unknown authority")}
	if endpointFailed(legDown) || !routedUnreachable(legDown) {
		t.Error("a routed leg that failed is the node's, not the endpoint's")
	}
	refused := &routedError{node: "10.0.0.7", err: status.Error(codes.Unimplemented, "bootstrap is not available on worker nodes")}
	if routedUnreachable(refused) || client.StatusCode(refused) != codes.Unimplemented {
		t.Error("a routed refusal keeps its code")
	}
	if !endpointFailed(errors.New("dial tcp 127.0.0.1:1: connect: connection refused")) {
		t.Error("a dial error fails the endpoint")
	}
}

// The pool hands the same client to every caller of an endpoint, drops a
// broken one (closing it when its last user is done) and closes the
// clients of endpoints no target uses.
func TestPool(t *testing.T) {
	ctx := context.Background()
	p := newPool()
	tc := []byte("talosconfig")
	c1, rel1, err := p.get(ctx, "127.0.0.1:1", nil)
	if err != nil {
		t.Fatal(err)
	}
	c2, rel2, _ := p.get(ctx, "127.0.0.1:1", nil)
	if c1 != c2 || p.size() != 1 {
		t.Fatal("two clients for one endpoint")
	}
	if _, _, err := p.get(ctx, "127.0.0.1:1", tc); err == nil {
		t.Error("a talosconfig that does not parse: want error")
	}
	rel1(nil)
	rel2(status.Error(codes.Unavailable, "connection refused")) // a lazy client is not ready: broken
	if p.size() != 0 {
		t.Error("broken client kept")
	}
	c3, rel3, _ := p.get(ctx, "127.0.0.1:1", nil)
	if c3 == c1 {
		t.Error("broken client handed out again")
	}
	rel3(nil)
	c4, rel4, _ := p.get(ctx, "127.0.0.2:1", nil)
	rel4(nil)
	p.prune(map[string]bool{"127.0.0.2:1": true})
	if p.size() != 1 {
		t.Errorf("pool size %d after prune, want 1", p.size())
	}
	if c5, rel5, _ := p.get(ctx, "127.0.0.2:1", nil); c5 != c4 {
		t.Error("kept client not reused")
	} else {
		rel5(nil)
	}
	p.prune(nil)
	if p.size() != 0 {
		t.Error("prune(nil) kept clients")
	}
}
