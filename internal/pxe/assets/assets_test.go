package assets

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/pxe/assets/factorytest"
	"github.com/rezuscloud/rezuscloud/internal/pxe/boot"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
)

var img = boot.Image{Schematic: boot.DefaultSchematic, Version: "v1.13.0", Arch: "amd64"}

func factory(t *testing.T) *factorytest.Factory {
	t.Helper()
	f, err := factorytest.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	f.Add(img.Schematic, img.Version, "kernel-amd64", []byte("a kernel"))
	f.Add(img.Schematic, img.Version, "initramfs-amd64.xz", []byte(strings.Repeat("initramfs", 1000)))
	f.Add(img.Schematic, img.Version, "cmdline-metal-amd64", []byte("talos.platform=metal console=tty0\n"))
	return f
}

func TestFetchPublished(t *testing.T) {
	f := factory(t)
	c := &Cache{Dir: t.TempDir(), Factory: f.URL}
	set, err := c.Fetch(context.Background(), img)
	if err != nil {
		t.Fatal(err)
	}
	if !set.Published || set.Cmdline != "talos.platform=metal console=tty0" {
		t.Fatalf("set %+v", set)
	}
	r, err := c.Open(img.Schematic, img.Version, "kernel-amd64")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(r)
	r.Close()
	if string(b) != "a kernel" {
		t.Fatalf("kernel %q", b)
	}
	if f.Requests("/cache/"+img.Schematic+"/v1.13.0/kernel-amd64") != 1 {
		t.Fatal("the redirect to the factory's cache was not followed")
	}
	// a second Ensure is served from the cache: nothing fetched again
	if _, st, err := c.Ensure(context.Background(), img); st != Ready || err != nil {
		t.Fatalf("ensure: %v %v", st, err)
	}
	if n := f.Requests("/image/" + img.Schematic + "/v1.13.0/kernel-amd64"); n != 1 {
		t.Fatalf("kernel fetched %d times", n)
	}
	if l := c.List(); len(l) != 1 || l[0].Image != img || !l[0].Published {
		t.Fatalf("list %+v", l)
	}
}

func TestFetchRecorded(t *testing.T) {
	f := factory(t)
	f.NoChecksums()
	c := &Cache{Dir: t.TempDir(), Factory: f.URL}
	set, err := c.Fetch(context.Background(), img)
	if err != nil {
		t.Fatal(err)
	}
	if set.Published {
		t.Fatal("checksums marked published by a factory that publishes none")
	}
}

// TestWrongChecksum: a download that does not match the published checksum
// is refused with a clear error and nothing is cached.
func TestWrongChecksum(t *testing.T) {
	f := factory(t)
	f.PublishSum(img.Schematic, img.Version, "initramfs-amd64.xz", strings.Repeat("0", 64))
	dir := t.TempDir()
	c := &Cache{Dir: dir, Factory: f.URL}
	_, err := c.Fetch(context.Background(), img)
	if err == nil || !strings.Contains(err.Error(), "initramfs-amd64.xz: checksum mismatch: the Image Factory published sha256 0000") ||
		!strings.Contains(err.Error(), "nothing was cached") {
		t.Fatalf("err %v", err)
	}
	if _, err := c.Get(img); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a set is cached after the refusal: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, img.Schematic, img.Version, "initramfs-amd64.xz")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused file was kept: %v", err)
	}
	if _, err := c.Open(img.Schematic, img.Version, "initramfs-amd64.xz"); err == nil {
		t.Fatal("a refused asset was opened for serving")
	}
	// Ensure reports the failure, and does not hammer the factory
	ctx := context.Background()
	c.Ensure(ctx, img)
	testenv.WaitFor(t, 5*time.Second, "the background fetch to fail", func() bool {
		_, st, err := c.Ensure(ctx, img)
		return st == Failed && err != nil && strings.Contains(err.Error(), "checksum mismatch")
	})
	if n := f.Requests("/image/" + img.Schematic + "/v1.13.0/initramfs-amd64.xz"); n != 2 {
		t.Fatalf("initramfs fetched %d times, want 2 (one Fetch, one Ensure)", n)
	}
}

// TestCorruptCache: a cached file that changed is refused, and the set is
// fetched again by the next Ensure.
func TestCorruptCache(t *testing.T) {
	f := factory(t)
	dir := t.TempDir()
	c := &Cache{Dir: dir, Factory: f.URL}
	if _, err := c.Fetch(context.Background(), img); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, img.Schematic, img.Version, "kernel-amd64")
	if err := os.WriteFile(p, []byte("a kernel, changed"), 0o600); err != nil {
		t.Fatal(err)
	}
	c2 := &Cache{Dir: dir, Factory: f.URL} // a new process: verifies again
	if _, err := c2.Open(img.Schematic, img.Version, "kernel-amd64"); err == nil || !strings.Contains(err.Error(), "kernel-amd64 is corrupt") {
		t.Fatalf("corrupt kernel opened: %v", err)
	}
	ctx := context.Background()
	if _, st, err := c2.Ensure(ctx, img); st != Failed || err == nil {
		t.Fatalf("ensure of a corrupt set: %v %v", st, err)
	}
	testenv.WaitFor(t, 5*time.Second, "the set fetched again", func() bool {
		_, st, _ := c2.Ensure(ctx, img)
		return st == Ready
	})
}

func TestRefusesBadImages(t *testing.T) {
	c := &Cache{Dir: t.TempDir(), Factory: "http://127.0.0.1:1"}
	for _, bad := range []boot.Image{
		{Schematic: "../../etc", Version: "v1.13.0", Arch: "amd64"},
		{Schematic: boot.DefaultSchematic, Version: "../v1", Arch: "amd64"},
		{Schematic: boot.DefaultSchematic, Version: "v1.13.0", Arch: "mips"},
	} {
		if _, err := c.Fetch(context.Background(), bad); err == nil {
			t.Errorf("%+v fetched", bad)
		}
		if _, _, err := c.Ensure(context.Background(), bad); err == nil {
			t.Errorf("%+v ensured", bad)
		}
	}
	for _, name := range []string{"cmdline-metal-amd64", "SHA256SUMS-amd64", "../kernel-amd64", "kernel-mips"} {
		if _, err := c.Open(boot.DefaultSchematic, "v1.13.0", name); err == nil {
			t.Errorf("%q opened", name)
		}
	}
}

func TestMissingAsset(t *testing.T) {
	f := factory(t)
	other := img
	other.Version = "v1.12.0"
	c := &Cache{Dir: t.TempDir(), Factory: f.URL}
	if _, err := c.Fetch(context.Background(), other); err == nil || !strings.Contains(err.Error(), "404 Not Found") {
		t.Fatalf("err %v", err)
	}
}
