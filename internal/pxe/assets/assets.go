// Package assets keeps the Talos boot assets the responder serves: the
// kernel, initramfs and kernel command line of an Image Factory schematic
// and version, fetched on first use into a cache under the data dir
// (<dir>/<schematic>/<version>/) and verified by SHA-256. The factory's
// published checksum (GET <asset>.sha256, "<hex>  <name>") is checked when
// it publishes one; the checksum of every cached file is recorded in
// SHA256SUMS and checked again before the file is first served by this
// process, so a corrupt cache is an error, never a half-booted machine.
package assets

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/atomicfile"
	"github.com/rezuscloud/rezuscloud/internal/pxe/boot"
)

// DefaultFactory is the public Image Factory.
const DefaultFactory = "https://factory.talos.dev"

// SumsFile lists the cached files of one image and architecture with
// their SHA-256 (sha256sum's format).
func SumsFile(arch string) string { return "SHA256SUMS-" + arch }

var (
	schematicRxp = regexp.MustCompile(`^[0-9a-f]{64}$`)
	versionRxp   = regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.]+)?$`)
	hexRxp       = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// Check refuses an image whose parts could not be a factory path.
func Check(img boot.Image) error {
	switch {
	case !schematicRxp.MatchString(img.Schematic):
		return fmt.Errorf("schematic %q is not an Image Factory schematic id (64 lower-case hex characters)", img.Schematic)
	case !versionRxp.MatchString(img.Version):
		return fmt.Errorf("Talos version %q is not like v1.13.0", img.Version)
	case img.Arch != "amd64" && img.Arch != "arm64":
		return fmt.Errorf("architecture %q is not amd64 or arm64", img.Arch)
	}
	return nil
}

// file is one asset of an image and the most bytes it may have.
type file struct {
	name  string
	limit int64
}

func files(arch string) []file {
	return []file{
		{boot.KernelName(arch), 256 << 20},
		{boot.InitramfsName(arch), 2 << 30},
		{boot.CmdlineName(arch), 8 << 10},
	}
}

// Set is a cached, verified image.
type Set struct {
	Image   boot.Image
	Dir     string
	Cmdline string // the kernel command line
	// Published: every file matched a checksum the factory published;
	// false when the factory publishes none (only the recorded ones hold).
	Published bool
	Fetched   time.Time
}

// State is where an image is in the cache.
type State int

// States.
const (
	Missing  State = iota // not cached, nothing running
	Fetching              // a fetch is running
	Ready                 // cached and verified
	Failed                // the last fetch failed (Err says why)
)

// Cache fetches and keeps boot assets. The zero value is not usable: set
// Dir.
type Cache struct {
	// Dir is the cache directory (the data dir's pxe/assets).
	Dir string
	// Factory is the Image Factory's URL (default DefaultFactory).
	Factory string
	// Client fetches (default: a client with a 30 s header timeout).
	Client *http.Client
	// RetryAfter is how long a failed fetch is remembered before it is
	// tried again (default 1 min).
	RetryAfter time.Duration

	mu       sync.Mutex
	fetching map[boot.Image]bool
	failed   map[boot.Image]failure
	verified map[string]stamp // path -> the size and mtime it was verified at
}

type failure struct {
	err error
	at  time.Time
}

type stamp struct {
	size  int64
	mtime time.Time
	sum   string
}

func (c *Cache) factory() string {
	if c.Factory == "" {
		return DefaultFactory
	}
	return strings.TrimRight(c.Factory, "/")
}

func (c *Cache) client() *http.Client {
	if c.Client != nil {
		return c.Client
	}
	return &http.Client{Transport: &http.Transport{Proxy: http.ProxyFromEnvironment, ResponseHeaderTimeout: 30 * time.Second,
		TLSHandshakeTimeout: 15 * time.Second}}
}

func (c *Cache) dir(img boot.Image) string { return filepath.Join(c.Dir, img.Schematic, img.Version) }

// Ensure returns the image's set when it is ready; otherwise it starts a
// fetch in the background (bound to ctx) unless one runs or failed less
// than RetryAfter ago, and says where the image is.
func (c *Cache) Ensure(ctx context.Context, img boot.Image) (Set, State, error) {
	if err := Check(img); err != nil {
		return Set{}, Failed, err
	}
	if set, err := c.Get(img); err == nil {
		return set, Ready, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		c.forget(img)
		return Set{}, Failed, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fetching == nil {
		c.fetching, c.failed = map[boot.Image]bool{}, map[boot.Image]failure{}
	}
	if c.fetching[img] {
		return Set{}, Fetching, nil
	}
	retry := c.RetryAfter
	if retry <= 0 {
		retry = time.Minute
	}
	if f, ok := c.failed[img]; ok && time.Since(f.at) < retry {
		return Set{}, Failed, f.err
	}
	c.fetching[img] = true
	go func() {
		_, err := c.Fetch(ctx, img)
		c.mu.Lock()
		delete(c.fetching, img)
		if err != nil {
			c.failed[img] = failure{err, time.Now()}
		} else {
			delete(c.failed, img)
		}
		c.mu.Unlock()
	}()
	return Set{}, Fetching, nil
}

// forget drops a corrupt set's record so the next Ensure fetches it again.
func (c *Cache) forget(img boot.Image) { _ = os.Remove(filepath.Join(c.dir(img), SumsFile(img.Arch))) }

// Get returns a cached set, each file verified against its recorded
// checksum once per process (and again when its size or time changes).
// A set never fetched is os.ErrNotExist.
func (c *Cache) Get(img boot.Image) (Set, error) {
	if err := Check(img); err != nil {
		return Set{}, err
	}
	dir := c.dir(img)
	sums, published, fetched, err := readSums(filepath.Join(dir, SumsFile(img.Arch)))
	if err != nil {
		return Set{}, err
	}
	set := Set{Image: img, Dir: dir, Published: published, Fetched: fetched}
	for _, f := range files(img.Arch) {
		want, ok := sums[f.name]
		if !ok {
			return Set{}, fmt.Errorf("boot assets %s: %s lists no %s: %w", img, SumsFile(img.Arch), f.name, os.ErrNotExist)
		}
		if err := c.verify(filepath.Join(dir, f.name), want); err != nil {
			return Set{}, fmt.Errorf("boot assets %s: %w; it is fetched again", img, err)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, boot.CmdlineName(img.Arch)))
	if err != nil {
		return Set{}, fmt.Errorf("boot assets %s: %w", img, err)
	}
	set.Cmdline = strings.TrimSpace(string(b))
	return set, nil
}

// verify checks a cached file against its recorded checksum, hashing it
// only when this process has not seen it at this size and time.
func (c *Cache) verify(path, want string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("cached %s: %w", filepath.Base(path), err)
	}
	c.mu.Lock()
	st, ok := c.verified[path]
	c.mu.Unlock()
	if ok && st.size == fi.Size() && st.mtime.Equal(fi.ModTime()) && st.sum == want {
		return nil
	}
	got, err := hashFile(path)
	if err != nil {
		return err
	}
	if got != want {
		return fmt.Errorf("cached %s is corrupt: its sha256 is %s, the cache recorded %s", filepath.Base(path), got, want)
	}
	c.mu.Lock()
	if c.verified == nil {
		c.verified = map[string]stamp{}
	}
	c.verified[path] = stamp{fi.Size(), fi.ModTime(), want}
	c.mu.Unlock()
	return nil
}

func hashFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("reading %s: %w", filepath.Base(path), err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Fetch downloads an image's assets from the factory and caches them; a
// file whose checksum differs from the published one is refused and
// nothing is cached.
func (c *Cache) Fetch(ctx context.Context, img boot.Image) (Set, error) {
	if err := Check(img); err != nil {
		return Set{}, err
	}
	dir := c.dir(img)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return Set{}, fmt.Errorf("boot assets %s: %w", img, err)
	}
	sums := map[string]string{}
	published := true
	for _, f := range files(img.Arch) {
		sum, pub, err := c.fetchFile(ctx, img, dir, f)
		if err != nil {
			return Set{}, fmt.Errorf("boot assets %s: %w; nothing was cached", img, err)
		}
		sums[f.name] = sum
		published = published && pub
	}
	if err := writeSums(filepath.Join(dir, SumsFile(img.Arch)), sums, published); err != nil {
		return Set{}, fmt.Errorf("boot assets %s: %w", img, err)
	}
	return c.Get(img)
}

func (c *Cache) assetURL(img boot.Image, name string) string {
	return c.factory() + "/image/" + url.PathEscape(img.Schematic) + "/" + url.PathEscape(img.Version) + "/" + url.PathEscape(name)
}

// fetchFile downloads one asset into dir (through a temporary file renamed
// into place only when verified); its sha256, and whether the factory
// published it.
func (c *Cache) fetchFile(ctx context.Context, img boot.Image, dir string, f file) (string, bool, error) {
	u := c.assetURL(img, f.name)
	want, err := c.publishedSum(ctx, u+".sha256")
	if err != nil {
		return "", false, fmt.Errorf("%s: checksum: %w", f.name, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", false, err
	}
	resp, err := c.client().Do(req)
	if err != nil {
		return "", false, fmt.Errorf("%s: %w", f.name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", false, fmt.Errorf("%s: the Image Factory answered %s for %s", f.name, resp.Status, u)
	}
	if resp.ContentLength > f.limit {
		return "", false, fmt.Errorf("%s: %d bytes is more than the %d a boot asset may have", f.name, resp.ContentLength, f.limit)
	}
	tmp, err := os.CreateTemp(dir, "."+f.name+".*")
	if err != nil {
		return "", false, err
	}
	defer os.Remove(tmp.Name()) // after the rename, nothing
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), io.LimitReader(resp.Body, f.limit+1))
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	switch {
	case err != nil:
		return "", false, fmt.Errorf("%s: downloading: %w", f.name, err)
	case n > f.limit:
		return "", false, fmt.Errorf("%s: more than the %d bytes a boot asset may have", f.name, f.limit)
	case resp.ContentLength >= 0 && n != resp.ContentLength:
		return "", false, fmt.Errorf("%s: %d bytes arrived of the %d announced", f.name, n, resp.ContentLength)
	}
	got := hex.EncodeToString(h.Sum(nil))
	if want != "" && got != want {
		return "", false, fmt.Errorf("%s: checksum mismatch: the Image Factory published sha256 %s, the download has %s", f.name, want, got)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, f.name)); err != nil {
		return "", false, err
	}
	return got, want != "", nil
}

// publishedSum reads a "<hex>  <name>" checksum file; "" when the factory
// publishes none (404; 402 from a factory without checksums).
func (c *Cache) publishedSum(ctx context.Context, u string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", err
	}
	resp, err := c.client().Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound, http.StatusPaymentRequired, http.StatusNotImplemented:
		return "", nil
	default:
		return "", fmt.Errorf("the Image Factory answered %s for %s", resp.Status, u)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if err != nil {
		return "", err
	}
	fields := strings.Fields(string(b))
	if len(fields) == 0 || !hexRxp.MatchString(strings.ToLower(fields[0])) {
		return "", fmt.Errorf("%s is not a sha256 checksum file", u)
	}
	return strings.ToLower(fields[0]), nil
}

// SHA256SUMS: "<hex>  <name>" lines (sha256sum's format) after two comment
// lines: when and whether the factory published the checksums.
func writeSums(path string, sums map[string]string, published bool) error {
	var b strings.Builder
	src := "recorded"
	if published {
		src = "published"
	}
	fmt.Fprintf(&b, "# fetched %s\n# checksums %s\n", time.Now().UTC().Format(time.RFC3339), src)
	names := make([]string, 0, len(sums))
	for n := range sums {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		fmt.Fprintf(&b, "%s  %s\n", sums[n], n)
	}
	return atomicfile.Write(path, []byte(b.String()), 0o600)
}

func readSums(path string) (map[string]string, bool, time.Time, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, false, time.Time{}, err
	}
	defer f.Close()
	sums := map[string]string{}
	var published bool
	var fetched time.Time
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		l := sc.Text()
		if v, ok := strings.CutPrefix(l, "# fetched "); ok {
			fetched, _ = time.Parse(time.RFC3339, v)
			continue
		}
		if v, ok := strings.CutPrefix(l, "# checksums "); ok {
			published = v == "published"
			continue
		}
		sum, name, ok := strings.Cut(l, "  ")
		if !ok || !hexRxp.MatchString(sum) || strings.ContainsAny(name, "/\\") {
			return nil, false, time.Time{}, fmt.Errorf("%s:%d: not a \"<sha256>  <name>\" line", path, line)
		}
		sums[name] = sum
	}
	return sums, published, fetched, sc.Err()
}

// Entry is one cached image, for the "Boot assets" sensor.
type Entry struct {
	Image     boot.Image
	Published bool
	Fetched   time.Time
}

// List returns the images cached (listed in a SHA256SUMS; not verified
// here), sorted.
func (c *Cache) List() []Entry {
	var out []Entry
	schematics, _ := os.ReadDir(c.Dir)
	for _, s := range schematics {
		versions, _ := os.ReadDir(filepath.Join(c.Dir, s.Name()))
		for _, v := range versions {
			for _, arch := range []string{"amd64", "arm64"} {
				_, pub, at, err := readSums(filepath.Join(c.Dir, s.Name(), v.Name(), SumsFile(arch)))
				if err == nil {
					out = append(out, Entry{Image: boot.Image{Schematic: s.Name(), Version: v.Name(), Arch: arch}, Published: pub, Fetched: at})
				}
			}
		}
	}
	slices.SortFunc(out, func(a, b Entry) int { return strings.Compare(a.Image.String(), b.Image.String()) })
	return out
}

// Open opens the kernel or initramfs of a ready set for serving, by the
// name the factory gives it (kernel-amd64, initramfs-amd64.xz): only files
// of an image that Get verifies.
func (c *Cache) Open(schematic, version, name string) (*os.File, error) {
	img := boot.Image{Schematic: schematic, Version: version}
	for _, arch := range []string{"amd64", "arm64"} {
		if name == boot.KernelName(arch) || name == boot.InitramfsName(arch) {
			img.Arch = arch
		}
	}
	if img.Arch == "" {
		return nil, fmt.Errorf("%q is not a kernel or initramfs name: %w", name, os.ErrNotExist)
	}
	set, err := c.Get(img)
	if err != nil {
		return nil, err
	}
	return os.Open(filepath.Join(set.Dir, name))
}
