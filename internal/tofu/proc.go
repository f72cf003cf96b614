package tofu

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/atomicfile"
	"github.com/rezuscloud/rezuscloud/internal/safefile"
)

// ProcessFile is where a workspace records the tofu it runs, so that a tofu
// that outlived a killed add-on (it runs in its own process group) is found
// and stopped at the next start instead of having its lock taken away.
const ProcessFile = ".rezuscloud-tofu.json"

// procRecord identifies one tofu process across a restart of the add-on:
// pid alone may be reused, pid + start time (in clock ticks since boot, as
// /proc/<pid>/stat has it) + boot id may not.
type procRecord struct {
	PID       int       `json:"pid"`
	StartTime uint64    `json:"start_time"`
	BootID    string    `json:"boot_id"`
	Op        string    `json:"op"`
	Args      []string  `json:"args"`
	Started   time.Time `json:"started"`
}

// procStat is what /proc/<pid>/stat says about a process.
type procStat struct {
	State     byte   // R, S, D, Z, X, ...
	StartTime uint64 // clock ticks after boot
}

// readProcStat reads /proc/<pid>/stat. The command name (field 2) may hold
// spaces and parentheses, so the fields are counted after its last ')'.
func readProcStat(pid int) (procStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state), so field n is f[n-3]; starttime is field 22.
	if len(f) < 20 || len(f[0]) != 1 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	st, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return procStat{}, fmt.Errorf("/proc/%d/stat: start time: %w", pid, err)
	}
	return procStat{State: f[0][0], StartTime: st}, nil
}

func bootID() string {
	b, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	return strings.TrimSpace(string(b))
}

// newProcRecord describes a process we just started.
func newProcRecord(pid int, op string, args []string) (procRecord, error) {
	st, err := readProcStat(pid)
	if err != nil {
		return procRecord{}, err
	}
	return procRecord{PID: pid, StartTime: st.StartTime, BootID: bootID(), Op: op, Args: args, Started: time.Now().UTC()}, nil
}

// alive reports whether the recorded process still runs: same pid, start
// time and boot, and not a zombie waiting to be reaped.
func (p procRecord) alive() bool {
	if p.PID <= 1 || (p.BootID != "" && p.BootID != bootID()) {
		return false
	}
	st, err := readProcStat(p.PID)
	if err != nil || st.StartTime != p.StartTime {
		return false
	}
	return st.State != 'Z' && st.State != 'X'
}

func (w *Workspace) procFile() string { return filepath.Join(w.dir, ProcessFile) }

func (w *Workspace) writeProcRecord(p procRecord) error {
	b, err := json.Marshal(p)
	if err != nil {
		return err
	}
	return atomicfile.Write(w.procFile(), b, 0o600)
}

// maxProcRecord caps the process record (a few hundred bytes).
const maxProcRecord = 64 << 10

// readProcRecord returns the recorded tofu, ok=false when none is recorded
// (or the record does not parse: then no process can be identified by it).
// Something that cannot be read as a file (a FIFO, a device, a directory,
// a file too large) is an error: a tofu it may have named could be alive.
func (w *Workspace) readProcRecord() (procRecord, bool, error) {
	b, err := safefile.Read(w.procFile(), maxProcRecord)
	if errors.Is(err, fs.ErrNotExist) {
		return procRecord{}, false, nil
	}
	if err != nil {
		return procRecord{}, false, fmt.Errorf("tofu process record: %w", err)
	}
	var p procRecord
	if json.Unmarshal(b, &p) != nil || p.PID <= 0 {
		return procRecord{}, false, nil
	}
	return p, true, nil
}

func (w *Workspace) removeProcRecord() {
	if err := os.Remove(w.procFile()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		w.r.log.Warn("removing the tofu process record: " + err.Error())
	}
}

// stopOrphan stops a recorded tofu that is still running, as a cancelled
// command would be: SIGINT to its process group (tofu stops, saves the
// state it could not upload as errored.tfstate), SIGKILL to the group once
// grace has passed, and waits for it to be gone. It returns an error when
// the process is still there after that, so its lock is left alone.
func stopOrphan(ctx context.Context, p procRecord, grace time.Duration, tick time.Duration) (stopped bool, err error) {
	if !p.alive() {
		return false, nil
	}
	pgid := p.PID // tofu leads its own group (Setpgid)
	_ = syscall.Kill(-pgid, syscall.SIGINT)
	if waitGone(ctx, p, grace, tick) {
		_ = syscall.Kill(-pgid, syscall.SIGKILL) // children it left
		return true, nil
	}
	if !p.alive() {
		return true, nil
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	if waitGone(context.WithoutCancel(ctx), p, 30*time.Second, tick) {
		return true, nil
	}
	return true, fmt.Errorf("tofu pid %d (%s) is still running after SIGKILL", p.PID, p.Op)
}

// waitGone waits up to d (or ctx) for p to exit. The process is not our
// child, so there is nothing to wait(2) on: /proc is checked every tick.
func waitGone(ctx context.Context, p procRecord, d, tick time.Duration) bool {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	t := time.NewTicker(tick)
	defer t.Stop()
	for p.alive() {
		select {
		case <-ctx.Done():
			return !p.alive()
		case <-deadline.C:
			return !p.alive()
		case <-t.C:
		}
	}
	return true
}
