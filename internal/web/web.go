// Package web is rezuscloud's panel in Home Assistant's sidebar
// (docs/design.md §11.3): server-rendered pages behind the Supervisor's
// ingress, for what entities cannot show well: the pending plan as a diff,
// the live log of an operation, the machines discovery found, a form for a
// new cluster and an editor for a tenant file, and the kubeconfig and
// talosconfig downloads.
//
// It reads the engine through Source, writes tenant files through Files
// (the store, with the watcher's validation), and does everything else
// through Command, the one command path of the MQTT buttons and the
// request API. Pages are html/template with a little plain CSS and
// JavaScript of its own, embedded: no build step, no framework, nothing
// fetched from the internet. Without JavaScript every page and form still
// works (forms post and redirect); with it, actions answer in place and
// pages follow the engine live (server-sent events).
package web

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"go.uber.org/zap"
)

//go:embed assets
var assets embed.FS

// Options configure a Server.
type Options struct {
	Source  Source
	Command Command
	Files   Files
	// Admins tells administrators (HAUsers under the Supervisor, Operator
	// outside it); nil: nobody is one, the panel is read-only.
	Admins Admins
	// Trusted are the peers that may connect (the Supervisor's ingress
	// gateway); every other peer is refused.
	Trusted []netip.Prefix
	// Version is rezuscloud's version, shown in the footer.
	Version string
	Log     *zap.Logger
	// Now is the clock (tests); nil: time.Now.
	Now func() time.Time
}

// Server is the panel's HTTP handler.
type Server struct {
	src     Source
	cmd     Command
	files   Files
	admins  Admins
	trusted []netip.Prefix
	version string
	log     *zap.Logger
	now     func() time.Time

	key      []byte // the same-origin tokens' HMAC key, new at every start
	pages    map[string]*template.Template
	static   map[string]asset
	assetVer string
	mux      *http.ServeMux
}

type asset struct {
	body        []byte
	contentType string
}

// New makes the panel's handler.
func New(o Options) (*Server, error) {
	if o.Source == nil || o.Command == nil || o.Files == nil {
		return nil, errors.New("panel: Source, Command and Files are required")
	}
	if len(o.Trusted) == 0 {
		return nil, errors.New("panel: no trusted peer: nobody could connect")
	}
	s := &Server{src: o.Source, cmd: o.Command, files: o.Files, admins: o.Admins, trusted: o.Trusted,
		version: o.Version, log: o.Log, now: o.Now, key: make([]byte, 32)}
	if s.log == nil {
		s.log = zap.NewNop()
	}
	if s.now == nil {
		s.now = time.Now
	}
	if _, err := rand.Read(s.key); err != nil {
		return nil, fmt.Errorf("panel: token key: %w", err)
	}
	if err := s.loadAssets(); err != nil {
		return nil, err
	}
	s.routes()
	return s, nil
}

// loadAssets parses the templates and reads the static files; the static
// files' URLs carry a hash of their contents, so they can be cached.
func (s *Server) loadAssets() error {
	base, err := template.New("").Funcs(funcs).ParseFS(assets, "assets/layout.html")
	if err != nil {
		return fmt.Errorf("panel: templates: %w", err)
	}
	s.pages = map[string]*template.Template{}
	for _, p := range []string{"overview", "cluster", "plan", "machines", "new", "edit", "error"} {
		t, err := template.Must(base.Clone()).ParseFS(assets, "assets/"+p+".html")
		if err != nil {
			return fmt.Errorf("panel: template %s: %w", p, err)
		}
		s.pages[p] = t
	}
	s.static = map[string]asset{}
	h := sha256.New()
	err = fs.WalkDir(assets, "assets/static", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := assets.ReadFile(path)
		if err != nil {
			return err
		}
		name := strings.TrimPrefix(path, "assets/static/")
		ct := "application/octet-stream"
		switch {
		case strings.HasSuffix(name, ".css"):
			ct = "text/css; charset=utf-8"
		case strings.HasSuffix(name, ".js"):
			ct = "text/javascript; charset=utf-8"
		case strings.HasSuffix(name, ".svg"):
			ct = "image/svg+xml"
		}
		s.static[name] = asset{body: b, contentType: ct}
		h.Write([]byte(name))
		h.Write(b)
		return nil
	})
	if err != nil {
		return fmt.Errorf("panel: static files: %w", err)
	}
	s.assetVer = hex.EncodeToString(h.Sum(nil))[:12]
	return nil
}

func (s *Server) routes() {
	m := http.NewServeMux()
	m.HandleFunc("GET /{$}", s.overview)
	m.HandleFunc("GET /tenants/{t}", s.cluster)
	m.HandleFunc("GET /tenants/{t}/plan", s.plan)
	m.HandleFunc("GET /tenants/{t}/edit", s.editForm)
	m.HandleFunc("POST /tenants/{t}/edit", s.editSave)
	m.HandleFunc("GET /machines", s.machines)
	m.HandleFunc("GET /new", s.newForm)
	m.HandleFunc("POST /new", s.newSave)
	m.HandleFunc("POST /api/request/{action}", s.request)
	m.HandleFunc("GET /api/events", s.events)
	m.HandleFunc("GET /api/tenants/{t}/log", s.logStream)
	m.HandleFunc("GET /api/tenants/{t}/{kind}", s.secret)
	m.HandleFunc("GET /api/tenants/{t}/backups/{file}", s.backup)
	m.HandleFunc("GET /static/{file}", s.staticFile)
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.fail(w, r, http.StatusNotFound, "There is no such page.")
	})
	s.mux = m
}

// csp allows nothing from anywhere else: no CDN, no inline script, no
// frame but Home Assistant's own (the same origin).
const csp = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; form-action 'self'; base-uri 'self'; frame-ancestors 'self'; object-src 'none'"

// ServeHTTP refuses untrusted peers, then serves the panel.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !s.trustedPeer(r) {
		s.log.Warn("panel: connection refused: not a trusted peer", zap.String("peer", r.RemoteAddr))
		w.Header().Set("Connection", "close")
		http.Error(w, "403 forbidden: only Home Assistant's ingress may connect to this panel", http.StatusForbidden)
		return
	}
	h := w.Header()
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "SAMEORIGIN")
	h.Set("Referrer-Policy", "same-origin")
	r.Body = http.MaxBytesReader(w, r.Body, 4<<20)
	s.mux.ServeHTTP(w, s.withVerdict(r))
}

func (s *Server) staticFile(w http.ResponseWriter, r *http.Request) {
	a, ok := s.static[r.PathValue("file")]
	if !ok {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", a.contentType)
	if r.URL.Query().Get("v") == s.assetVer {
		w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
	} else {
		w.Header().Set("Cache-Control", "no-cache")
	}
	_, _ = w.Write(a.body)
}

// Serve serves handler on ln until ctx ends, then stops: streams end at
// once, requests in flight get a few seconds.
func Serve(ctx context.Context, ln net.Listener, handler http.Handler) error {
	base, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       time.Minute,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		BaseContext:       func(net.Listener) context.Context { return base },
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	cancel() // ends the event streams
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	err := srv.Shutdown(sctx)
	if e := <-errc; !errors.Is(e, http.ErrServerClosed) && err == nil {
		err = e
	}
	return err
}
