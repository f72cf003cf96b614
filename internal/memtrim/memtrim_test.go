package memtrim

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

func TestExeMapping(t *testing.T) {
	const exe = "/usr/bin/rezuscloud"
	for _, tc := range []struct {
		line string
		ok   bool
	}{
		{"00400000-01a00000 r-xp 00000000 fd:01 123 /usr/bin/rezuscloud", true},
		{"01a00000-03000000 r--p 01600000 fd:01 123 /usr/bin/rezuscloud", true},
		{"03000000-03100000 rw-p 02c00000 fd:01 123 /usr/bin/rezuscloud", false}, // may be dirty
		{"7f0000000000-7f0000100000 r-xp 00000000 fd:01 9 /usr/lib/libc.so.6", false},
		{"7f0000000000-7f0000100000 rw-p 00000000 00:00 0", false},
		{"nonsense", false},
	} {
		s, e, ok := exeMapping(tc.line, exe)
		if ok != tc.ok || (ok && e <= s) {
			t.Errorf("%q: ok %v (%x-%x), want %v", tc.line, ok, s, e, tc.ok)
		}
	}
}

func rssFile(t *testing.T) int {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skip(err)
	}
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(l, "RssFile:"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	t.Skip("no RssFile")
	return 0
}

// Trim lowers the file-backed resident memory of the running test binary.
func TestTrim(t *testing.T) {
	before := rssFile(t)
	n, err := Trim()
	if err != nil {
		t.Skipf("this kernel cannot trim: %v", err)
	}
	if n == 0 {
		t.Fatal("no mapping of the executable found")
	}
	after := rssFile(t)
	if after >= before {
		t.Fatalf("RssFile %d kB before, %d kB after: nothing was given back", before, after)
	}
	t.Logf("RssFile %d kB → %d kB (%d bytes of mappings)", before, after, n)
}
