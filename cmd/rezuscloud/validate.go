package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// errProblems means the problems were printed already: exit status 1.
var errProblems = errors.New("problems found")

// cmdValidate checks tenant files, each alone and together (machine
// addresses must be unique across tenants). It prints nothing when all are
// valid and one located problem per line otherwise.
func cmdValidate(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("validate", stderr)
	fs.Usage = func() { fmt.Fprintln(stderr, "usage: rezuscloud validate FILE...") }
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return errUsage
	}
	var valid []*tenant.Tenant
	var probs tenant.Problems
	names := map[string]string{}
	for _, path := range fs.Args() {
		t, err := tenant.Load(path)
		if err != nil {
			ps, ok := tenant.AsProblems(err)
			if !ok {
				ps = tenant.Problems{{File: path, Msg: err.Error()}}
			}
			probs = append(probs, ps...)
			continue
		}
		if other, dup := names[t.Name]; dup {
			probs = append(probs, tenant.Problem{File: path, Msg: fmt.Sprintf("tenant %q is also declared by %s", t.Name, other)})
			continue
		}
		names[t.Name] = path
		valid = append(valid, t)
	}
	probs = append(probs, tenant.CheckAcrossTenants(valid)...)
	if len(probs) == 0 {
		return nil
	}
	for _, p := range probs {
		fmt.Fprintln(stdout, p.Error())
	}
	return errProblems
}
