package pxe

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"time"

	"go.uber.org/zap"

	"github.com/rezuscloud/rezuscloud/internal/pxe/assets"
	"github.com/rezuscloud/rezuscloud/internal/pxe/boot"
)

// serveHTTP serves the scripts, the iPXE binaries (UEFI HTTP boot) and the
// boot assets until ctx ends.
func (r *Responder) serveHTTP(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{Handler: r.Handler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute,
		BaseContext: func(net.Listener) context.Context { return ctx }}
	stop := context.AfterFunc(ctx, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	})
	defer stop()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("pxe: http: %w", err)
	}
	return nil
}

// Handler is the HTTP side: GET or HEAD of
//
//	/ipxe/<arch>/<mac>/boot.ipxe                        the boot script
//	/ipxe/<binary>                                      an iPXE binary
//	/assets/<mac>/<schematic>/<version>/<asset>         a kernel or initramfs
//
// and nothing else (no machine configs: they go over the Talos API).
func (r *Responder) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ipxe/{arch}/{mac}/boot.ipxe", r.serveScript)
	mux.HandleFunc("GET /ipxe/{binary}", r.serveBinary)
	mux.HandleFunc("GET /assets/{mac}/{schematic}/{version}/{asset}", r.serveAsset)
	return mux
}

func (r *Responder) httpEvent(req *http.Request, ev Event) Event {
	ev.Step = StepHTTP
	ev.File = req.URL.Path
	if ap, err := netip.ParseAddrPort(req.RemoteAddr); err == nil {
		ev.Client = ap.Addr().Unmap()
	}
	return ev
}

func (r *Responder) refuseHTTP(w http.ResponseWriter, req *http.Request, mac string, status int, reason string) {
	http.Error(w, "rezuscloud: "+reason, status)
	r.emit(r.httpEvent(req, Event{Type: boot.Refuse, MAC: mac, Reason: reason}))
}

// retrySeconds is how long a machine waits before asking for its script
// again while its boot assets are fetched (or could not be).
const retrySeconds = 10

func (r *Responder) serveScript(w http.ResponseWriter, req *http.Request) {
	start := time.Now()
	arch := req.PathValue("arch")
	mac, err := boot.ParseMACPath(req.PathValue("mac"))
	if err != nil {
		r.refuseHTTP(w, req, "", http.StatusNotFound, err.Error())
		return
	}
	d := r.decide(mac, arch)
	var script string
	wait := false
	ev := Event{Type: d.Action, MAC: mac.String(), Reason: d.Reason}
	switch d.Action {
	case boot.Refuse:
		r.refuseHTTP(w, req, mac.String(), http.StatusForbidden, d.Reason)
		return
	case boot.LocalBoot:
		script = boot.LocalBootScript(mac)
	case boot.Maintenance:
		set, st, err := r.o.Cache.Ensure(r.runCtx(), d.Image)
		switch st {
		case assets.Ready:
			r.setProblem("")
			script = boot.MaintenanceScript(r.server, set.Image, set.Cmdline, mac)
			ev.Reason = d.Reason + ": " + d.Image.String()
		case assets.Fetching:
			// not an event: the machine asks again in a few seconds
			script = boot.WaitScript(r.server, arch, mac, "fetching "+d.Image.String()+" from the Image Factory", retrySeconds)
			r.o.Log.Info("network boot waits for its boot assets", zap.String("mac", mac.String()), zap.String("image", d.Image.String()))
			wait = true
		default:
			r.setProblem(err.Error())
			script = boot.WaitScript(r.server, arch, mac, "cannot boot: "+err.Error(), retrySeconds*6)
			ev = Event{Type: boot.Refuse, MAC: mac.String(), Reason: err.Error()}
		}
		r.publishAssets()
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write([]byte(script))
	if wait {
		return
	}
	ev.Bytes, ev.Duration = int64(len(script)), time.Since(start)
	r.emit(r.httpEvent(req, ev))
}

func (r *Responder) serveBinary(w http.ResponseWriter, req *http.Request) {
	name := req.PathValue("binary")
	if !r.bins[name] {
		r.refuseHTTP(w, req, "", http.StatusNotFound, fmt.Sprintf("%q is not an iPXE binary served here", name))
		return
	}
	f, err := r.root.Open(name)
	if err != nil {
		r.refuseHTTP(w, req, "", http.StatusNotFound, err.Error())
		return
	}
	defer f.Close()
	r.serveFile(w, req, "", name, f)
}

func (r *Responder) serveAsset(w http.ResponseWriter, req *http.Request) {
	mac, err := boot.ParseMACPath(req.PathValue("mac"))
	if err != nil {
		r.refuseHTTP(w, req, "", http.StatusNotFound, err.Error())
		return
	}
	name, schematic, version := req.PathValue("asset"), req.PathValue("schematic"), req.PathValue("version")
	arch := ""
	for _, a := range []string{"amd64", "arm64"} {
		if name == boot.KernelName(a) || name == boot.InitramfsName(a) {
			arch = a
		}
	}
	if arch == "" {
		r.refuseHTTP(w, req, mac.String(), http.StatusNotFound, fmt.Sprintf("%q is not a kernel or initramfs", name))
		return
	}
	// served only to a machine that boots this very image now
	d := r.decide(mac, arch)
	if d.Action != boot.Maintenance || d.Image.Schematic != schematic || d.Image.Version != version {
		reason := d.Reason
		if d.Action == boot.Maintenance {
			reason = fmt.Sprintf("machine %s boots %s, not %s/%s", mac, d.Image, schematic, version)
		}
		r.refuseHTTP(w, req, mac.String(), http.StatusForbidden, reason)
		return
	}
	f, err := r.o.Cache.Open(schematic, version, name)
	if err != nil {
		r.setProblem(err.Error())
		r.refuseHTTP(w, req, mac.String(), http.StatusNotFound, err.Error())
		return
	}
	defer f.Close()
	r.serveFile(w, req, mac.String(), name, f)
}

// serveFile serves a file (ranges too) and reports the bytes sent.
func (r *Responder) serveFile(w http.ResponseWriter, req *http.Request, mac, name string, f *os.File) {
	start := time.Now()
	fi, err := f.Stat()
	if err != nil {
		r.refuseHTTP(w, req, mac, http.StatusInternalServerError, err.Error())
		return
	}
	cw := &countingWriter{ResponseWriter: w}
	w.Header().Set("Content-Type", "application/octet-stream")
	http.ServeContent(cw, req, name, fi.ModTime(), f)
	ev := Event{Type: boot.Maintenance, MAC: mac, Bytes: cw.n, Duration: time.Since(start)}
	if cw.status >= 400 {
		ev.Type, ev.Reason = boot.Refuse, fmt.Sprintf("HTTP %d", cw.status)
	} else if req.Method == http.MethodGet && req.Header.Get("Range") == "" && cw.n != fi.Size() {
		ev.Type, ev.Reason = boot.Refuse, fmt.Sprintf("the machine took %d of %d bytes", cw.n, fi.Size())
	}
	r.emit(r.httpEvent(req, ev))
}

type countingWriter struct {
	http.ResponseWriter
	n      int64
	status int
}

func (c *countingWriter) WriteHeader(s int) { c.status = s; c.ResponseWriter.WriteHeader(s) }
func (c *countingWriter) Write(b []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	n, err := c.ResponseWriter.Write(b)
	c.n += int64(n)
	return n, err
}

func (r *Responder) runCtx() context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ctx
}
