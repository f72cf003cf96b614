package tofu

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"go.uber.org/zap"
)

// outputPattern names the files a streaming command writes its stdout and
// stderr into (see Workspace.run); they are removed when it ends, and at
// Recover when a killed add-on left them.
const outputPattern = ".tofu-output-*"

// followTick is how often a command's output file is read while tofu runs.
const followTick = 50 * time.Millisecond

// outputFiles are one command's stdout and stderr: tofu gets the write
// ends, we read the same files from the start as they grow.
type outputFiles struct {
	stdoutW, stderrW *os.File
	stdoutR, stderrR *os.File
}

func (w *Workspace) newOutputFiles(op string) (*outputFiles, error) {
	o := &outputFiles{}
	var err error
	for _, f := range []struct {
		w, r **os.File
		kind string
	}{{&o.stdoutW, &o.stdoutR, "stdout"}, {&o.stderrW, &o.stderrR, "stderr"}} {
		if *f.w, err = os.CreateTemp(w.dir, ".tofu-output-"+op+"-"+f.kind+"-*"); err != nil {
			o.remove()
			return nil, fmt.Errorf("%s file: %w", f.kind, err)
		}
		if *f.r, err = os.Open((*f.w).Name()); err != nil {
			o.remove()
			return nil, fmt.Errorf("%s file: %w", f.kind, err)
		}
	}
	return o, nil
}

// follow copies stdout into out and stderr into errOut as tofu writes them,
// until exited is closed and everything written has been read.
func (o *outputFiles) follow(exited <-chan struct{}, out, errOut io.Writer) {
	buf := make([]byte, 64<<10)
	drain := func(f *os.File, dst io.Writer) {
		for {
			n, err := f.Read(buf)
			if n > 0 {
				_, _ = dst.Write(buf[:n])
			}
			if err != nil || n == 0 {
				return
			}
		}
	}
	t := time.NewTicker(followTick)
	defer t.Stop()
	for {
		drain(o.stdoutR, out)
		select {
		case <-exited:
			drain(o.stdoutR, out)
			drain(o.stderrR, errOut)
			return
		case <-t.C:
		}
	}
}

func (o *outputFiles) remove() {
	for _, f := range []*os.File{o.stdoutR, o.stderrR} {
		if f != nil {
			f.Close()
		}
	}
	for _, f := range []*os.File{o.stdoutW, o.stderrW} {
		if f != nil {
			f.Close()
			_ = os.Remove(f.Name())
		}
	}
}

// removeOutputFiles removes output files a killed add-on left behind.
func (w *Workspace) removeOutputFiles() {
	ms, _ := filepath.Glob(filepath.Join(w.dir, outputPattern))
	for _, m := range ms {
		_ = os.Remove(m)
	}
}

// privatize removes group and world permissions from everything under the
// given dirs: tofu creates .terraform/, errored.tfstate and its lock files
// with its own (0755/0644) modes. Symlinks are skipped (they have no mode of
// their own and must not be followed out of the dir).
func (r *Runner) privatize(dirs ...string) {
	dirs = append(dirs, filepath.Join(r.cfg.DataDir, "home"), filepath.Join(r.cfg.DataDir, "plugin-cache"))
	for _, d := range dirs {
		err := filepath.WalkDir(d, func(p string, de fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil
				}
				return err
			}
			if de.Type()&fs.ModeSymlink != 0 {
				return nil
			}
			fi, err := de.Info()
			if err != nil {
				return nil // removed meanwhile
			}
			if m := fi.Mode().Perm(); m&0o077 != 0 {
				if err := os.Chmod(p, m&^0o077); err != nil && !errors.Is(err, fs.ErrNotExist) {
					return err
				}
			}
			return nil
		})
		if err != nil {
			r.log.Warn("making the tofu files private", zap.String("dir", d), zap.Error(err))
		}
	}
}

// keepReserve writes the states a full disk refused where there is room
// now (returning the tenants it wrote) and puts the state store's
// disk-space reserve back after a full disk used it, saying so while it
// cannot.
func (r *Runner) keepReserve() (written []string) {
	if r.file == nil {
		return nil // no data folder store: no full-disk handling
	}
	written, left := r.file.FlushUnsaved()
	if len(left) > 0 {
		r.log.Error("the data folder is full: the OpenTofu state of these tenants is held in memory only; free space now (a restart would lose it)",
			zap.Strings("tenants", left))
	}
	if len(written) > 0 {
		r.log.Warn("the data folder filled up: the OpenTofu state held in memory is written now", zap.Strings("tenants", written))
	}
	if r.file.HasReserve() {
		return written
	}
	if err := r.file.Reserve(); err != nil {
		r.log.Warn("the data dir is (nearly) full: the space kept to save state after a full disk is used up; free some space", zap.Error(err))
		return written
	}
	r.log.Info("restored the space kept to save state after a full disk")
	return written
}
