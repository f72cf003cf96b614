// Package memtrim gives memory back after start-up. Most of an idle
// rezuscloud's resident memory is not its heap but the pages of its own
// executable that package initialisation touched once (Talos machinery and
// its Kubernetes dependencies register large tables at start). Those pages
// are clean copies of the file: Trim asks the kernel to drop them from the
// process (MADV_PAGEOUT), and whatever is needed later faults back in from
// the page cache. It also returns the freed heap to the system.
package memtrim

import (
	"bufio"
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
)

// madvPageout is MADV_PAGEOUT (Linux 5.4 and later).
const madvPageout = 21

// Trim pages out the executable's file-backed mappings and frees the
// unused heap. It returns how many bytes of mappings it asked the kernel to
// reclaim; an error means nothing was trimmed (an older kernel, another
// OS): harmless, rezuscloud just keeps more resident.
func Trim() (int64, error) {
	debug.FreeOSMemory()
	exe, err := os.Executable()
	if err != nil {
		return 0, fmt.Errorf("memtrim: %w", err)
	}
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return 0, fmt.Errorf("memtrim: %w", err)
	}
	defer f.Close()
	var total int64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		start, end, ok := exeMapping(sc.Text(), exe)
		if !ok {
			continue
		}
		if _, _, errno := syscall.Syscall(syscall.SYS_MADVISE, start, end-start, madvPageout); errno != 0 {
			return total, fmt.Errorf("memtrim: madvise: %w", errno)
		}
		total += int64(end - start)
	}
	return total, sc.Err()
}

// exeMapping parses one line of /proc/self/maps and reports the range of a
// read-only or executable (never writable: those pages may be dirty)
// private mapping of the file exe.
func exeMapping(line, exe string) (start, end uintptr, ok bool) {
	fields := strings.Fields(line)
	if len(fields) < 6 || fields[5] != exe {
		return 0, 0, false
	}
	perms := fields[1]
	if len(perms) < 4 || perms[1] == 'w' || perms[3] != 'p' {
		return 0, 0, false
	}
	lo, hi, found := strings.Cut(fields[0], "-")
	if !found {
		return 0, 0, false
	}
	s, err1 := strconv.ParseUint(lo, 16, 64)
	e, err2 := strconv.ParseUint(hi, 16, 64)
	if err1 != nil || err2 != nil || e <= s {
		return 0, 0, false
	}
	return uintptr(s), uintptr(e), true
}
