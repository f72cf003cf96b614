// Package httpstatetest checks that an httpstate.Backend behaves as tofu's
// http backend needs, the same for every store (the data folder's and
// PostgreSQL's): versions, locks with 423 semantics, and the protocol over
// a real Server.
package httpstatetest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/tofu/httpstate"
)

// Run checks a fresh, empty backend (one per call of open) against the
// contract.
func Run(t *testing.T, open func(t *testing.T) httpstate.Backend) {
	t.Run("versions", func(t *testing.T) {
		ctx := context.Background()
		b := open(t)
		if _, ok, err := b.Get(ctx, "lab"); err != nil || ok {
			t.Fatalf("Get of nothing = ok %v, %v", ok, err)
		}
		for i := 1; i <= 3; i++ {
			if err := b.Put(ctx, "lab", state(i), ""); err != nil {
				t.Fatalf("Put %d: %v", i, err)
			}
		}
		got, ok, err := b.Get(ctx, "lab")
		if err != nil || !ok || !bytes.Equal(got, state(3)) {
			t.Fatalf("Get = %q, %v, %v; want %q", got, ok, err, state(3))
		}
		vs, err := b.Versions(ctx, "lab")
		if err != nil || len(vs) != 3 || vs[0].Seq != 1 || vs[2].Seq != 3 || vs[0].Size != int64(len(state(1))) {
			t.Fatalf("Versions = %+v, %v", vs, err)
		}
		if v, err := b.GetVersion(ctx, "lab", 2); err != nil || !bytes.Equal(v, state(2)) {
			t.Fatalf("GetVersion 2 = %q, %v", v, err)
		}
		if _, err := b.GetVersion(ctx, "lab", 9); err == nil {
			t.Fatal("GetVersion of a missing version: no error")
		}
		if _, _, err := b.Get(ctx, "../etc"); !errors.Is(err, httpstate.ErrInvalidName) {
			t.Fatalf("Get of a bad name: %v", err)
		}
		if _, ok, _ := b.Get(ctx, "other"); ok {
			t.Fatal("another state sees lab's")
		}
	})
	t.Run("keeps the newest", func(t *testing.T) {
		ctx := context.Background()
		b := open(t)
		for i := 1; i <= httpstate.DefaultKeep+3; i++ {
			if err := b.Put(ctx, "lab", state(i), ""); err != nil {
				t.Fatal(err)
			}
		}
		vs, err := b.Versions(ctx, "lab")
		if err != nil || len(vs) != httpstate.DefaultKeep || vs[0].Seq != 4 {
			t.Fatalf("Versions = %+v, %v; want %d from 4", vs, err, httpstate.DefaultKeep)
		}
	})
	t.Run("locks", func(t *testing.T) {
		ctx := context.Background()
		b := open(t)
		a := httpstate.LockInfo{ID: "a", Operation: "OperationTypeApply", Who: "tofu@a"}
		raw := []byte(`{"ID":"a","Operation":"OperationTypeApply","Who":"tofu@a","Extra":1}`)
		if err := b.Lock(ctx, "lab", a, raw); err != nil {
			t.Fatal(err)
		}
		if err := b.Lock(ctx, "lab", a, raw); err != nil {
			t.Fatalf("relock by the holder: %v", err)
		}
		var le *httpstate.LockError
		if err := b.Lock(ctx, "lab", httpstate.LockInfo{ID: "b"}, nil); !errors.As(err, &le) || le.Holder.ID != "a" {
			t.Fatalf("second lock: %v", err)
		}
		if err := b.Put(ctx, "lab", state(1), "b"); !errors.Is(err, httpstate.ErrLocked) {
			t.Fatalf("Put by a non-holder: %v", err)
		}
		if err := b.Put(ctx, "lab", state(1), "a"); err != nil {
			t.Fatalf("Put by the holder: %v", err)
		}
		if li, ok, err := b.LockOf(ctx, "lab"); err != nil || !ok || li.Who != "tofu@a" {
			t.Fatalf("LockOf = %+v, %v, %v", li, ok, err)
		}
		if err := b.Unlock(ctx, "lab", "b"); !errors.Is(err, httpstate.ErrLocked) {
			t.Fatalf("Unlock by a non-holder: %v", err)
		}
		if err := b.ForceUnlock(ctx, "lab", "wrong"); err == nil {
			t.Fatal("ForceUnlock with the wrong ID worked")
		}
		if err := b.ForceUnlock(ctx, "lab", "a"); err != nil {
			t.Fatal(err)
		}
		if _, ok, _ := b.LockOf(ctx, "lab"); ok {
			t.Fatal("still locked after ForceUnlock")
		}
		if err := b.Unlock(ctx, "lab", "a"); err != nil {
			t.Fatalf("Unlock of an unlocked state: %v", err)
		}
	})
	t.Run("protocol", func(t *testing.T) {
		b := open(t)
		srv, err := httpstate.StartBackend(b, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = srv.Close(context.Background()) })
		do := func(method, body, query string) (int, string) {
			t.Helper()
			req, _ := http.NewRequest(method, srv.URL("lab")+query, strings.NewReader(body))
			req.SetBasicAuth(httpstate.Username, srv.Password())
			c := &http.Client{Timeout: 30 * time.Second}
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			out, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(out)
		}
		if code, _ := do("GET", "", ""); code != 404 {
			t.Fatalf("GET of nothing: %d", code)
		}
		lockA := `{"ID":"a","Operation":"OperationTypeApply","Who":"tofu@a"}`
		if code, _ := do("LOCK", lockA, ""); code != 200 {
			t.Fatalf("LOCK: %d", code)
		}
		if code, body := do("LOCK", `{"ID":"b"}`, ""); code != 423 || body != lockA {
			t.Fatalf("second LOCK: %d %s; want 423 with the holder's JSON", code, body)
		}
		if code, _ := do("POST", `{"serial":1}`, "?ID=a"); code != 200 {
			t.Fatalf("POST: %d", code)
		}
		if code, _ := do("POST", `{"serial":2}`, "?ID=b"); code != 423 {
			t.Fatalf("POST by a non-holder: %d", code)
		}
		if code, _ := do("UNLOCK", lockA, ""); code != 200 {
			t.Fatalf("UNLOCK: %d", code)
		}
		if code, body := do("GET", "", ""); code != 200 || body != `{"serial":1}` {
			t.Fatalf("GET: %d %s", code, body)
		}
	})
}

func state(i int) []byte {
	return []byte(`{"version":4,"serial":` + string(rune('0'+i%10)) + `,"lineage":"L","pad":"` + strings.Repeat("x", i) + `"}`)
}
