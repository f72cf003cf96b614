package web

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/hass/wsapi/fakeha"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// get fetches a page of the panel through the ingress.
func (h *harness) get(c *http.Client, page string) (*http.Response, string) {
	h.t.Helper()
	resp, err := c.Get(h.in.Entry() + page)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

var reToken = regexp.MustCompile(`name="panel-token" content="([^"]+)"`)

// token is the same-origin token of the session's user, read off a page.
func (h *harness) token(c *http.Client) string {
	h.t.Helper()
	_, body := h.get(c, "")
	m := reToken.FindStringSubmatch(body)
	if m == nil {
		h.t.Fatal("no token on the page")
	}
	return m[1]
}

// post posts a form through the ingress, as the page's script does
// (Accept JSON) unless plain.
func (h *harness) post(c *http.Client, path string, v url.Values, hdr map[string]string, plain bool) (*http.Response, string) {
	h.t.Helper()
	req, err := newPost(h.in.Entry()+path, v, "")
	if err != nil {
		h.t.Fatal(err)
	}
	if !plain {
		req.Header.Set("Accept", "application/json")
	}
	for k, val := range hdr {
		req.Header.Set(k, val)
	}
	resp, err := c.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// TestOnlyTrustedPeers: only the ingress's address may connect; a direct
// connection is refused whatever it claims in its headers.
func TestOnlyTrustedPeers(t *testing.T) {
	h := newHarness(t)
	c := h.client()
	if resp, _ := h.get(c, ""); resp.StatusCode != http.StatusOK {
		t.Fatalf("through the ingress: %d", resp.StatusCode)
	}
	direct := &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{
		LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.1")}}).DialContext}}
	for _, path := range []string{"/", "/static/app.css", "/api/tenants/lab/kubeconfig", "/api/events"} {
		for _, method := range []string{http.MethodGet, http.MethodPost} {
			req, _ := http.NewRequest(method, "http://"+h.addr+path, nil)
			req.Header.Set("X-Forwarded-For", ingressFrom.String())
			req.Header.Set("X-Remote-User-Id", adminUser.ID)
			req.Header.Set("X-Ingress-Path", "/api/hassio_ingress/x")
			resp, err := direct.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "only Home Assistant's ingress") {
				t.Errorf("direct %s %s from 127.0.0.1: %d %s", method, path, resp.StatusCode, body)
			}
		}
	}
	if len(h.eng.Calls()) != 0 {
		t.Fatalf("a refused peer reached the engine: %v", h.eng.Calls())
	}
	if h.logs.FilterMessage("panel: connection refused: not a trusted peer").Len() == 0 {
		t.Error("refusals are not logged")
	}
}

// TestForgedRequestsRefused: a state-changing request from another origin,
// or without the page's token, is refused and reaches nothing.
func TestForgedRequestsRefused(t *testing.T) {
	h := newHarness(t)
	c := h.client()
	tok := h.token(c)
	form := url.Values{"tenant": {"lab"}}
	tests := []struct {
		name string
		hdr  map[string]string
		v    url.Values
	}{
		{"another origin", map[string]string{"Origin": "http://evil.example", "X-Panel-Token": tok}, form},
		{"cross-site fetch metadata", map[string]string{"Origin": h.in.URL, "Sec-Fetch-Site": "cross-site", "X-Panel-Token": tok}, form},
		{"same-site but another origin", map[string]string{"Origin": h.in.URL, "Sec-Fetch-Site": "same-site", "X-Panel-Token": tok}, form},
		{"opaque origin", map[string]string{"Origin": "null", "X-Panel-Token": tok}, form},
		{"no origin nor referer", map[string]string{"X-Panel-Token": tok}, form},
		{"referer of another origin", map[string]string{"Referer": "http://evil.example/page", "X-Panel-Token": tok}, form},
		{"no token", map[string]string{"Origin": h.in.URL}, form},
		{"another user's token", map[string]string{"Origin": h.in.URL, "X-Panel-Token": h.srv.token(User{ID: plainUser.ID})}, form},
		{"forged token", map[string]string{"Origin": h.in.URL, "X-Panel-Token": tok[:len(tok)-2] + "AA"}, form},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := h.post(c, "api/request/apply", tc.v, tc.hdr, false)
			if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "did not come from the panel's own page") {
				t.Fatalf("%d %s", resp.StatusCode, body)
			}
		})
	}
	// the same for the form posts that write files
	resp, body := h.post(c, "new", url.Values{"_token": {tok}, "name": {"x"}}, map[string]string{"Origin": "http://evil.example"}, true)
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("cross-origin new: %d %s", resp.StatusCode, body)
	}
	resp, body = h.post(c, "tenants/lab/edit", url.Values{"_token": {tok}, "text": {"x"}}, map[string]string{"Origin": "http://evil.example"}, true)
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("cross-origin edit: %d %s", resp.StatusCode, body)
	}
	if calls := h.eng.Calls(); len(calls) != 0 {
		t.Fatalf("a forged request reached the engine: %v", calls)
	}
	if data, _ := h.store.Read("lab"); string(data) != labFile {
		t.Fatal("a forged edit changed the file")
	}

	// the page's own requests pass: JavaScript gets the command path's answer
	resp, body = h.post(c, "api/request/apply", form, map[string]string{"Origin": h.in.URL, "Sec-Fetch-Site": "same-origin", "X-Panel-Token": tok}, false)
	var ans struct {
		Status  string         `json:"status"`
		Data    map[string]any `json:"data"`
		Message string         `json:"message"`
	}
	if err := json.Unmarshal([]byte(body), &ans); err != nil || resp.StatusCode != http.StatusOK || ans.Data["queued"] != true ||
		ans.Message != "Apply of lab queued." {
		t.Fatalf("same origin: %d %s", resp.StatusCode, body)
	}
	// a plain form (no JavaScript) is redirected back with the answer,
	// under the ingress path
	resp, _ = h.post(c, "api/request/plan", url.Values{"tenant": {"lab"}, "_token": {tok}, "_back": {"tenants/lab"}},
		map[string]string{"Origin": h.in.URL}, true)
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, h.in.Path+"/tenants/lab?ok=") {
		t.Fatalf("plain form: %d to %q", resp.StatusCode, loc)
	}
	// a bad request is the command path's error, at the field it names
	_, body = h.post(c, "api/request/scale", url.Values{"tenant": {"lab"}, "group": {"workers"}, "count": {"-1"}},
		map[string]string{"Origin": h.in.URL, "X-Panel-Token": tok}, false)
	if err := json.Unmarshal([]byte(body), &ans); err != nil || ans.Status != "error" || ans.Message != "count must be a whole number >= 0" {
		t.Fatalf("bad count: %s", body)
	}
	if got := strings.Join(h.eng.Calls(), ","); got != "apply lab,plan lab" {
		t.Fatalf("the engine got %s", got)
	}
}

// TestAdministratorsOnly: any logged-in user may look; only
// administrators act and download secrets; every download is logged
// without its content.
func TestAdministratorsOnly(t *testing.T) {
	h := newHarness(t)
	secret := "apiVersion: v1\nclusters: [{cluster: {certificate-authority-data: TUlJQ1NFQ1JFVA==}}]\n"
	h.eng.secrets["lab/kubeconfig"] = []byte(secret)
	h.eng.backups["lab"] = []tenant.BackupInfo{{At: time.Now(), Size: 3000, File: "etcd-20261202T040000Z.snapshot"}}
	h.eng.update("lab", func(v *View) { v.Status.Phase = tenant.PhaseRunning })

	h.in.SetUser(plainUser)
	c := h.client()
	tok := h.token(c)
	resp, body := h.get(c, "tenants/lab")
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "You can look but not act") ||
		strings.Contains(body, "api/tenants/lab/kubeconfig") || strings.Contains(body, "backups/etcd-") {
		t.Fatalf("a user's cluster page: %d, offers downloads or lacks the notice", resp.StatusCode)
	}
	for _, p := range []string{"api/tenants/lab/kubeconfig", "api/tenants/lab/talosconfig", "api/tenants/lab/backups/etcd-20261202T040000Z.snapshot"} {
		resp, body := h.get(c, p)
		if resp.StatusCode != http.StatusForbidden || strings.Contains(body, "TUlJQ1NFQ1JFVA") {
			t.Errorf("a user downloads %s: %d", p, resp.StatusCode)
		}
	}
	resp, body = h.post(c, "api/request/destroy", url.Values{"tenant": {"lab"}, "confirm": {"lab"}},
		map[string]string{"Origin": h.in.URL, "X-Panel-Token": tok}, false)
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "only Home Assistant administrators") {
		t.Fatalf("a user's destroy: %d %s", resp.StatusCode, body)
	}
	if len(h.eng.Calls()) != 0 {
		t.Fatalf("a user's request reached the engine: %v", h.eng.Calls())
	}

	// an administrator downloads; the log says who took what, not what
	h.in.SetUser(adminUser)
	resp, body = h.get(c, "api/tenants/lab/kubeconfig")
	if resp.StatusCode != http.StatusOK || body != secret || resp.Header.Get("Cache-Control") != "no-store" ||
		resp.Header.Get("Content-Disposition") != `attachment; filename="lab-kubeconfig.yaml"` {
		t.Fatalf("an administrator's download: %d %v", resp.StatusCode, resp.Header)
	}
	resp, body = h.get(c, "api/tenants/lab/backups/etcd-20261202T040000Z.snapshot")
	if resp.StatusCode != http.StatusOK || len(body) != 3000 {
		t.Fatalf("backup download: %d, %d bytes", resp.StatusCode, len(body))
	}
	for _, bad := range []string{"api/tenants/lab/backups/..%2f..%2fsecrets", "api/tenants/lab/backups/secrets.yaml", "api/tenants/lab/secrets", "api/tenants/nope/kubeconfig"} {
		if resp, _ := h.get(c, bad); resp.StatusCode == http.StatusOK {
			t.Errorf("%s: served", bad)
		}
	}
	dl := h.logs.FilterMessage("panel: secret downloaded").All()
	if len(dl) != 2 || dl[0].ContextMap()["user"] != "alice" || dl[0].ContextMap()["file"] != "kubeconfig" ||
		dl[0].ContextMap()["bytes"] != int64(len(secret)) {
		t.Fatalf("downloads logged: %v", dl)
	}
	for _, e := range h.logs.All() {
		if b, _ := json.Marshal(e.ContextMap()); strings.Contains(e.Message+string(b), "TUlJQ1NFQ1JFVA") {
			t.Fatalf("a secret in the log: %s %s", e.Message, b)
		}
	}
	// no page carries a secret
	for _, p := range []string{"", "tenants/lab", "tenants/lab/plan", "machines", "new", "tenants/lab/edit"} {
		if _, body := h.get(c, p); strings.Contains(body, "TUlJQ1NFQ1JFVA") {
			t.Errorf("page %q carries the kubeconfig", p)
		}
	}
	// Home Assistant unreachable: nobody is an administrator
	h.ha.DropConnections()
	h.ha.SetRefuse(true)
	h.srv.admins.(*HAUsers).fetched = time.Time{}
	resp, _ = h.get(c, "api/tenants/lab/kubeconfig")
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("download without Home Assistant's answer: %d", resp.StatusCode)
	}
}

// TestIngressPath: links are relative to the ingress path the Supervisor
// gives, and nothing points at the server's root.
func TestIngressPath(t *testing.T) {
	h := newHarness(t)
	c := h.client()
	reAbs := regexp.MustCompile(`<(?:a|link|script|img|form)[^>]* (?:href|src|action)="(/[^"]*|https?:[^"]*)"`)
	for _, p := range []string{"", "tenants/lab", "tenants/lab/plan", "machines", "new", "tenants/lab/edit", "nope"} {
		resp, body := h.get(c, p)
		if !strings.Contains(body, `<base href="`+h.in.Path+`/">`) {
			t.Errorf("%s: no <base href> of the ingress path", p)
		}
		if m := reAbs.FindAllString(body, -1); len(m) > 0 {
			t.Errorf("%s: links not relative to the ingress: %v", p, m)
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") || !strings.Contains(csp, "frame-ancestors 'self'") {
			t.Errorf("%s: CSP %q", p, csp)
		}
	}
	// a hostile X-Ingress-Path is ignored
	r, _ := http.NewRequest(http.MethodGet, "/", nil)
	for _, bad := range []string{`/x"><script>`, "//evil.example", "/a/../b", "relative"} {
		r.Header.Set("X-Ingress-Path", bad)
		if got := ingressPath(r); got != "" {
			t.Errorf("ingress path %q taken as %q", bad, got)
		}
	}
}

// TestPageWeight: every page with everything it loads stays within 150 KB.
func TestPageWeight(t *testing.T) {
	h := newHarness(t)
	c := h.client()
	assets := 0
	for name := range h.srv.static {
		_, body := h.get(c, "static/"+name)
		assets += len(body)
	}
	for _, p := range []string{"", "tenants/lab", "tenants/lab/plan", "machines", "new", "tenants/lab/edit"} {
		_, body := h.get(c, p)
		if total := len(body) + assets; total > 150<<10 {
			t.Errorf("page %q weighs %d bytes with its assets, more than 150 KB", p, total)
		}
	}
}

// TestLogStream: the cluster page's stream sends the log so far, then its
// new lines as they come, and the changes.
func TestLogStream(t *testing.T) {
	h := newHarness(t)
	h.eng.emit(LogLine{Tenant: "lab", Operation: "apply", At: time.Now(), Source: "tofu", Level: "info", Text: "before"})
	c := h.client()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, h.in.Entry()+"api/tenants/lab/log", nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	events := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		var ev string
		for sc.Scan() {
			switch l := sc.Text(); {
			case strings.HasPrefix(l, "event: "):
				ev = strings.TrimPrefix(l, "event: ")
			case strings.HasPrefix(l, "data: "):
				events <- ev + " " + strings.TrimPrefix(l, "data: ")
			}
		}
		close(events)
	}()
	next := func() string {
		select {
		case e := <-events:
			return e
		case <-time.After(10 * time.Second):
			t.Fatal("no event")
		}
		return ""
	}
	if e := next(); !strings.HasPrefix(e, "reset ") || !strings.Contains(e, `"text":"before"`) {
		t.Fatalf("first event %s", e)
	}
	h.eng.emit(LogLine{Tenant: "lab", Operation: "apply", At: time.Now(), Source: "talos", Level: "warn", Text: "after"})
	if e := next(); !strings.HasPrefix(e, "line ") || !strings.Contains(e, `"text":"after"`) || !strings.Contains(e, `"level":"warn"`) {
		t.Fatalf("line event %s", e)
	}
	h.eng.update("lab", func(v *View) { v.Status.Progress = 10 })
	if e := next(); e != "change {}" {
		t.Fatalf("change event %s", e)
	}
	if resp, _ := h.get(c, "api/tenants/nope/log"); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("stream of no tenant: %d", resp.StatusCode)
	}
}

// TestEditorKeepsBytes: a valid edit is written byte for byte (CRLF
// line ends kept only where the file has them); an edit of an older
// version is refused.
func TestEditorKeepsBytes(t *testing.T) {
	h := newHarness(t)
	c := h.client()
	tok := h.token(c)
	hdr := map[string]string{"Origin": h.in.URL}
	edited := strings.Replace(labFile, "count = 1   # raised by adopting", "count = 0   # none for now", 1)
	// a textarea posts CRLF
	resp, body := h.post(c, "tenants/lab/edit", url.Values{"_token": {tok}, "base": {tenant.Sum([]byte(labFile))},
		"text": {strings.ReplaceAll(edited, "\n", "\r\n")}}, hdr, true)
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("save: %d %s", resp.StatusCode, body)
	}
	if got, _ := h.store.Read("lab"); string(got) != edited {
		t.Fatalf("written %q, want the edit with the file's LF ends", got)
	}
	resp, body = h.post(c, "tenants/lab/edit", url.Values{"_token": {tok}, "base": {tenant.Sum([]byte(labFile))},
		"text": {labFile}}, hdr, true)
	if resp.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(body, "the file changed since you opened it") {
		t.Fatalf("stale save: %d", resp.StatusCode)
	}
	// an address of another tenant: the cross-tenant rule, at its line
	cross := strings.Replace(edited, `address      = "192.168.1.31"`, `address      = "192.168.1.21"`, 1)
	_, body = h.post(c, "tenants/lab/edit", url.Values{"_token": {tok}, "base": {tenant.Sum([]byte(edited))}, "text": {cross}}, hdr, true)
	if !strings.Contains(body, "lab.toml:22:3") || !strings.Contains(body, "192.168.1.21 is already used by group") {
		t.Fatalf("duplicate address not shown at its line:\n%s", body)
	}
}

// TestHAUsers: administrators are the active users of the system-admin
// group and the owner, asked of Home Assistant's WebSocket API; the list is
// kept a while; no answer means no administrator.
func TestHAUsers(t *testing.T) {
	ha := fakeha.New("tok")
	defer ha.Close()
	ha.AddUser(fakeha.User{ID: "owner", IsOwner: true, IsActive: true, Groups: []string{fakeha.GroupUsers}})
	ha.AddUser(fakeha.User{ID: "admin", IsActive: true, Groups: []string{fakeha.GroupAdmin}})
	ha.AddUser(fakeha.User{ID: "gone", IsActive: false, Groups: []string{fakeha.GroupAdmin}})
	ha.AddUser(fakeha.User{ID: "user", IsActive: true, Groups: []string{fakeha.GroupUsers}})
	ws := connectHA(t, ha.URL, "tok")
	calls := 0
	now := time.Now()
	u := NewHAUsers(func(ctx context.Context, msg map[string]any) (json.RawMessage, error) {
		calls++
		return ws.Call(ctx, msg)
	})
	u.now = func() time.Time { return now }
	for id, want := range map[string]bool{"owner": true, "admin": true, "gone": false, "user": false, "stranger": false} {
		got, err := u.IsAdmin(context.Background(), User{ID: id})
		if err != nil || got != want {
			t.Errorf("%s: %v %v, want %v", id, got, err, want)
		}
	}
	if calls > 2 {
		t.Errorf("asked %d times for five users", calls)
	}
	if _, err := u.IsAdmin(context.Background(), User{}); err == nil {
		t.Error("a request without a user is an administrator")
	}
	failing := NewHAUsers(func(context.Context, map[string]any) (json.RawMessage, error) {
		return nil, fmt.Errorf("not connected")
	})
	if ok, err := failing.IsAdmin(context.Background(), User{ID: "admin"}); ok || err == nil {
		t.Fatal("without Home Assistant's answer someone is an administrator")
	}
}
