package httpstate

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// ReserveSize is the space a Store keeps allocated in its directory so that
// a state can still be saved when the disk fills up during an apply: the
// resources that apply created would otherwise be lost from state (and
// created again by the next one).
const ReserveSize = 16 << 20

const reserveFile = ".reserve"

func (s *Store) reservePath() string { return filepath.Join(s.dir, reserveFile) }

// Reserve allocates the reserve when it is missing (at Open, and after a
// full disk used it). It fails, leaving nothing behind, when the space is
// not there.
func (s *Store) Reserve() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reserve()
}

func (s *Store) reserve() error {
	p := s.reservePath()
	if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Size() >= ReserveSize {
		return nil
	}
	// Only take it back while that leaves as much free again: taking the
	// last free space of a nearly full disk would fail everyone else.
	var st syscall.Statfs_t
	if err := syscall.Statfs(s.dir, &st); err == nil && st.Bavail*uint64(st.Bsize) < 2*ReserveSize {
		return fmt.Errorf("state reserve of %d MiB in %s: only %d MiB free", ReserveSize>>20, s.dir, st.Bavail*uint64(st.Bsize)>>20)
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("state reserve: %w", err)
	}
	err = syscall.Fallocate(int(f.Fd()), 0, 0, ReserveSize)
	if errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, syscall.ENOSYS) {
		// no fallocate here: write the blocks (a sparse file reserves nothing)
		_, err = f.Write(make([]byte, ReserveSize))
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(p)
		return fmt.Errorf("state reserve of %d MiB in %s: %w", ReserveSize>>20, s.dir, err)
	}
	return nil
}

// HasReserve reports whether the reserve is in place (false after a full
// disk used it, until Reserve succeeds again).
func (s *Store) HasReserve() bool {
	fi, err := os.Stat(s.reservePath())
	return err == nil && fi.Size() >= ReserveSize
}

// releaseReserve frees the reserve; it reports whether there was one.
func (s *Store) releaseReserve() bool {
	return os.Remove(s.reservePath()) == nil
}

// diskFull reports whether err is the file system running out of space.
func diskFull(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}
