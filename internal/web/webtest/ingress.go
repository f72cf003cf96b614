// Package webtest drives the panel the way Home Assistant serves it: a
// stand-in for Core's and the Supervisor's ingress proxies in front of the
// panel (Ingress), and a real headless Chromium driven with chromedp
// (Browser), with the steps of the panel's flows as helpers (flows.go) so
// that a test against the fake engine and one against the built binary
// share them.
package webtest

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"html/template"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// User is the Home Assistant user of the ingress session.
type User struct{ ID, Name, DisplayName string }

// Ingress stands in for Home Assistant's ingress, following
// homeassistant/components/hassio/ingress.py (Core) and
// supervisor/api/ingress.py (the Supervisor): the browser asks
// <URL>/api/hassio_ingress/<token>/<path> with its ingress_session cookie;
// the prefix is stripped and the request forwarded to the panel with
// X-Ingress-Path, X-Hass-Source, X-Forwarded-For/-Host/-Proto and the
// session user's X-Remote-User-Id/-Name/-Display-Name (any the browser sent
// are dropped), from the Supervisor's own address (From, a loopback
// address standing in for 172.30.32.2). Redirects are passed on, not
// followed; responses stream. Its root serves a page standing in for Home
// Assistant's frontend, which shows the panel in an iframe with Home
// Assistant's theme variables (?theme=dark for the dark one); /session
// opens an ingress session (sets the cookie) and redirects to the panel.
type Ingress struct {
	// URL is Home Assistant's origin, http://127.0.0.1:<port>.
	URL string
	// Path is the ingress path, /api/hassio_ingress/<token>.
	Path string
	// From is the address the proxy connects to the panel from.
	From netip.Addr

	srv     *http.Server
	session string
	mu      sync.Mutex
	user    User
}

// Entry is the panel's URL in the browser.
func (in *Ingress) Entry() string { return in.URL + in.Path + "/" }

// SetUser changes the session's user (the next request is theirs).
func (in *Ingress) SetUser(u User) {
	in.mu.Lock()
	in.user = u
	in.mu.Unlock()
}

// NewIngress starts an ingress in front of the panel at panelAddr
// (host:port), connecting to it from the loopback address from (e.g.
// 127.0.0.2). It stops with the test.
func NewIngress(t testing.TB, panelAddr string, from netip.Addr, user User) *Ingress {
	t.Helper()
	tok := make([]byte, 16)
	_, _ = rand.Read(tok)
	sess := make([]byte, 16)
	_, _ = rand.Read(sess)
	in := &Ingress{Path: "/api/hassio_ingress/" + hex.EncodeToString(tok), From: from,
		session: hex.EncodeToString(sess), user: user}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	in.URL = "http://" + ln.Addr().String()
	target := &url.URL{Scheme: "http", Host: panelAddr}
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: from.AsSlice()}, Timeout: 5 * time.Second}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			in.mu.Lock()
			u := in.user
			in.mu.Unlock()
			pr.Out.URL.Scheme, pr.Out.URL.Host = target.Scheme, target.Host
			pr.Out.URL.Path = "/" + strings.TrimPrefix(strings.TrimPrefix(pr.In.URL.Path, in.Path), "/")
			pr.Out.URL.RawPath = ""
			pr.Out.Host = pr.In.Host // both proxies pass the browser's Host on
			h := pr.Out.Header
			for _, k := range []string{"X-Remote-User-Id", "X-Remote-User-Name", "X-Remote-User-Display-Name"} {
				h.Del(k)
			}
			h.Set("X-Ingress-Path", in.Path)
			h.Set("X-Hass-Source", "core.ingress")
			h.Set("X-Forwarded-Host", pr.In.Host)
			h.Set("X-Forwarded-Proto", "http")
			if host, _, err := net.SplitHostPort(pr.In.RemoteAddr); err == nil {
				h.Set("X-Forwarded-For", host)
			}
			if u.ID != "" {
				h.Set("X-Remote-User-Id", u.ID)
				h.Set("X-Remote-User-Name", u.Name)
				h.Set("X-Remote-User-Display-Name", u.DisplayName)
			}
		},
		Transport:     &http.Transport{DialContext: dialer.DialContext, DisableCompression: true},
		FlushInterval: -1,
		ErrorLog:      nil,
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/", in.frontend)
	mux.HandleFunc("/session", func(w http.ResponseWriter, r *http.Request) {
		in.setCookie(w)
		http.Redirect(w, r, in.Path+"/", http.StatusSeeOther)
	})
	mux.HandleFunc(in.Path+"/", func(w http.ResponseWriter, r *http.Request) {
		if c, err := r.Cookie("ingress_session"); err != nil || c.Value != in.session {
			http.Error(w, "401: Unauthorized", http.StatusUnauthorized) // the Supervisor's answer
			return
		}
		proxy.ServeHTTP(w, r)
	})
	mux.HandleFunc(in.Path, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, in.Path+"/", http.StatusMovedPermanently)
	})
	in.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = in.srv.Serve(ln) }()
	t.Cleanup(func() { _ = in.srv.Close() })
	return in
}

// setCookie opens the ingress session as Home Assistant's frontend does
// (Strict, scoped to the ingress paths).
func (in *Ingress) setCookie(w http.ResponseWriter) {
	http.SetCookie(w, &http.Cookie{Name: "ingress_session", Value: in.session, Path: "/api/hassio_ingress/",
		HttpOnly: true, SameSite: http.SameSiteStrictMode})
}

// themes are a few of Home Assistant's theme variables, light and dark.
var themes = map[string]map[string]string{
	"light": {"--primary-background-color": "#fafafa", "--card-background-color": "#ffffff",
		"--primary-text-color": "#212121", "--secondary-text-color": "#727272", "--divider-color": "rgba(0, 0, 0, 0.12)",
		"--primary-color": "#03a9f4", "--text-primary-color": "#ffffff", "--error-color": "#db4437",
		"--success-color": "#43a047", "--warning-color": "#ffa600", "--info-color": "#039be5",
		"--secondary-background-color": "#e5e5e5"},
	"dark": {"--primary-background-color": "#111111", "--card-background-color": "#1c1c1c",
		"--primary-text-color": "#e1e1e1", "--secondary-text-color": "#9b9b9b", "--divider-color": "rgba(225, 225, 225, 0.12)",
		"--primary-color": "#03a9f4", "--text-primary-color": "#ffffff", "--error-color": "#ef5350",
		"--success-color": "#66bb6a", "--warning-color": "#ffa600", "--info-color": "#4fc3f7",
		"--secondary-background-color": "#282828"},
}

var frontendPage = template.Must(template.New("ha").Parse(`<!doctype html>
<html lang="en" style="{{.Vars}}"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Home Assistant (stand-in)</title>
<style>html,body{margin:0;height:100%;background:var(--primary-background-color);color:var(--primary-text-color);font-family:sans-serif}
.top{height:56px;display:flex;align-items:center;padding:0 16px;background:var(--primary-color);color:#fff}
iframe{border:0;width:100%;height:calc(100% - 56px);display:block}</style></head>
<body><div class="top">Home Assistant · Clusters</div><iframe title="Clusters" src="{{.Src}}"></iframe></body></html>`))

// frontend serves the stand-in for Home Assistant's frontend.
func (in *Ingress) frontend(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/" {
		http.NotFound(w, r)
		return
	}
	theme := themes["light"]
	if r.URL.Query().Get("theme") == "dark" {
		theme = themes["dark"]
	}
	var vars strings.Builder
	for k, v := range theme {
		fmt.Fprintf(&vars, "%s: %s; ", k, v)
	}
	in.setCookie(w)
	src := in.Path + "/" + strings.TrimPrefix(r.URL.Query().Get("page"), "/")
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_ = frontendPage.Execute(w, map[string]any{"Vars": template.CSS(vars.String()), "Src": src})
}
