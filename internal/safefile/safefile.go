// Package safefile reads the small files rezuscloud keeps or is given (the
// data folder's state and records, tenant files, keys) so that whatever
// sits at the path cannot hang or exhaust the reader: only a regular file
// (also behind a symlink) is read, it is opened without blocking (a FIFO
// swapped in at the last moment returns at once) and checked again on the
// descriptor, and no more than a cap is read. A FIFO, a device such as
// /dev/zero, a directory or a file over the cap is an error naming the
// file, before anything of it is read.
package safefile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
)

// ErrNotRegular: the path is not a regular file (a FIFO, a device, a
// directory, a socket), also when reached through a symlink.
var ErrNotRegular = errors.New("not a regular file")

// ErrTooLarge: the file is larger than the cap the caller gave.
var ErrTooLarge = errors.New("file is too large")

// Read returns the contents of the regular file at path, at most max bytes.
// Errors are *os.PathError naming path; errors.Is tells ErrNotRegular,
// ErrTooLarge and fs.ErrNotExist apart.
func Read(path string, max int64) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if err := check(fi, max); err != nil {
		return nil, &os.PathError{Op: "read", Path: path, Err: err}
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err = f.Stat(); err != nil {
		return nil, err
	}
	if err := check(fi, max); err != nil { // swapped since the first look
		return nil, &os.PathError{Op: "read", Path: path, Err: err}
	}
	// sized from the descriptor, as os.ReadFile does; one byte more tells
	// a file that grew past the cap since
	data := make([]byte, 0, fi.Size()+1)
	r := io.LimitReader(f, max+1)
	for {
		if len(data) == cap(data) {
			data = append(data, 0)[:len(data)]
		}
		n, err := r.Read(data[len(data):cap(data)])
		data = data[:len(data)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err // an *os.PathError naming the file
		}
	}
	if int64(len(data)) > max { // it grew while being read
		return nil, &os.PathError{Op: "read", Path: path, Err: &sizeError{max: max, size: -1}}
	}
	return data, nil
}

func check(fi os.FileInfo, max int64) error {
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%w (%s)", ErrNotRegular, kind(fi.Mode()))
	}
	if fi.Size() > max {
		return &sizeError{max: max, size: fi.Size()}
	}
	return nil
}

// sizeError says how large the file is and what the cap is.
type sizeError struct{ max, size int64 }

func (e *sizeError) Error() string {
	if e.size < 0 {
		return fmt.Sprintf("file is larger than %d bytes", e.max)
	}
	return fmt.Sprintf("file is larger than %d bytes (it has %d)", e.max, e.size)
}

func (e *sizeError) Is(target error) bool { return target == ErrTooLarge }

func kind(m os.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&os.ModeNamedPipe != 0:
		return "a FIFO"
	case m&os.ModeCharDevice != 0:
		return "a character device"
	case m&os.ModeDevice != 0:
		return "a block device"
	case m&os.ModeSocket != 0:
		return "a socket"
	}
	return "mode " + m.String()
}
