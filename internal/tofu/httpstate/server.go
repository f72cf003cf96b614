package httpstate

import (
	"context"
	"crypto/md5"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
)

// MaxStateSize caps a state upload.
const MaxStateSize = 256 << 20

// Username is the basic-auth user tofu logs in as.
const Username = "rezuscloud"

// Server serves a Backend (the data folder's Store, or PostgreSQL) over tofu's http backend protocol on 127.0.0.1 at a
// random port, with basic auth under a random per-process password:
//
//	GET    /state/<name>        200 state | 404 none
//	POST   /state/<name>?ID=id  store a new version (the lock holder's ID when locked)
//	LOCK   /state/<name>        200 taken | 423 + holder's lock JSON
//	UNLOCK /state/<name>        200 released | 423 + holder's lock JSON (another ID)
type Server struct {
	store    *Store
	backend  Backend
	log      *zap.Logger
	ln       net.Listener
	srv      *http.Server
	password string
	done     chan struct{}

	mu      sync.Mutex
	refused map[string]error // the first ErrRefused of each state name since TakeRefusal
}

// Start serves store on a random loopback port until Close.
func Start(store *Store, log *zap.Logger) (*Server, error) {
	s, err := StartBackend(store.Backend(), log)
	if err != nil {
		return nil, err
	}
	s.store = store
	return s, nil
}

// StartBackend serves b on a random loopback port until Close.
func StartBackend(b Backend, log *zap.Logger) (*Server, error) {
	if log == nil {
		log = zap.NewNop()
	}
	pw := make([]byte, 24)
	if _, err := rand.Read(pw); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("state backend: %w", err)
	}
	s := &Server{backend: b, log: log, ln: ln, password: hex.EncodeToString(pw), done: make(chan struct{}),
		refused: map[string]error{}}
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("state backend stopped", zap.Error(err))
		}
	}()
	return s, nil
}

// Store is the data folder's store the server serves (nil when it serves
// another Backend).
func (s *Server) Store() *Store { return s.store }

// Backend is what the server serves.
func (s *Server) Backend() Backend { return s.backend }

// URL is the address of name's state.
func (s *Server) URL(name string) string {
	return "http://" + s.ln.Addr().String() + "/state/" + name
}

// Env is the environment that points tofu's http backend (an empty
// `"backend": {"http": {}}` block) at name's state: address, lock and unlock
// addresses and the credentials. None of it is persisted by tofu, so the port
// and password may change between processes without a new `init`; it must be
// given to every command.
func (s *Server) Env(name string) []string {
	u := s.URL(name)
	return []string{
		"TF_HTTP_ADDRESS=" + u,
		"TF_HTTP_LOCK_ADDRESS=" + u,
		"TF_HTTP_UNLOCK_ADDRESS=" + u,
		"TF_HTTP_USERNAME=" + Username,
		"TF_HTTP_PASSWORD=" + s.password,
	}
}

// TakeRefusal returns the first error of name's requests that the backend
// refused (ErrRefused) since the last call, or nil, and forgets it. tofu shows only the status
// of a refused upload ("HTTP error: 409"), so this is how the runner learns
// why.
func (s *Server) TakeRefusal(name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.refused[name]
	delete(s.refused, name)
	return err
}

// Password is the per-process basic-auth password (for redaction).
func (s *Server) Password() string { return s.password }

// Close stops the server, waiting up to ctx for requests in flight.
func (s *Server) Close(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	<-s.done
	return err
}

func (s *Server) authorized(r *http.Request) bool {
	u, p, ok := r.BasicAuth()
	return ok && subtle.ConstantTimeCompare([]byte(u), []byte(Username)) == 1 &&
		subtle.ConstantTimeCompare([]byte(p), []byte(s.password)) == 1
}

// ServeHTTP implements the protocol.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !s.authorized(r) {
		w.Header().Set("WWW-Authenticate", `Basic realm="rezuscloud state"`)
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	name, ok := strings.CutPrefix(r.URL.Path, "/state/")
	if !ok || !validName.MatchString(name) {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	status := s.serve(w, r, name)
	s.log.Debug("state backend", zap.String("method", r.Method), zap.String("state", name), zap.Int("status", status))
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request, name string) int {
	switch r.Method {
	case http.MethodGet:
		data, ok, err := s.backend.Get(r.Context(), name)
		if err != nil {
			return s.fail(w, r, name, err)
		}
		if !ok {
			http.Error(w, "no state", http.StatusNotFound)
			return http.StatusNotFound
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(data)
		return http.StatusOK

	case http.MethodPost, http.MethodPut:
		body, err := readBody(w, r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return http.StatusBadRequest
		}
		if !json.Valid(body) {
			http.Error(w, "state is not JSON", http.StatusBadRequest)
			return http.StatusBadRequest
		}
		if err := s.backend.Put(r.Context(), name, body, r.URL.Query().Get("ID")); err != nil {
			return s.fail(w, r, name, err)
		}
		w.WriteHeader(http.StatusOK)
		return http.StatusOK

	case "LOCK":
		body, info, err := readLock(w, r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return http.StatusBadRequest
		}
		if err := s.backend.Lock(r.Context(), name, info, body); err != nil {
			return s.fail(w, r, name, err)
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
		return http.StatusOK

	case "UNLOCK":
		body, info, err := readLock(w, r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return http.StatusBadRequest
		}
		if err := s.backend.Unlock(r.Context(), name, info.ID); err != nil {
			return s.fail(w, r, name, err)
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
		return http.StatusOK

	default:
		// DELETE (workspace deletion) is not offered: the http backend has
		// no workspaces, and a state is never removed over the wire.
		w.Header().Set("Allow", "GET, POST, LOCK, UNLOCK")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return http.StatusMethodNotAllowed
	}
}

// fail answers a lock conflict with 423 and the holder's lock JSON (what
// tofu decodes to show who holds it); a refusal (ErrRefused) with 409
// Conflict, or 403 Forbidden to LOCK (tofu reads 409 there as "already
// locked"), which tofu does not retry; anything else (the backend is
// unavailable) with 500, which tofu's http backend retries.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, name string, err error) int {
	var le *LockError
	if errors.As(err, &le) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusLocked)
		raw := le.raw
		if raw == nil {
			raw, _ = json.Marshal(le.Holder)
		}
		_, _ = w.Write(raw)
		return http.StatusLocked
	}
	if errors.Is(err, ErrRefused) {
		s.mu.Lock()
		if s.refused[name] == nil {
			s.refused[name] = err // the first is the cause (an upload; tofu's unlock follows)
		}
		s.mu.Unlock()
		s.log.Warn("state backend refused", zap.String("method", r.Method), zap.String("state", name), zap.Error(err))
		code := http.StatusConflict
		if r.Method == "LOCK" {
			code = http.StatusForbidden
		}
		http.Error(w, err.Error(), code)
		return code
	}
	s.log.Error("state backend", zap.Error(err))
	http.Error(w, "state backend error", http.StatusInternalServerError)
	return http.StatusInternalServerError
}

func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxStateSize))
	if err != nil {
		return nil, err
	}
	if want := r.Header.Get("Content-MD5"); want != "" {
		sum := md5.Sum(body)
		if base64.StdEncoding.EncodeToString(sum[:]) != want {
			return nil, errors.New("Content-MD5 mismatch")
		}
	}
	return body, nil
}

func readLock(w http.ResponseWriter, r *http.Request) ([]byte, LockInfo, error) {
	body, err := readBody(w, r)
	if err != nil {
		return nil, LockInfo{}, err
	}
	var info LockInfo
	if err := json.Unmarshal(body, &info); err != nil {
		return nil, LockInfo{}, fmt.Errorf("lock body: %w", err)
	}
	if info.ID == "" {
		return nil, LockInfo{}, errors.New("lock body: no ID")
	}
	return body, info, nil
}
