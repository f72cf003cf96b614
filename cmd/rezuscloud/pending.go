package main

import (
	"context"
	"errors"
	"io"
)

var errNotYet = errors.New("this command is not available in this build yet")

func cmdRender(ctx context.Context, args []string, stdout, stderr io.Writer) error { return errNotYet }
