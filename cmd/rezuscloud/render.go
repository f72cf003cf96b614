package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"

	"github.com/rezuscloud/rezuscloud/internal/atomicfile"
	"github.com/rezuscloud/rezuscloud/internal/provider/platform"
	"github.com/rezuscloud/rezuscloud/internal/talos"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// cmdRender writes what rezuscloud would hand tofu and Talos for a tenant,
// touching no state: main.tf.json, controlplane.yaml, worker.yaml,
// talosconfig, and the secrets bundle they were made from. Everything but
// main.tf.json holds secrets: files are 0600 in a 0700 folder.
func cmdRender(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("render", stderr)
	file := fs.String("tenant", "", "tenant `file` to render")
	out := fs.String("out", "", "output `dir`")
	secretsFile := fs.String("secrets", "", "existing secrets bundle `file` to use (default: a new one, written to the output dir)")
	endpoint := fs.String("endpoint", "", "Kubernetes API endpoint `URL` for a cloud tenant without one")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *file == "" || *out == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "usage: rezuscloud render --tenant FILE --out DIR [--secrets FILE] [--endpoint URL]")
		return errUsage
	}
	t, err := tenant.Load(*file)
	if err != nil {
		if ps, ok := tenant.AsProblems(err); ok {
			for _, p := range ps {
				fmt.Fprintln(stdout, p.Error())
			}
			return errProblems
		}
		return err
	}
	ep := *endpoint
	if ep == "" {
		ep = talos.Endpoint(t)
	}
	if ep == "" {
		return fmt.Errorf("tenant %s has no endpoint yet (rezuscloud creates it in a first network step): give --endpoint https://ADDRESS:6443", t.Name)
	}
	var b *secrets.Bundle
	if *secretsFile != "" {
		b, err = talos.LoadSecrets(*secretsFile)
	} else {
		b, err = talos.NewSecrets(t.TalosVersion)
	}
	if err != nil {
		return err
	}
	full, err := platform.RenderFull(t, b, ep) // the engine's pipeline
	if err != nil {
		return err
	}
	configs := full.Configs
	if err := os.MkdirAll(*out, 0o700); err != nil {
		return err
	}
	files := map[string][]byte{
		"main.tf.json":      full.Doc,
		"controlplane.yaml": configs.ControlPlane,
		"worker.yaml":       configs.Worker,
		"talosconfig":       configs.Talosconfig,
	}
	if *secretsFile == "" {
		enc, err := talos.EncodeSecrets(b)
		if err != nil {
			return err
		}
		files[talos.SecretsFile] = enc
	}
	for name, data := range files {
		if err := atomicfile.Write(filepath.Join(*out, name), data, 0o600); err != nil {
			return fmt.Errorf("render: %w", err)
		}
	}
	fmt.Fprintf(stdout, "rendered tenant %s (%s, %d nodes) into %s\n", t.Name, t.Provider, len(t.Nodes()), *out)
	return nil
}
