// Package factorytest is a stand-in Image Factory for tests and demos, on
// loopback: it serves boot assets at the factory's paths
// (GET /image/<schematic>/<version>/<name>, e.g. kernel-amd64,
// initramfs-amd64.xz, cmdline-metal-amd64), their checksums as the
// factory's checksum endpoint does (<name>.sha256, "<hex>  <name>\n"; 402
// Payment Required from a factory without them), and redirects asset
// downloads to a second path the way the factory hands them to its cache.
package factorytest

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
)

// Factory is a running stand-in.
type Factory struct {
	URL string

	mu        sync.Mutex
	assets    map[string][]byte // "<schematic>/<version>/<name>"
	sums      map[string]string // a checksum to publish instead of the true one
	noSums    bool
	requests  map[string]int
	srv       *http.Server
	listener  net.Listener
	redirects bool
}

// New starts a stand-in on 127.0.0.1 (a free port). Close stops it.
func New() (*Factory, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	f := &Factory{URL: "http://" + ln.Addr().String(), assets: map[string][]byte{}, sums: map[string]string{},
		requests: map[string]int{}, listener: ln, redirects: true}
	f.srv = &http.Server{Handler: http.HandlerFunc(f.serve)}
	go f.srv.Serve(ln)
	return f, nil
}

// Close stops the stand-in.
func (f *Factory) Close() error { return f.srv.Close() }

// Add serves an image's asset.
func (f *Factory) Add(schematic, version, name string, data []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.assets[schematic+"/"+version+"/"+name] = data
}

// PublishSum publishes a checksum for an asset instead of its true one (a
// wrong checksum, for tests of refusal).
func (f *Factory) PublishSum(schematic, version, name, sum string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sums[schematic+"/"+version+"/"+name] = sum
}

// NoChecksums makes the checksum endpoint answer 402, as a factory built
// without it does.
func (f *Factory) NoChecksums() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.noSums = true
}

// Requests is how often a path was asked for.
func (f *Factory) Requests(path string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.requests[path]
}

func (f *Factory) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	f.mu.Lock()
	f.requests[r.URL.Path]++
	f.mu.Unlock()
	key, cached := strings.CutPrefix(r.URL.Path, "/cache/")
	if !cached {
		var ok bool
		if key, ok = strings.CutPrefix(r.URL.Path, "/image/"); !ok {
			http.NotFound(w, r)
			return
		}
	}
	if strings.Count(key, "/") != 2 {
		http.Error(w, "error parsing profile from path", http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if base, ok := strings.CutSuffix(key, ".sha256"); ok && !cached {
		data, ok := f.assets[base]
		switch {
		case f.noSums:
			http.Error(w, "enterprise not enabled: checksum endpoint is not available", http.StatusPaymentRequired)
			return
		case !ok:
			http.NotFound(w, r)
			return
		}
		sum := sha256.Sum256(data)
		hexSum := hex.EncodeToString(sum[:])
		if s, ok := f.sums[base]; ok {
			hexSum = s
		}
		body := fmt.Sprintf("%s  %s\n", hexSum, base[strings.LastIndex(base, "/")+1:])
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		_, _ = w.Write([]byte(body))
		return
	}
	data, ok := f.assets[key]
	if !ok {
		http.NotFound(w, r)
		return
	}
	if f.redirects && !cached && r.Method == http.MethodGet {
		http.Redirect(w, r, "/cache/"+key, http.StatusFound)
		return
	}
	name := key[strings.LastIndex(key, "/")+1:]
	w.Header().Set("Content-Length", strconv.Itoa(len(data)))
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="%s"`, name))
	if r.Method == http.MethodGet {
		_, _ = w.Write(data)
	}
}
