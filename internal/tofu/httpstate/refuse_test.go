package httpstate

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// failing is a Backend whose writes fail with err.
type failing struct {
	Backend
	err error
}

func (f failing) Put(context.Context, string, []byte, string) error    { return f.err }
func (f failing) Lock(context.Context, string, LockInfo, []byte) error { return f.err }
func (f failing) Unlock(context.Context, string, string) error         { return f.err }
func (f failing) Get(context.Context, string) ([]byte, bool, error)    { return nil, false, f.err }

// TestRefusal: a refused request (ErrRefused) is answered with a status
// tofu does not retry (409, 403 to LOCK, where tofu reads 409 as a lock
// conflict) and its error is kept once for TakeRefusal; any other backend
// error is a 500, which tofu retries, and is not a refusal.
func TestRefusal(t *testing.T) {
	st, err := Open(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	refused := fmt.Errorf("state lab: upload: %w: this instance no longer leads", ErrRefused)
	down := errors.New("state lab: upload: connection refused")
	for _, c := range []struct {
		err            error
		method         string
		want           int
		wantRefusal    bool
		wantBodyPrefix string
	}{
		{refused, "POST", http.StatusConflict, true, "state lab: upload: write refused: this instance no longer leads"},
		{refused, "UNLOCK", http.StatusConflict, true, "state lab"},
		{refused, "LOCK", http.StatusForbidden, true, "state lab"},
		{down, "POST", http.StatusInternalServerError, false, "state backend error"},
		{down, "LOCK", http.StatusInternalServerError, false, "state backend error"},
		{down, "GET", http.StatusInternalServerError, false, "state backend error"},
	} {
		t.Run(fmt.Sprintf("%s %v", c.method, c.wantRefusal), func(t *testing.T) {
			s, err := StartBackend(failing{st.Backend(), c.err}, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close(context.Background()) })
			cl := client{t: t, s: s, url: s.URL("lab")}
			body := []byte(`{"serial":1}`)
			if c.method != "POST" {
				body = lockBody("tofu-1", "me@host")
			}
			code, got := cl.do(c.method, "", body)
			if code != c.want || !strings.HasPrefix(string(got), c.wantBodyPrefix) {
				t.Fatalf("%s = %d %q, want %d %q", c.method, code, got, c.want, c.wantBodyPrefix)
			}
			r := s.TakeRefusal("lab")
			if (r != nil) != c.wantRefusal || (r != nil && !errors.Is(r, ErrRefused)) {
				t.Fatalf("refusal = %v, want one: %v", r, c.wantRefusal)
			}
			if r := s.TakeRefusal("lab"); r != nil {
				t.Fatalf("second TakeRefusal = %v", r)
			}
		})
	}
}
