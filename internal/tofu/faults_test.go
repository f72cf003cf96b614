package tofu

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// orphanHelperEnv makes TestOrphanHelper the add-on process of
// TestKilledAddOnLeavesTofu: it names the data dir.
const orphanHelperEnv = "REZUSCLOUD_TOFU_ORPHAN_HELPER"

// orphanDoc is n terraform_data resources, plus "slow", whose provisioner
// sleeps for sleep seconds after all of them are created (none when 0).
func orphanDoc(n, sleep int) []byte {
	return orphanDocSlow(n, sleep, true)
}

func orphanDocSlow(n, sleep int, withSlow bool) []byte {
	res := map[string]any{}
	var deps []string
	for i := range n {
		name := fmt.Sprintf("r%02d", i)
		res[name] = map[string]any{"input": map[string]any{"i": i}}
		deps = append(deps, "terraform_data."+name)
	}
	slow := map[string]any{"input": "slow", "depends_on": deps}
	if sleep > 0 {
		slow["provisioner"] = []any{map[string]any{"local-exec": map[string]any{"command": fmt.Sprintf("sleep %d", sleep)}}}
	}
	if withSlow {
		res["slow"] = slow
	}
	b, _ := json.Marshal(map[string]any{"resource": map[string]any{"terraform_data": res}})
	return b
}

// TestOrphanHelper is not a test of its own: re-executed by
// TestKilledAddOnLeavesTofu, it is the add-on that starts an apply and is
// SIGKILLed in the middle of it.
func TestOrphanHelper(t *testing.T) {
	dataDir := os.Getenv(orphanHelperEnv)
	if dataDir == "" {
		t.Skip("the add-on process of TestKilledAddOnLeavesTofu")
	}
	ctx := context.Background()
	r := newRunner(t, dataDir, nil)
	ws := workspace(t, r, "lab", orphanDoc(3, 300))
	plan, err := ws.Plan(ctx, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = ws.Apply(ctx, plan, RunOptions{OnEvent: func(ev Event) {
		if ev.Type == EventProvisionStart {
			fmt.Println("HELPER: PROVISIONING")
		}
	}})
	t.Fatalf("the apply returned (%v) before the helper was killed", err)
}

// TestKilledAddOnLeavesTofu (issue 15 item 1): the add-on is SIGKILLed in
// the middle of an apply, its tofu (own process group) lives on. The next
// start finds that tofu, stops it and waits for it before it releases the
// lock; the state the orphan saved (errored.tfstate) is newer and imported,
// so the next apply creates nothing again and ends with every resource in
// state.
func TestKilledAddOnLeavesTofu(t *testing.T) {
	if os.Getenv(orphanHelperEnv) != "" {
		t.Skip("in the helper")
	}
	t.Parallel() // each test has its own data dir; tofu runs wait more than they compute
	ctx := context.Background()
	dataDir := t.TempDir()

	// A first apply by this process: the stored state the orphan continues.
	r0 := newRunner(t, dataDir, nil)
	ws0 := workspace(t, r0, "lab", orphanDocSlow(1, 0, false))
	plan, err := ws0.Plan(ctx, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ws0.Apply(ctx, plan, RunOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := r0.Close(ctx); err != nil {
		t.Fatal(err)
	}
	stored0, _, _ := r0.Store().Get("lab")
	meta0, err := parseStateMeta(stored0)
	if err != nil {
		t.Fatal(err)
	}

	// The add-on: this test binary again, killed once its tofu provisions.
	helper := exec.Command(os.Args[0], "-test.run=^TestOrphanHelper$", "-test.v", "-test.count=1")
	helper.Env = append(os.Environ(), orphanHelperEnv+"="+dataDir)
	out, err := helper.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	helper.Stderr = helper.Stdout
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	provisioning := make(chan struct{})
	var helperLog strings.Builder
	lines := make(chan struct{})
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		seen := false
		for sc.Scan() {
			helperLog.WriteString(sc.Text() + "\n")
			if !seen && strings.Contains(sc.Text(), "HELPER: PROVISIONING") {
				seen = true
				close(provisioning)
			}
		}
	}()
	ws := &Workspace{dir: filepath.Join(dataDir, "work", "lab")}
	t.Cleanup(func() {
		if p, ok, _ := ws.readProcRecord(); ok && p.alive() {
			syscall.Kill(-p.PID, syscall.SIGKILL)
		}
	})
	select {
	case <-provisioning:
	case <-lines:
		helper.Wait()
		t.Fatalf("the helper ended before its tofu provisioned:\n%s", helperLog.String())
	case <-time.After(5 * time.Minute):
		helper.Process.Kill()
		helper.Wait()
		t.Fatalf("the helper's tofu did not provision within 5 minutes:\n%s", helperLog.String())
	}
	if err := helper.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	helper.Wait()
	<-lines

	// The orphan: recorded and alive after its add-on is gone.
	orphan, ok, err := ws.readProcRecord()
	if err != nil || !ok || !orphan.alive() || orphan.Op != "apply" {
		t.Fatalf("no live tofu recorded after the add-on was killed: %+v (alive %v)", orphan, orphan.alive())
	}

	// Restart at once.
	r := newRunner(t, dataDir, nil)
	if _, held := lockOf(t, r, "lab"); !held {
		t.Fatal("the orphan holds no lock")
	}
	if err := r.Recover(ctx, "lab"); err != nil {
		t.Fatal(err)
	}
	if orphan.alive() {
		t.Fatal("the orphaned tofu still runs after Recover")
	}
	if li, held := lockOf(t, r, "lab"); held {
		t.Fatalf("lock kept after the orphan was stopped: %+v", li)
	}
	if _, err := os.Stat(filepath.Join(ws.dir, ErroredStateFile)); !os.IsNotExist(err) {
		t.Fatalf("errored.tfstate left in place: %v", err)
	}
	stored, _, _ := r.Store().Get("lab")
	meta, err := parseStateMeta(stored)
	if err != nil || meta.Lineage != meta0.Lineage || *meta.Serial <= *meta0.Serial {
		t.Fatalf("stored state %+v (%v), want newer than serial %d of lineage %s", meta, err, *meta0.Serial, meta0.Lineage)
	}

	// What the orphan created is in state: the next plan creates r00..r02
	// no more, only "slow" (interrupted, tainted) and the new r03.
	ws2 := workspace(t, r, "lab", orphanDoc(4, 0))
	plan, err = ws2.Plan(ctx, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range plan.Changes {
		switch c.Address {
		case "terraform_data.r03", "terraform_data.slow":
		default:
			t.Errorf("plan after recovery changes %s (%s): its state was lost", c.Address, c.Action)
		}
	}
	if _, err := ws2.Apply(ctx, plan, RunOptions{}); err != nil {
		t.Fatal(err)
	}
	plan, err = ws2.Plan(ctx, RunOptions{})
	if err != nil || plan.HasChanges() {
		t.Fatalf("resources missing from state after the apply: %+v %v", plan, err)
	}
}

// TestFullDiskDuringApply (issue 15 item 4): the data dir fills up during
// an apply. The state tofu uploads at the end is still saved (the store's
// reserve), nothing is left that blocks the next command, and once space
// is freed the next plan creates nothing again.
func TestFullDiskDuringApply(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mnt := smallDataDir(t, "48m")
	r := newRunner(t, mnt, nil) // closed before the umount (cleanups run last first)
	if !r.Store().HasReserve() {
		t.Fatal("no reserve on an empty data dir")
	}
	fill := filepath.Join(mnt, "fill")
	doc := fillingDoc(fill)
	ws := workspace(t, r, "lab", doc)
	plan, err := ws.Plan(ctx, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = ws.Apply(ctx, plan, RunOptions{})
	// The filler took all there was (the reserve released since is free).
	if fi, serr := os.Stat(fill); serr != nil || fi.Size() < 16<<20 {
		t.Fatalf("the provisioner did not fill the data dir: %v", serr)
	}
	t.Logf("apply on a full disk: %v", err)
	if r.Store().HasReserve() {
		t.Error("the reserve was not used")
	}

	// State is consistent: whatever is stored, nothing blocks the next
	// command, and after freeing space nothing is created again.
	if err := os.Remove(fill); err != nil {
		t.Fatal(err)
	}
	plan, err = ws.Plan(ctx, RunOptions{})
	if err != nil {
		t.Fatalf("plan after freeing space: %v", err)
	}
	if plan.HasChanges() {
		t.Fatalf("the full disk lost state: plan = %+v %+v", plan.Summary, plan.Changes)
	}
	if !r.Store().HasReserve() {
		t.Error("the reserve was not restored after space was freed")
	}
}

// TestFullDiskWithoutReserve (issue 19 item 9): on a data folder too
// small for the reserve, the disk fills up during an apply. The state tofu
// could not upload is held in memory, the error names the full data folder
// (not "exit status 1"), and once space is freed the next plan creates
// nothing again: what the failed apply created is tracked.
func TestFullDiskWithoutReserve(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mnt := smallDataDir(t, "24m")
	r := newRunner(t, mnt, nil)
	if r.Store().HasReserve() {
		t.Fatal("a reserve on a data dir too small for it")
	}
	fill := filepath.Join(mnt, "fill")
	doc := fillingDoc(fill)
	ws := workspace(t, r, "lab", doc)
	plan, err := ws.Plan(ctx, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = ws.Apply(ctx, plan, RunOptions{})
	if err == nil || !(errors.Is(err, ErrStateUnsaved) || errors.Is(err, ErrDiskFilled)) || !strings.Contains(err.Error(), "data folder") {
		t.Fatalf("apply on a full disk without a reserve: %v, want it to name the full data folder", err)
	}
	t.Logf("apply on a full disk without a reserve: %v", err)
	if err := os.Remove(fill); err != nil {
		t.Fatal(err)
	}
	plan, err = ws.Plan(ctx, RunOptions{})
	if err != nil {
		t.Fatalf("plan after freeing space: %v", err)
	}
	for _, c := range plan.Changes {
		if c.Action == "create" && (c.Address == "terraform_data.r00" || c.Address == "terraform_data.r01") {
			t.Fatalf("the failed apply's resources are tracked nowhere: the plan creates %s again (%+v)", c.Address, plan.Summary)
		}
	}
	if r.Store().Unsaved("lab") {
		t.Error("the held state was not written once there was room")
	}
	if _, ok, err := r.Store().Get("lab"); !ok || err != nil {
		t.Errorf("no stored state after freeing space: %v", err)
	}
}

// TestWorkspaceFilesPrivate (issue 15 item 11): nothing tofu leaves under
// the data dir is open to group or world, whatever the process umask.
func TestWorkspaceFilesPrivate(t *testing.T) {
	t.Parallel()
	old := syscall.Umask(0o022) // tofu's own modes show with a usual umask
	defer syscall.Umask(old)
	ctx := context.Background()
	dataDir := t.TempDir()
	r := newRunner(t, dataDir, nil)
	ws := workspace(t, r, "lab", dataDoc(2, "p"))
	check := func(after string) {
		t.Helper()
		filepath.WalkDir(dataDir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.Type()&fs.ModeSymlink != 0 {
				return err
			}
			fi, err := d.Info()
			if err == nil && fi.Mode().Perm()&0o077 != 0 {
				t.Errorf("after %s: %s is %v", after, p, fi.Mode().Perm())
			}
			return nil
		})
	}
	if err := ws.Init(ctx, RunOptions{}); err != nil {
		t.Fatal(err)
	}
	check("init")
	plan, err := ws.Plan(ctx, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	check("plan")
	if _, err := ws.Apply(ctx, plan, RunOptions{}); err != nil {
		t.Fatal(err)
	}
	check("apply")
}

// smallDataDir mounts a tmpfs of size (root only; the test is skipped
// where it cannot) as a data dir that a full-disk test can fill.
func smallDataDir(t *testing.T, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small tmpfs as the data dir")
	}
	mnt := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size+",mode=0700", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here (%v: %s); the full-disk test needs one", err, strings.TrimSpace(string(out)))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", mnt, err, out)
		}
	})
	return mnt
}

// fillingDoc creates two resources, then fills the disk by writing fill
// (a provisioner), then creates one more.
func fillingDoc(fill string) []byte {
	return []byte(`{"resource":{"terraform_data":{
		"r00":{"input":"a"},
		"r01":{"input":"b"},
		"filler":{"depends_on":["terraform_data.r00","terraform_data.r01"],
			"provisioner":[{"local-exec":{"command":"cat /dev/zero > ` + fill + ` 2>/dev/null; true"}}]},
		"after":{"input":"c","depends_on":["terraform_data.filler"]}}}}`)
}
