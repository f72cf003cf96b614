package httpstate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

type client struct {
	t   *testing.T
	s   *Server
	url string
}

func (c client) do(method, query string, body []byte) (int, []byte) {
	c.t.Helper()
	req, err := http.NewRequest(method, c.url+query, bytes.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	req.SetBasicAuth(Username, c.s.Password())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func start(t *testing.T, dir string, keep int) (*Server, client) {
	t.Helper()
	st, err := Open(dir, keep)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Start(st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s, client{t: t, s: s, url: s.URL("lab")}
}

func lockBody(id, who string) []byte {
	b, _ := json.Marshal(LockInfo{ID: id, Operation: "OperationTypeApply", Who: who, Version: "1.12.6", Created: time.Now().UTC()})
	return b
}

func TestProtocol(t *testing.T) {
	dir := t.TempDir()
	s, c := start(t, dir, 3)

	if code, _ := c.do("GET", "", nil); code != 404 {
		t.Fatalf("GET empty = %d", code)
	}
	// Wrong password.
	req, _ := http.NewRequest("GET", c.url, nil)
	req.SetBasicAuth(Username, "nope")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 401 {
		t.Fatalf("bad auth = %v %v", resp, err)
	}
	// Lock, conflicting lock gets 423 with the holder's JSON.
	a := lockBody("lock-a", "alice@host")
	if code, body := c.do("LOCK", "", a); code != 200 || !bytes.Equal(body, a) {
		t.Fatalf("LOCK = %d %s", code, body)
	}
	code, body := c.do("LOCK", "", lockBody("lock-b", "bob@host"))
	if code != http.StatusLocked {
		t.Fatalf("second LOCK = %d", code)
	}
	var holder LockInfo
	if err := json.Unmarshal(body, &holder); err != nil || holder.ID != "lock-a" || holder.Who != "alice@host" {
		t.Fatalf("holder = %s (%v)", body, err)
	}
	// Upload without/with the wrong lock ID is refused; with it, stored.
	if code, _ := c.do("POST", "?ID=lock-b", []byte(`{"serial":1}`)); code != http.StatusLocked {
		t.Fatalf("POST wrong ID = %d", code)
	}
	if code, _ := c.do("POST", "", []byte(`{"serial":1}`)); code != http.StatusLocked {
		t.Fatalf("POST no ID = %d", code)
	}
	for i := 1; i <= 5; i++ {
		if code, _ := c.do("POST", "?ID=lock-a", []byte(`{"serial":`+string(rune('0'+i))+`}`)); code != 200 {
			t.Fatalf("POST = %d", code)
		}
	}
	if code, _ := c.do("POST", "?ID=lock-a", []byte(`not json`)); code != 400 {
		t.Fatalf("POST garbage = %d", code)
	}
	if code, body := c.do("GET", "", nil); code != 200 || string(body) != `{"serial":5}` {
		t.Fatalf("GET = %d %s", code, body)
	}
	// Unlock with another ID: 423; with the holder's: 200.
	if code, _ := c.do("UNLOCK", "", lockBody("lock-b", "bob")); code != http.StatusLocked {
		t.Fatalf("UNLOCK other = %d", code)
	}
	if code, _ := c.do("UNLOCK", "", a); code != 200 {
		t.Fatalf("UNLOCK = %d", code)
	}
	if _, ok := s.Store().LockOf("lab"); ok {
		t.Fatal("still locked")
	}
	// Versions: the last 3 are kept; rollback makes an old one current.
	vs, err := s.Store().Versions("lab")
	if err != nil || len(vs) != 3 || vs[0].Seq != 3 || vs[2].Seq != 5 {
		t.Fatalf("versions = %+v %v", vs, err)
	}
	if err := s.Store().Rollback("lab", 4); err != nil {
		t.Fatal(err)
	}
	if _, body := c.do("GET", "", nil); string(body) != `{"serial":4}` {
		t.Fatalf("after rollback = %s", body)
	}
	if code, _ := c.do("DELETE", "", nil); code != 405 {
		t.Fatalf("DELETE = %d", code)
	}
	if code, _ := c.do("GET", "/../x", nil); code != 404 {
		t.Fatalf("bad name = %d", code)
	}
	// Files are private.
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if fi.IsDir() && fi.Mode().Perm() != 0o700 || !fi.IsDir() && fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v", p, fi.Mode())
		}
		return nil
	})
}

func TestContentMD5(t *testing.T) {
	_, c := start(t, t.TempDir(), 0)
	req, _ := http.NewRequest("POST", c.url, strings.NewReader(`{"serial":1}`))
	req.SetBasicAuth(Username, c.s.Password())
	req.Header.Set("Content-MD5", "AAAAAAAAAAAAAAAAAAAAAA==")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 400 {
		t.Fatalf("bad md5 = %v %v", resp.StatusCode, err)
	}
}

// A crash (the server and store gone, a new process on the same dir) keeps
// the state and shows the lock that was held, which ForceUnlock clears.
func TestCrashKeepsStateAndStaleLock(t *testing.T) {
	dir := t.TempDir()
	s1, c1 := start(t, dir, 0)
	if code, _ := c1.do("LOCK", "", lockBody("crashed", "tofu@old")); code != 200 {
		t.Fatal(code)
	}
	if code, _ := c1.do("POST", "?ID=crashed", []byte(`{"serial":7}`)); code != 200 {
		t.Fatal(code)
	}
	s1.Close(context.Background())
	// A leftover temp file from a write cut short must not matter.
	os.WriteFile(filepath.Join(dir, "lab", ".v000000000009.tfstate.tmp123"), []byte("{"), 0o600)

	s2, c2 := start(t, dir, 0)
	if s2.Password() == s1.Password() {
		t.Error("password reused across processes")
	}
	if code, body := c2.do("GET", "", nil); code != 200 || string(body) != `{"serial":7}` {
		t.Fatalf("GET after restart = %d %s", code, body)
	}
	li, ok := s2.Store().LockOf("lab")
	if !ok || li.ID != "crashed" || li.Who != "tofu@old" {
		t.Fatalf("stale lock = %+v %v", li, ok)
	}
	if code, _ := c2.do("LOCK", "", lockBody("new", "tofu@new")); code != http.StatusLocked {
		t.Fatalf("LOCK over stale = %d", code)
	}
	err := s2.Store().ForceUnlock("lab", "wrong")
	var le *LockError
	if !errors.As(err, &le) || !errors.Is(err, ErrLocked) || le.Holder.ID != "crashed" {
		t.Fatalf("ForceUnlock wrong id = %v", err)
	}
	if err := s2.Store().ForceUnlock("lab", "crashed"); err != nil {
		t.Fatal(err)
	}
	if code, _ := c2.do("LOCK", "", lockBody("new", "tofu@new")); code != 200 {
		t.Fatalf("LOCK after force-unlock = %d", code)
	}
}
