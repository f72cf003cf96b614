package mcp

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"
)

// Path is where the server answers: Streamable HTTP with the token in the
// Authorization header, or at Path + "/" + token for a client that cannot
// send a header (Home Assistant's MCP client integration takes a URL only).
const Path = "/mcp"

// peerHeader carries the client's address from the HTTP layer to the tool
// handlers (whatever a client sends under this name is dropped first).
const peerHeader = "X-Rezuscloud-Peer"

// sessionTimeout closes sessions a client left open (Home Assistant's
// client opens one per call and closes it; a desktop agent keeps one).
const sessionTimeout = 30 * time.Minute

// pendingFor bounds how long a write queued here counts as "queued" while
// the view does not show it running yet.
const pendingFor = 2 * time.Minute

// Options configure a Server.
type Options struct {
	Source  Source
	Command Command
	// Token is the bearer token (config.MCPToken); without one every HTTP
	// request is refused (the tools still serve Call, the Assist scripts).
	Token string
	// Writes offers the write tools; off, they do not exist.
	Writes bool
	// Version is rezuscloud's, as the server's implementation version.
	Version string
	// Log gets every refused request and every write; nil: none.
	Log *zap.Logger
	// Now is the clock (tests); nil: time.Now.
	Now func() time.Time
}

// Server is the MCP server. Create it with New; serve Handler, or call
// Serve with a listener.
type Server struct {
	opts    Options
	log     *zap.Logger
	sdk     *sdk.Server
	handler http.Handler
	tools   map[string]*tool
	order   []string

	mu      sync.Mutex
	busy    map[string]bool     // writes in flight here, by tenant
	pending map[string]queuedOp // writes queued here not yet seen running
}

// queuedOp is a write this server queued, until the view shows it.
type queuedOp struct {
	at     time.Time
	action string
	last   time.Time // the tenant's last operation time when it was queued
}

// New builds the server and its tools.
func New(opts Options) (*Server, error) {
	if opts.Source == nil || opts.Command == nil {
		return nil, errors.New("mcp: a source and a command path are required")
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	s := &Server{opts: opts, log: opts.Log, tools: map[string]*tool{}, busy: map[string]bool{},
		pending: map[string]queuedOp{}}
	if s.log == nil {
		s.log = zap.NewNop()
	}
	version := opts.Version
	if version == "" {
		version = "dev"
	}
	s.sdk = sdk.NewServer(&sdk.Implementation{Name: "rezuscloud", Title: "rezuscloud clusters", Version: version},
		&sdk.ServerOptions{Instructions: instructions(opts.Writes), Capabilities: &sdk.ServerCapabilities{}})
	s.addTools()
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s.sdk },
		&sdk.StreamableHTTPOptions{SessionTimeout: sessionTimeout, MaxRequestBodyBytes: 1 << 20, JSONResponse: true})
	mux := http.NewServeMux()
	mux.Handle(Path, s.auth(h))
	mux.Handle(Path+"/", s.auth(h))
	s.handler = mux
	return s, nil
}

func instructions(writes bool) string {
	s := "rezuscloud runs Talos Linux Kubernetes clusters for this home. Call list_clusters to learn the " +
		"cluster names, cluster_status for one cluster's nodes, operation and problems with their reasons, " +
		"pending_plan for what an apply would change, list_machines for machines found on the network."
	if writes {
		return s + " The write tools queue one operation each on a named cluster and answer with what was " +
			"queued; a cluster that is busy refuses them. Nothing here can destroy a cluster or touch a " +
			"control plane's power."
	}
	return s + " Writes are turned off: these tools only read."
}

// Handler is the HTTP handler: Path with the bearer token.
func (s *Server) Handler() http.Handler { return s.handler }

// Tools lists the tools the server offers, in the order they were added.
func (s *Server) Tools() []string { return append([]string(nil), s.order...) }

// Serve serves on ln until ctx ends, then shuts down within a few seconds.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	hs := &http.Server{Handler: s.handler, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		BaseContext: func(net.Listener) context.Context { return ctx }}
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
	}()
	err := hs.Serve(ln)
	<-done
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// auth lets a request through with the token in the Authorization header
// (Bearer) or in the path (Path/<token>), compared in constant time. A
// missing or wrong token gets 401 and a log line that never holds it.
func (s *Server) auth(next http.Handler) http.Handler {
	want := []byte(s.opts.Token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Del(peerHeader)
		var got string
		where := "header"
		shown := r.URL.Path
		if rest, ok := strings.CutPrefix(r.URL.Path, Path+"/"); ok {
			got, where, shown = rest, "path", Path+"/<token>"
		} else if h := r.Header.Get("Authorization"); h != "" {
			if scheme, tok, ok := strings.Cut(h, " "); ok && strings.EqualFold(scheme, "Bearer") {
				got = strings.TrimSpace(tok)
			}
		}
		reason := ""
		switch {
		case len(want) == 0:
			reason = "no token configured"
		case got == "":
			reason = "no token"
		case subtle.ConstantTimeCompare([]byte(got), want) != 1:
			reason = "wrong token in the " + where
		}
		if reason != "" {
			s.log.Warn("MCP request refused", zap.String("reason", reason), zap.String("remote", r.RemoteAddr),
				zap.String("method", r.Method), zap.String("path", shown), zap.String("user_agent", r.UserAgent()))
			w.Header().Set("WWW-Authenticate", `Bearer realm="rezuscloud"`)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_ = json.NewEncoder(w).Encode(map[string]string{"error": "unauthorized: send the rezuscloud MCP token " +
				"as Authorization: Bearer <token>, or use the URL " + Path + "/<token>"})
			return
		}
		r.Header.Set(peerHeader, r.RemoteAddr)
		next.ServeHTTP(w, r)
	})
}

// Caller is who calls a tool, for the log.
type Caller struct {
	Via    string // "mcp" or "assist script"
	Client string // the MCP client's name and version
	Addr   string // its address
	User   string // the Home Assistant user id behind an Assist script
}

func (c Caller) fields() []zap.Field {
	f := []zap.Field{zap.String("via", c.Via)}
	if c.Client != "" {
		f = append(f, zap.String("client", c.Client))
	}
	if c.Addr != "" {
		f = append(f, zap.String("remote", c.Addr))
	}
	if c.User != "" {
		f = append(f, zap.String("ha_user", c.User))
	}
	return f
}

func callerOf(req *sdk.CallToolRequest) Caller {
	c := Caller{Via: "mcp"}
	if req == nil {
		return c
	}
	if ci := req.ClientInfo(); ci != nil {
		c.Client = strings.TrimSpace(ci.Name + " " + ci.Version)
	}
	if req.Extra != nil && req.Extra.Header != nil {
		c.Addr = req.Extra.Header.Get(peerHeader)
	}
	return c
}

// Call runs a tool by name with JSON arguments, as an MCP client's call
// would (the same input schema, the same guard): the path of the Assist
// scripts. A write tool while writes are off is refused.
func (s *Server) Call(ctx context.Context, c Caller, name string, args json.RawMessage) (any, error) {
	t, ok := s.tools[name]
	if !ok {
		if _, known := allTools[name]; known {
			return nil, fmt.Errorf("%s changes clusters, and writes for AI assistants are off "+
				"(turn on the add-on option mcp.writes)", name)
		}
		return nil, fmt.Errorf("no tool %q", name)
	}
	return t.callJSON(ctx, c, args)
}
