//go:build !demo

package main

import (
	"context"
	"errors"
	"io"
)

// cmdDemo is absent from the add-on's binary: the simulated nodes, the
// stand-in cloud and the embedded broker are linked only into the demo's
// (go build -tags demo; make demo).
func cmdDemo(context.Context, []string, io.Writer, io.Writer) error {
	return errors.New("this build has no demo: the add-on ships no simulators; run `make demo` from a source checkout (it builds with -tags demo)")
}
