package web

import (
	"io"
	"net/http"
	"testing"
)

func TestSmokePages(t *testing.T) {
	h := newHarness(t)
	c := h.client()
	for _, p := range []string{"", "tenants/lab", "tenants/cloud", "tenants/lab/plan", "machines", "new", "tenants/lab/edit", "nope"} {
		resp, err := c.Get(h.in.Entry() + p)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Logf("%s: %d %s", p, resp.StatusCode, b)
		} else {
			t.Logf("%s: %d bytes", p, len(b))
		}
	}
}
