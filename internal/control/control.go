// Package control is the add-on's control socket: a Unix socket that only
// the add-on's own container can open, for the commands the Supervisor
// runs inside the container (backup_pre: `rezuscloud backup-pre`). It has
// no port and no token to leak: the socket lives in the container's /run
// (or the data folder outside the Supervisor), is created 0600 in a 0700
// folder, and every connection's peer must run as the add-on's own user
// (SO_PEERCRED).
//
// The one command, POST /backup-pre, takes a fresh etcd snapshot of every
// running cluster through the one command path (action backup), waits for
// them within a bound, and reports each; it never removes a snapshot, so
// a failed one leaves the last good one.
package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/rezuscloud/rezuscloud/internal/hass"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
	"github.com/rezuscloud/rezuscloud/internal/web"
)

// AddonSocket is the socket in the add-on's container (/run is the
// container's own, and not in its backup).
const AddonSocket = "/run/rezuscloud/control.sock"

// SocketPath is the control socket: AddonSocket in the add-on, else in the
// data folder.
func SocketPath(dataDir string, addon bool) string {
	if addon {
		return AddonSocket
	}
	return filepath.Join(dataDir, "control.sock")
}

// Views is what backup-pre reads of the engine (web.Source has it).
type Views interface {
	Views() []web.View
	Changed() <-chan struct{}
}

// DefaultBound is how long backup-pre waits for the snapshots. The
// Supervisor waits for backup_pre without a limit of its own (its Docker
// client gives up after 15 minutes) while the whole Home Assistant backup
// waits; an etcd snapshot takes seconds, so two minutes is plenty, and a
// cluster that does not answer in that time must not hold the backup.
const DefaultBound = 2 * time.Minute

// Result is one cluster's snapshot.
type Result struct {
	Tenant string `json:"tenant"`
	// Status: ok, failed, skipped (no running cluster) or timeout.
	Status  string `json:"status"`
	File    string `json:"file,omitempty"` // the snapshot taken (ok)
	Message string `json:"message,omitempty"`
	// Kept is the newest good snapshot when no new one was taken.
	Kept string `json:"kept,omitempty"`
}

// Report is the answer of backup-pre.
type Report struct {
	Results []Result      `json:"results"`
	Took    time.Duration `json:"took_ns"`
}

// Backup takes an etcd snapshot of every running cluster through cmd (the
// command path) and waits, at most until ctx ends, for each to be written.
func Backup(ctx context.Context, src Views, cmd web.Command, now func() time.Time) Report {
	start := now()
	since := start.Truncate(time.Second) // snapshot times are whole seconds
	var rep Report
	pending := map[string]int{} // tenant -> index in rep.Results
	for _, v := range src.Views() {
		r := Result{Tenant: v.Name}
		switch v.Status.Phase {
		case tenant.PhaseRunning, tenant.PhaseDegraded, tenant.PhaseUpgrading:
			resp := cmd(ctx, hass.Request{Action: hass.ActionBackup, Tenant: v.Name})
			if !resp.OK() {
				r.Status, r.Message = "failed", resp.Error
			} else {
				pending[v.Name] = len(rep.Results)
			}
		default:
			r.Status, r.Message = "skipped", fmt.Sprintf("no running cluster (phase %s)", v.Status.Phase)
		}
		if b := v.Status.Backup; b != nil {
			r.Kept = b.File
		}
		rep.Results = append(rep.Results, r)
	}
	for len(pending) > 0 {
		changed := src.Changed()
		for _, v := range src.Views() {
			i, ok := pending[v.Name]
			if !ok {
				continue
			}
			r := &rep.Results[i]
			if b := v.Status.Backup; b != nil && !b.At.Before(since) {
				r.Status, r.File, r.Kept = "ok", b.File, ""
				delete(pending, v.Name)
			} else if lo := v.Status.LastOperation; lo != nil && lo.Name == hass.ActionBackup && !lo.At.Before(start) &&
				lo.Result != tenant.ResultSucceeded {
				r.Status, r.Message = "failed", lo.Message
				delete(pending, v.Name)
			}
		}
		if len(pending) == 0 {
			break
		}
		select {
		case <-changed:
		case <-ctx.Done():
			for _, i := range pending {
				rep.Results[i].Status = "timeout"
				rep.Results[i].Message = "no snapshot within the time backup_pre has"
			}
			pending = nil
		}
	}
	rep.Took = now().Sub(start)
	return rep
}

// Server serves the control socket.
type Server struct {
	Views   Views
	Command web.Command
	Log     *zap.Logger
	// Bound caps a backup-pre's wait (DefaultBound when zero).
	Bound time.Duration
}

// Listen creates the socket at path: its folder 0700, the socket 0600, an
// old socket left by a killed add-on replaced.
func Listen(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("control socket: %s exists and is not a socket", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("control socket: %s is in use by another rezuscloud", path)
		}
		_ = os.Remove(path)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("control socket: %w", err)
	}
	return &peerListener{Listener: ln}, nil
}

// Serve answers on ln until ctx ends.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	if s.Log == nil {
		s.Log = zap.NewNop()
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /backup-pre", s.backupPre)
	return web.Serve(ctx, ln, mux)
}

func (s *Server) backupPre(w http.ResponseWriter, r *http.Request) {
	bound := s.Bound
	if bound <= 0 {
		bound = DefaultBound
	}
	if d, err := time.ParseDuration(r.URL.Query().Get("wait")); err == nil && d > 0 && d < bound {
		bound = d
	}
	ctx, cancel := context.WithTimeout(r.Context(), bound)
	defer cancel()
	s.Log.Info("backup_pre: etcd snapshots of every running cluster", zap.Duration("bound", bound))
	rep := Backup(ctx, s.Views, s.Command, time.Now)
	for _, res := range rep.Results {
		s.Log.Info("backup_pre", zap.String("tenant", res.Tenant), zap.String("status", res.Status),
			zap.String("file", res.File), zap.String("message", res.Message))
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(rep)
}

// Ask runs backup-pre on the add-on behind the socket at path, waiting at
// most wait for the snapshots.
func Ask(ctx context.Context, path string, wait time.Duration) (Report, error) {
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", path)
	}}, Timeout: wait + 15*time.Second}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://control/backup-pre?wait="+wait.String(), nil)
	if err != nil {
		return Report{}, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return Report{}, fmt.Errorf("the add-on does not answer on %s: %w", path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return Report{}, fmt.Errorf("the add-on answered %s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	var rep Report
	if err := json.Unmarshal(body, &rep); err != nil {
		return Report{}, fmt.Errorf("the add-on's answer: %w", err)
	}
	return rep, nil
}

// errPeer refuses a connection from another user.
var errPeer = errors.New("control socket: the peer is not the add-on's own user")

// peerListener accepts only peers that run as this process's user.
type peerListener struct{ net.Listener }

func (l *peerListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if err := checkPeer(c); err != nil {
			c.Close()
			continue
		}
		return c, nil
	}
}
