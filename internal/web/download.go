package web

import (
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"

	"go.uber.org/zap"
)

// Downloads of secrets (a kubeconfig or talosconfig is the key to its
// cluster; an etcd snapshot holds every Kubernetes secret) are for
// administrators only, are never cached, and are logged with who took
// what and how many bytes, never what. No page holds a secret: pages
// only link to these.

// secret serves api/tenants/<t>/kubeconfig and …/talosconfig.
func (s *Server) secret(w http.ResponseWriter, r *http.Request) {
	name, kind := r.PathValue("t"), r.PathValue("kind")
	if kind != "kubeconfig" && kind != "talosconfig" {
		http.NotFound(w, r)
		return
	}
	if !s.downloadAllowed(w, r, name, kind) {
		return
	}
	data, err := s.src.Secret(name, kind)
	if err != nil {
		s.log.Warn("panel: download failed", zap.String("tenant", name), zap.String("file", kind),
			zap.String("user", userOf(r).Label()), zap.Error(err))
		http.Error(w, fmt.Sprintf("404 %s of %s: %v", kind, name, err), http.StatusNotFound)
		return
	}
	attach(w, name+"-"+kind+".yaml", "application/yaml", int64(len(data)))
	n, _ := w.Write(data)
	s.logDownload(r, name, kind, int64(n))
}

// reBackupFile is an etcd snapshot's file name (engine/backup.go).
var reBackupFile = regexp.MustCompile(`^etcd-\d{8}T\d{6}Z\.snapshot$`)

// backup serves api/tenants/<t>/backups/<file>.
func (s *Server) backup(w http.ResponseWriter, r *http.Request) {
	name, file := r.PathValue("t"), r.PathValue("file")
	if !reBackupFile.MatchString(file) {
		http.NotFound(w, r)
		return
	}
	if !s.downloadAllowed(w, r, name, file) {
		return
	}
	rc, err := s.src.OpenBackup(name, file)
	if err != nil {
		http.Error(w, fmt.Sprintf("404 backup %s of %s: %v", file, name, err), http.StatusNotFound)
		return
	}
	defer rc.Close()
	var size int64 = -1
	if bs, err := s.src.Backups(name); err == nil {
		for _, b := range bs {
			if b.File == file {
				size = b.Size
			}
		}
	}
	attach(w, name+"-"+file, "application/octet-stream", size)
	n, err := io.Copy(w, rc)
	if err != nil {
		s.log.Warn("panel: backup download cut short", zap.String("tenant", name), zap.String("file", file), zap.Error(err))
	}
	s.logDownload(r, name, file, n)
}

// downloadAllowed refuses a download to anyone but an administrator.
func (s *Server) downloadAllowed(w http.ResponseWriter, r *http.Request, name, what string) bool {
	if _, ok := s.src.View(name); !ok {
		http.NotFound(w, r)
		return false
	}
	if err := s.mustBeAdmin(r); err != nil {
		s.log.Warn("panel: download refused", zap.String("tenant", name), zap.String("file", what),
			zap.String("user", userOf(r).Label()), zap.Error(err))
		http.Error(w, "403 "+err.Error(), http.StatusForbidden)
		return false
	}
	return true
}

func attach(w http.ResponseWriter, filename, contentType string, size int64) {
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set("Content-Disposition", `attachment; filename="`+filename+`"`)
	h.Set("Cache-Control", "no-store")
	if size >= 0 {
		h.Set("Content-Length", strconv.FormatInt(size, 10))
	}
}

func (s *Server) logDownload(r *http.Request, name, what string, n int64) {
	u := userOf(r)
	s.log.Info("panel: secret downloaded", zap.String("tenant", name), zap.String("file", what),
		zap.String("user", u.Label()), zap.String("user_id", u.ID), zap.Int64("bytes", n))
}
