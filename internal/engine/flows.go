package engine

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"go.uber.org/zap"

	"github.com/rezuscloud/rezuscloud/internal/atomicfile"
	"github.com/rezuscloud/rezuscloud/internal/backoff"
	"github.com/rezuscloud/rezuscloud/internal/provider"
	"github.com/rezuscloud/rezuscloud/internal/provider/platform"
	"github.com/rezuscloud/rezuscloud/internal/safefile"
	"github.com/rezuscloud/rezuscloud/internal/state"
	"github.com/rezuscloud/rezuscloud/internal/talos"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
	"github.com/rezuscloud/rezuscloud/internal/tofu"
)

// pendingPlan is a plan waiting for Apply, good only for the document it
// was made from.
type pendingPlan struct {
	plan    *tofu.Plan
	docHash [32]byte
	// networkOnly: the plan is of a cloud tenant's network part
	networkOnly bool
}

// dropPlan forgets the pending plan if it is plan.
func (ts *tenantState) dropPlan(plan *tofu.Plan) {
	ts.mu.Lock()
	if ts.plan != nil && ts.plan.plan == plan {
		ts.plan = nil
	}
	ts.mu.Unlock()
	ts.changed()
}

func (p *pendingPlan) changes() tenant.Changes {
	return tenant.Changes{Add: p.plan.Summary.Add, Change: p.plan.Summary.Change, Destroy: p.plan.Summary.Remove}
}

// progress shares: tofu takes the first half of an apply, Talos the rest.
const tofuShare = 50

// waitPolicy is how often a flow looks again at what it waits for, between
// the reports that wake it.
var waitPolicy = backoff.Policy{Initial: 250 * time.Millisecond, Max: 2 * time.Second}

func (e *Engine) talosconfigPath(name string) string {
	return filepath.Join(e.tenantDir(name), "talosconfig")
}

func (e *Engine) kubeconfigPath(name string) string {
	return filepath.Join(e.tenantDir(name), "kubeconfig")
}

// prepared is what a plan needs and an apply reuses.
type prepared struct {
	t        *tenant.Tenant
	renderer provider.Renderer
	bundle   *secrets.Bundle
	configs  *talos.Configs
	ws       Workspace
	doc      []byte
	// networkOnly: doc is a cloud tenant's network part (no endpoint yet)
	networkOnly bool
}

// prepare loads the secrets, generates the machine configs, renders the
// document and writes it into the tenant's work dir. A cloud tenant whose
// endpoint does not exist yet needs its network part first: for an apply
// it is created now; a plan (which must change nothing) gets the network
// part alone to plan (networkOnly).
func (ts *tenantState) prepare(ctx context.Context, r *run, apply bool) (*prepared, error) {
	e := ts.e
	t, rec := ts.snapshot()
	if t == nil {
		return nil, fmt.Errorf("tenant %s has no file", ts.name)
	}
	t = clusterVersions(t, rec) // a running cluster keeps its versions until a rollout
	bundle, err := talos.LoadOrCreateSecrets(e.tenantDir(ts.name), t.Name, t.TalosVersion, rec.Infra)
	if err != nil {
		return nil, err
	}
	if err := e.shareSecretsBundle(ts.name); err != nil {
		return nil, err
	}
	ws, err := e.opts.Infra.Workspace(ts.name, tofu.WorkspaceOptions{Env: e.opts.CloudEnv(t.Provider)})
	if err != nil {
		return nil, err
	}
	rd, err := platform.For(t.Provider)
	if err != nil {
		return nil, err
	}
	p := &prepared{t: t, renderer: rd, bundle: bundle, ws: ws}
	endpoint := talos.Endpoint(t) // the file's endpoint, or metal's first control plane
	if endpoint == "" {
		endpoint = rec.Endpoint // a cloud endpoint created earlier
	}
	if endpoint == "" && provider.NeedsNetworkStage(t) {
		if !apply {
			if p.doc, err = rd.Render(provider.Input{Tenant: t, Stage: provider.StageNetwork}); err != nil {
				return nil, err
			}
			if err := ws.WriteConfig(p.doc); err != nil {
				return nil, err
			}
			p.networkOnly = true
			return p, nil
		}
		if endpoint, err = ts.networkStage(ctx, r, p); err != nil {
			return nil, err
		}
	}
	// the same pipeline as `rezuscloud render`, each node at its versions
	full, err := platform.RenderFullAt(rd, t, bundle, endpoint, func(n tenant.Node) talos.Versions { return rec.versionsOf(n.Name) })
	if err != nil {
		return nil, err
	}
	p.configs, p.doc = full.Configs, full.Doc
	if err := ws.WriteConfig(p.doc); err != nil {
		return nil, err
	}
	if err := ts.recs.save(func(rec *record) { rec.Endpoint = p.configs.Endpoint; recordVersions(rec, t) }); err != nil {
		return nil, err
	}
	return p, nil
}

// networkStage creates a cloud tenant's network part first, so that its
// endpoint exists before the machine configs that name it.
func (ts *tenantState) networkStage(ctx context.Context, r *run, p *prepared) (string, error) {
	doc, err := p.renderer.Render(provider.Input{Tenant: p.t, Stage: provider.StageNetwork})
	if err != nil {
		return "", err
	}
	if err := p.ws.WriteConfig(doc); err != nil {
		return "", err
	}
	start := time.Now()
	plan, err := p.ws.Plan(ctx, ts.tofuOptions(r, nil))
	r.addTofu(time.Since(start))
	if err != nil {
		return "", err
	}
	start = time.Now()
	err = ts.recs.commit(func(rec *record) { rec.Infra = true }, func() error {
		_, err := p.ws.Apply(ctx, plan, ts.tofuOptions(r, nil))
		return err
	})
	r.addTofu(time.Since(start))
	if err != nil {
		return "", fmt.Errorf("creating the network for the endpoint: %w", err)
	}
	outs, err := p.ws.Output(ctx)
	if err != nil {
		return "", err
	}
	addr, err := provider.EndpointAddress(outs)
	if err != nil {
		return "", err
	}
	return talos.EndpointURL(addr), nil
}

// tofuOptions are a tofu command's options: its events go to the
// operation's log, its progress to onProgress.
func (ts *tenantState) tofuOptions(r *run, onProgress func(tofu.Progress)) tofu.RunOptions {
	return tofu.RunOptions{OnEvent: func(ev tofu.Event) { ts.e.oplog.tofu(ts.name, r.name, ev) }, OnProgress: onProgress}
}

// planOrApply plans the tenant; with apply it then applies that plan (or
// the pending plan made for exactly this document) and brings the nodes up.
func (ts *tenantState) planOrApply(ctx context.Context, r *run, apply bool) (string, error) {
	r.setStep(stepPrepare)
	p, err := ts.prepare(ctx, r, apply)
	if err != nil {
		return "", err
	}
	hash := sha256.Sum256(p.doc)
	ts.mu.Lock()
	pending := ts.plan
	ts.mu.Unlock()
	var plan *tofu.Plan
	if apply && pending != nil && pending.docHash == hash {
		plan = pending.plan
	} else {
		r.setStep(stepPlan)
		start := time.Now()
		plan, err = p.ws.Plan(ctx, ts.tofuOptions(r, nil))
		r.addTofu(time.Since(start))
		if err != nil {
			return "", err
		}
	}
	pp := &pendingPlan{plan: plan, docHash: hash, networkOnly: p.networkOnly}
	ts.mu.Lock()
	ts.plan = pp // shown as pending changes, until applied
	ts.drift = nil
	ts.mu.Unlock()
	ts.changed()
	changes := pp.changes()
	if !apply {
		if p.networkOnly {
			return fmt.Sprintf("plan of the network part: %d to add; the machines are planned once the endpoint exists (press Apply)", changes.Add), nil
		}
		return fmt.Sprintf("plan: %d to add, %d to change, %d to destroy; press Apply to apply it", changes.Add, changes.Change, changes.Destroy), nil
	}
	return ts.applyPlan(ctx, r, p, plan)
}

// applyPlan brings the tenant to what p declares, in named steps: reset
// the nodes the plan removes and apply the plan (applyInfra), record the
// nodes tofu reports (recordNodes), configure them through Talos
// (configureTalos), bootstrap etcd once and fetch the kubeconfig
// (bootstrapOnce), and wait until every node runs (waitRunning).
func (ts *tenantState) applyPlan(ctx context.Context, r *run, p *prepared, plan *tofu.Plan) (string, error) {
	rec := ts.recs.get()
	declared := map[string]tenant.Node{}
	for _, n := range p.t.Nodes() {
		declared[n.Name] = n
	}
	var added, removed []string
	for n := range rec.Nodes {
		if _, ok := declared[n]; !ok {
			removed = append(removed, n)
		}
	}
	for n := range declared {
		if _, ok := rec.Nodes[n]; !ok {
			added = append(added, n)
		}
	}
	slices.Sort(removed)
	if rec.Bootstrapped && len(added)+len(removed) > 0 {
		r.setActivity(tenant.ActivityScaling) // a running cluster is scaled; it stays running
	}
	if err := ts.applyInfra(ctx, r, p, plan, rec, added, removed); err != nil {
		return "", err
	}
	nodes, err := ts.recordNodes(ctx, r, p, plan, rec, declared, removed)
	if err != nil {
		return "", err
	}
	tc, err := ts.configureTalos(ctx, r, p, nodes)
	if err != nil {
		return "", err
	}
	if err := ts.bootstrapOnce(ctx, r, p, rec, tc); err != nil {
		return "", err
	}
	r.setStep(stepWait)
	r.setProgress(90)
	if err := ts.waitRunning(ctx, r, nodes); err != nil {
		return "", err
	}
	r.setProgress(100)
	return fmt.Sprintf("%d nodes running; kubeconfig in %s", len(nodes), ts.e.kubeconfigPath(ts.name)), nil
}

// applyInfra resets the nodes the plan removes (gracefully: they leave a
// running cluster) and applies the plan, when it changes anything. The
// record says Infra before tofu creates the first resource.
func (ts *tenantState) applyInfra(ctx context.Context, r *run, p *prepared, plan *tofu.Plan, rec record, added, removed []string) error {
	if plan.HasChanges() {
		for _, n := range added {
			r.intend(n, tenant.StageProvisioning, false)
		}
		if len(removed) > 0 {
			r.setStep(stepReset)
			if err := ts.resetNodes(ctx, r, p.t, removed, true); err != nil {
				return err
			}
		}
		r.setStep(stepInfra)
		planned := plan.Planned()
		start := time.Now()
		err := ts.recs.commit(func(rec *record) { rec.Infra = true }, func() error {
			_, err := p.ws.Apply(ctx, plan, ts.tofuOptions(r, func(pr tofu.Progress) {
				if pr.Planned > 0 {
					r.setProgress(pr.Completed * tofuShare / pr.Planned)
				} else if planned > 0 {
					r.setProgress(pr.Completed * tofuShare / planned)
				}
			}))
			return err
		})
		r.addTofu(time.Since(start))
		ts.dropPlan(plan) // applied, or spent: tofu removes a plan file it applied
		if err != nil {
			return ts.explain(ctx, p, err)
		}
	}
	ts.dropPlan(plan)
	r.setProgress(tofuShare)
	return nil
}

// reportedNodes reads the nodes tofu's outputs report. An interrupted
// apply (a stop, a killed add-on) can leave every resource in the state but
// not the outputs, which tofu writes at the end: then the plan changes only
// outputs, and it is applied to write them.
func (ts *tenantState) reportedNodes(ctx context.Context, r *run, p *prepared, plan *tofu.Plan, declared map[string]tenant.Node) ([]provider.NodeOutput, error) {
	read := func() ([]provider.NodeOutput, error) {
		start := time.Now()
		outs, err := p.ws.Output(ctx)
		r.addTofu(time.Since(start))
		if err != nil {
			return nil, err
		}
		return provider.ParseNodes(outs)
	}
	outs, err := read()
	if err != nil || plan.HasChanges() || allReported(declared, outs) {
		return outs, err
	}
	ts.e.log.Info("tofu's outputs do not name every node (an interrupted apply); writing them", zap.String("tenant", ts.name))
	plan, err = p.ws.Plan(ctx, ts.tofuOptions(r, nil))
	if err != nil {
		return nil, err
	}
	start := time.Now()
	_, err = p.ws.Apply(ctx, plan, ts.tofuOptions(r, nil))
	r.addTofu(time.Since(start))
	if err != nil {
		return nil, ts.explain(ctx, p, err)
	}
	return read()
}

// recordNodes records the nodes as tofu reports them (before any Talos
// call to them); removed nodes leave Home Assistant.
func (ts *tenantState) recordNodes(ctx context.Context, r *run, p *prepared, plan *tofu.Plan, rec record, declared map[string]tenant.Node, removed []string) (map[string]nodeRecord, error) {
	outs, err := ts.reportedNodes(ctx, r, p, plan, declared)
	if err != nil {
		return nil, err
	}
	nodes := map[string]nodeRecord{}
	for _, o := range outs {
		n, ok := declared[o.Name]
		if !ok {
			continue
		}
		nr := nodeRecord{Address: o.Address, ID: o.ID, Group: n.Group, Role: n.Role}
		if p.t.Provider != tenant.ProviderMetal {
			nr.PrivateAddress = o.PrivateAddress
		}
		if old, ok := rec.Nodes[o.Name]; ok && old.Address == o.Address && old.ID == o.ID {
			// the same machine: it has that config, at those versions
			nr.ConfigHash = old.ConfigHash
			nr.TalosVersion, nr.KubernetesVersion, nr.KubeletVersion = old.TalosVersion, old.KubernetesVersion, old.KubeletVersion
			nr.Off = old.Off
		} else if p.t.Provider != tenant.ProviderMetal {
			// a new instance booted from its user_data, which is this
			// config: it is not sent it again
			nr.ConfigHash = configHash(p.configs.Nodes[o.Name])
		}
		nodes[o.Name] = nr
	}
	for n := range declared {
		if _, ok := nodes[n]; !ok {
			return nil, fmt.Errorf("tofu reports no address for node %s", n)
		}
	}
	specRaw := ts.currentSpecRaw()
	if err := ts.recs.save(func(rec *record) { rec.Nodes = nodes; rec.Spec = specRaw }); err != nil {
		return nil, err
	}
	for _, n := range removed {
		r.release(n) // its reset is done: it leaves Home Assistant
	}
	ts.e.updatePollTargets()
	return nodes, nil
}

func (ts *tenantState) currentSpecRaw() []byte {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return slices.Clone(ts.specRaw)
}

// configureTalos writes the talosconfig (the control planes reached
// directly are its endpoints) and gives every node its machine config.
func (ts *tenantState) configureTalos(ctx context.Context, r *run, p *prepared, nodes map[string]nodeRecord) ([]byte, error) {
	e := ts.e
	r.setStep(stepConfigure)
	var cps []string
	for _, n := range p.t.Nodes() {
		if nr := nodes[n.Name]; n.Role == tenant.RoleControlPlane && !routed(p.t.Provider, nr) {
			cps = append(cps, nr.Address)
		}
	}
	tc, err := talos.Talosconfig(p.bundle, p.t.Name, cps)
	if err != nil {
		return nil, err
	}
	if err := e.writeSecretFile(ts.name, "talosconfig", tc); err != nil {
		return nil, err
	}
	e.updatePollTargets()
	if err := ts.configureNodes(ctx, r, p, nodes, tc); err != nil {
		return nil, err
	}
	r.setProgress(75)
	return tc, nil
}

// bootstrapOnce bootstraps etcd on the first control plane unless the
// record says it was, and writes the kubeconfig.
func (ts *tenantState) bootstrapOnce(ctx context.Context, r *run, p *prepared, rec record, tc []byte) error {
	r.setStep(stepBootstrap)
	first, ok := ts.target(firstControlPlane(p.t))
	if !ok {
		return fmt.Errorf("the first control plane %s has no address", firstControlPlane(p.t))
	}
	if !rec.Bootstrapped {
		if err := ts.e.opts.Nodes.Bootstrap(ctx, first, tc); err != nil {
			return fmt.Errorf("bootstrap: %w", err)
		}
		if err := ts.recs.save(func(r *record) { r.Bootstrapped = true }); err != nil {
			return err
		}
		ts.e.oplog.line(ts.name, r.name, "talos", "info", "etcd bootstrapped on "+firstControlPlane(p.t))
	}
	kc, err := ts.e.opts.Nodes.Kubeconfig(ctx, first, tc)
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	return ts.e.writeSecretFile(ts.name, "kubeconfig", kc)
}

// allReported reports whether tofu's outputs name every declared node.
func allReported(declared map[string]tenant.Node, outs []provider.NodeOutput) bool {
	seen := map[string]bool{}
	for _, o := range outs {
		seen[o.Name] = true
	}
	for n := range declared {
		if !seen[n] {
			return false
		}
	}
	return true
}

// explainer is a renderer that can add what the cloud knows to a failed
// apply's error (Nova's fault of a server in ERROR, which the provider
// never prints).
type explainer interface {
	Explain(ctx context.Context, t *tenant.Tenant, env map[string]string, msg string) string
}

// explain returns err with the platform's explanation, when it has one.
func (ts *tenantState) explain(ctx context.Context, p *prepared, err error) error {
	ex, ok := p.renderer.(explainer)
	if ctx.Err() != nil || !ok {
		return err
	}
	if msg := ex.Explain(ctx, p.t, ts.e.opts.CloudEnv(p.t.Provider), err.Error()); msg != err.Error() {
		return &explainedError{msg: msg, err: err}
	}
	return err
}

// explainedError is an error with a better message; it still matches what
// it wraps.
type explainedError struct {
	msg string
	err error
}

func (e *explainedError) Error() string { return e.msg }
func (e *explainedError) Unwrap() error { return e.err }

// configureNodes gives every node in maintenance mode its machine config,
// control planes first, and then waits for each node's secure API. The two
// steps are apart because a worker's API comes up only after a control
// plane of its cluster is configured (it gets its certificate from trustd):
// waiting for workers while holding the slots a control plane needs would
// never end.
func (ts *tenantState) configureNodes(ctx context.Context, r *run, p *prepared, nodes map[string]nodeRecord, tc []byte) error {
	ctx, cancel := context.WithTimeout(ctx, ts.e.opts.NodeTimeout)
	defer cancel()
	var order []string
	for _, n := range p.t.Nodes() { // control-plane group first, as declared
		if nr, ok := nodes[n.Name]; ok && !nr.Off && n.Role == tenant.RoleControlPlane {
			order = append(order, n.Name)
		}
	}
	for _, n := range p.t.Nodes() { // a machine powered off on purpose stays off
		if nr, ok := nodes[n.Name]; ok && !nr.Off && n.Role != tenant.RoleControlPlane {
			order = append(order, n.Name)
		}
	}
	macs := map[string]string{}
	for _, n := range p.t.Nodes() {
		if n.Machine != nil {
			macs[n.Name] = n.Machine.MAC
		}
	}
	for _, n := range order {
		r.expect(n) // brought up by this apply: not down
	}
	if err := parallel(ctx, order, func(name string) error {
		t, _ := ts.target(name)
		return ts.configureNode(ctx, r, name, t, macs[name], p.configs.Nodes[name], tc)
	}); err != nil {
		return err
	}
	return parallel(ctx, order, func(name string) error {
		t, _ := ts.target(name)
		return ts.waitConfigured(ctx, r, name, t, p.configs.Nodes[name], tc)
	})
}

// parallelism bounds the nodes worked on at once.
const parallelism = 8

// parallel runs fn for each name, a few at a time, in order of start, and
// joins their errors.
func parallel(ctx context.Context, names []string, fn func(name string) error) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	sem := make(chan struct{}, parallelism)
	for _, name := range names {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			mu.Lock()
			errs = append(errs, context.Cause(ctx))
			mu.Unlock()
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := fn(name); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// configureNode waits until a node answers and gives it its machine
// config: through the maintenance API when it waits for one, through the
// secure API when it runs with an older one.
func (ts *tenantState) configureNode(ctx context.Context, r *run, name string, target talos.Target, mac string, cfg, tc []byte) error {
	hash := configHash(cfg)
	ep := target.String()
	last := tenant.StageUnreachable
	var woken time.Time
	err := backoff.Until(ctx, waitPolicy, nil, func(ctx context.Context) (bool, error) {
		st, err := ts.read(ctx, name, target, tc)
		if err != nil {
			if errors.Is(err, talos.ErrCredentials) {
				return false, fmt.Errorf("node %s at %s belongs to another cluster (it refuses this tenant's credentials); reset it to maintenance mode first", name, ep)
			}
			return false, nil
		}
		switch st.Stage {
		case tenant.StageMaintenance:
			if target.Routed() {
				return false, fmt.Errorf("node %s is in maintenance mode, and it can only be reached through a control plane, which maintenance mode does not serve: recreate the instance so that it boots from its user_data", name)
			}
			// recorded first: if a stop interrupts the call after the
			// node took the config, the node comes up with it and is
			// not given it again; if the node did not take it, it is
			// still in maintenance next time, whatever the record says
			if err := ts.recs.commit(func(rec *record) { setConfigHash(rec, name, hash) }, func() error {
				return ts.e.opts.Nodes.ApplyMaintenance(ctx, target.Endpoints[0], cfg)
			}); err != nil {
				return false, fmt.Errorf("node %s: applying its machine config: %w", name, err)
			}
			r.intend(name, tenant.StageInstalling, false)
			ts.e.oplog.line(ts.name, r.name, "talos", "info", "node "+name+": machine config given in maintenance mode; installing")
			return true, nil
		case tenant.StageRunning:
			if ts.recs.get().Nodes[name].ConfigHash == hash {
				return true, nil
			}
			if err := ts.e.opts.Nodes.ApplyConfig(ctx, target, tc, cfg); err != nil {
				return false, fmt.Errorf("node %s: applying its changed machine config: %w", name, err)
			}
			ts.e.oplog.line(ts.name, r.name, "talos", "info", "node "+name+": changed machine config applied")
			return true, ts.recs.save(func(rec *record) { setConfigHash(rec, name, hash) })
		}
		// unreachable, or on its way up with a config (installing,
		// rebooting, booting: an interrupted apply): wait for it
		last = st.Stage
		if st.Stage == tenant.StageUnreachable {
			ts.wakeMachine(ctx, name, mac, &woken) // power.go: Wake-on-LAN or the machine's power
		}
		return false, nil
	})
	if err != nil && ctx.Err() != nil {
		if last != tenant.StageUnreachable {
			return fmt.Errorf("node %s at %s stayed in stage %s: %w", name, ep, last, context.Cause(ctx))
		}
		return fmt.Errorf("node %s did not answer at %s: %w", name, ep, context.Cause(ctx))
	}
	return err
}

// waitConfigured waits until a node that was given its config answers
// the secure API. A node that falls back to maintenance mode instead (its
// install failed, it rebooted from the ISO) is noticed, logged and given
// its config again, twice at most; then the apply fails and says so,
// instead of waiting in silence until its timeout.
func (ts *tenantState) waitConfigured(ctx context.Context, r *run, name string, target talos.Target, cfg, tc []byte) error {
	const maxReapply = 2
	reapplied := 0
	for {
		tctx, cancel := context.WithTimeout(ctx, ts.e.secureTry)
		_, err := ts.e.opts.Nodes.WaitSecure(tctx, target, tc)
		definitive := err != nil && tctx.Err() == nil // not a time-out: the node refused
		cancel()
		if err == nil {
			r.expect(name) // it boots: shown as it reports itself
			return nil
		}
		if definitive {
			return fmt.Errorf("node %s: waiting for its Talos API: %w", name, err)
		}
		if ctx.Err() != nil {
			return fmt.Errorf("node %s: waiting for its Talos API: %w", name, context.Cause(ctx))
		}
		st, serr := ts.read(ctx, name, target, tc)
		if serr != nil || st.Stage != tenant.StageMaintenance || target.Routed() {
			continue
		}
		if reapplied >= maxReapply {
			return fmt.Errorf("node %s fell back to maintenance mode %d times after it was given its machine config: check its install disk and its console", name, reapplied+1)
		}
		reapplied++
		ts.e.log.Warn("node fell back to maintenance mode after it was configured; giving it its machine config again",
			zap.String("tenant", ts.name), zap.String("node", name), zap.Int("attempt", reapplied))
		ts.e.oplog.line(ts.name, r.name, "talos", "warn", fmt.Sprintf("node %s fell back to maintenance mode; giving it its machine config again (%d of %d)", name, reapplied, maxReapply))
		if err := ts.e.opts.Nodes.ApplyMaintenance(ctx, target.Endpoints[0], cfg); err != nil {
			return fmt.Errorf("node %s: applying its machine config again after it fell back to maintenance mode: %w", name, err)
		}
		r.intend(name, tenant.StageInstalling, false)
	}
}

// configHash identifies a machine config in the record.
func configHash(cfg []byte) string {
	sum := sha256.Sum256(cfg)
	return hex.EncodeToString(sum[:])
}

// firstControlPlane is the node etcd is bootstrapped on and the
// kubeconfig is fetched from: the first node of the control-plane group.
func firstControlPlane(t *tenant.Tenant) string {
	for _, n := range t.Nodes() {
		if n.Role == tenant.RoleControlPlane {
			return n.Name
		}
	}
	return ""
}

// setConfigHash marks in r that a node has the config of that hash.
func setConfigHash(r *record, name, hash string) {
	if n, ok := r.Nodes[name]; ok {
		n.ConfigHash = hash
		r.Nodes[name] = n
	}
}

// waitNodes waits until ok holds for what each node last reported: it has
// them polled at once and again as waitPolicy says, and looks again at
// every report. It returns the nodes still waited for when ctx ends.
func (ts *tenantState) waitNodes(ctx context.Context, nodes []string, ok func(name string, o nodeObs) bool) ([]string, error) {
	var waiting []string
	err := backoff.Until(ctx, waitPolicy, func() <-chan struct{} {
		_, _, ch := ts.observed("")
		return ch
	}, func(context.Context) (bool, error) {
		waiting = waiting[:0]
		for _, n := range nodes {
			if o, seen, _ := ts.observed(n); !seen || !ok(n, o) {
				waiting = append(waiting, n)
				ts.e.poller.Trigger(pollKey(ts.name, n))
			}
		}
		return len(waiting) == 0, nil
	})
	slices.Sort(waiting)
	return waiting, err
}

// runningReady: the node runs and is ready.
func runningReady(_ string, o nodeObs) bool { return o.st.Stage == tenant.StageRunning && o.st.Ready }

// waitRunning waits until every node runs and is ready.
func (ts *tenantState) waitRunning(ctx context.Context, r *run, nodes map[string]nodeRecord) error {
	ctx, cancel := context.WithTimeout(ctx, ts.e.opts.NodeTimeout)
	defer cancel()
	var names []string
	for n, nr := range nodes {
		if !nr.Off { // powered off on purpose
			names = append(names, n)
		}
	}
	waiting, err := ts.waitNodes(ctx, names, runningReady)
	if err != nil {
		return fmt.Errorf("nodes not running and ready in time: %s: %w", strings.Join(waiting, ", "), err)
	}
	return nil
}

// resetNodes resets nodes through the Talos API: gracefully (cordon,
// drain, leave etcd) when removing them from a running cluster, or not
// (back to maintenance) when the whole cluster goes. A removed metal node
// whose machine can be powered on again is halted instead of rebooted, to
// save power. A node that is gone (a cloud instance tofu removes anyway,
// or a machine being destroyed) is no reason to stop; a metal machine that
// does not answer a graceful reset is named, with what the user can do.
func (ts *tenantState) resetNodes(ctx context.Context, r *run, t *tenant.Tenant, names []string, graceful bool) error {
	e := ts.e
	tc, err := talos.LoadTalosconfig(e.talosconfigPath(ts.name))
	if err != nil {
		return nil // never configured: nothing to reset
	}
	var errs []error
	for i, n := range names {
		ep, ok := ts.target(n)
		if !ok {
			continue
		}
		r.intend(n, tenant.StageResetting, false)
		opts := talos.ResetOptions{Graceful: graceful}
		m := machineOf(t, n)
		if graceful && e.canPowerOff(m) { // power.go
			opts.Halt = true
		}
		rctx, cancel := context.WithTimeout(ctx, e.opts.ResetTimeout)
		err := ts.e.opts.Nodes.Reset(rctx, ep, tc, opts)
		cancel()
		if err == nil && opts.Halt {
			e.log.Info("node reset and halted; its power brings it back when needed", zap.String("node", n))
			ts.afterHalt(ctx, n, ep, m, tc)
		}
		if err == nil && !opts.Halt && t.Provider == tenant.ProviderMetal {
			// the reset was accepted: a machine that does not get back to
			// maintenance mode in time is named, so a teardown never hangs
			err = ts.waitReset(ctx, n, ep, tc)
			if err != nil && !graceful {
				e.log.Warn("node did not come back in maintenance mode after its reset; the cluster is destroyed anyway", zap.String("node", n), zap.Error(err))
				e.oplog.line(ts.name, r.name, "talos", "warn", "node "+n+" did not come back in maintenance mode after its reset")
				err = nil
			}
		}
		if err == nil {
			e.oplog.line(ts.name, r.name, "talos", "info", fmt.Sprintf("node %s reset (%d of %d)", n, i+1, len(names)))
			r.setProgress((i + 1) * tofuShare / len(names))
		}
		if err != nil {
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			st, serr := ts.read(ctx, n, ep, tc)
			switch {
			case serr == nil && st.Stage == tenant.StageMaintenance:
				continue // already reset
			case serr == nil && st.Stage == tenant.StageUnreachable && (!graceful || t.Provider != tenant.ProviderMetal):
				e.log.Warn("node unreachable during reset; it is removed anyway", zap.String("node", n))
				e.oplog.line(ts.name, r.name, "talos", "warn", "node "+n+" does not answer; it is removed without a reset")
				continue
			}
			addr := ""
			if m != nil {
				addr = " (" + m.Address + ")"
			}
			errs = append(errs, fmt.Errorf("node %s%s did not take its reset within %s: %w; bring it back and press Apply again, or forget the machine (Forget machine) to remove it without touching it",
				n, addr, e.opts.ResetTimeout, err))
		}
	}
	return errors.Join(errs...)
}

// waitReset waits, up to the reset timeout, until a node that accepted its
// reset is back in maintenance mode.
func (ts *tenantState) waitReset(ctx context.Context, n string, ep talos.Target, tc []byte) error {
	wctx, cancel := context.WithTimeout(ctx, ts.e.opts.ResetTimeout)
	defer cancel()
	last := tenant.StageResetting
	err := backoff.Until(wctx, waitPolicy, nil, func(ctx context.Context) (bool, error) {
		st, _ := ts.read(ctx, n, ep, tc)
		last = st.Stage
		return st.Stage == tenant.StageMaintenance, nil
	})
	if err != nil {
		return fmt.Errorf("it accepted its reset but was not back in maintenance mode within %s (stage %s): %w",
			ts.e.opts.ResetTimeout, last, err)
	}
	return nil
}

// machineOf finds the pool machine of a metal node by its name, also for a
// node the tenant no longer declares (a group that shrank keeps its pool).
func machineOf(t *tenant.Tenant, node string) *tenant.Machine {
	if t == nil || t.Provider != tenant.ProviderMetal {
		return nil
	}
	for gi := range t.NodeGroups {
		g := &t.NodeGroups[gi]
		for i := range g.Machines {
			if tenant.NodeName(t.Name, g.Name, i+1) == node {
				return &g.Machines[i]
			}
		}
	}
	return nil
}

// destroy resets the nodes back to maintenance and destroys the
// infrastructure; the secrets bundle stays until the tenant file is removed.
func (ts *tenantState) destroy(ctx context.Context, r *run) (string, error) {
	e := ts.e
	t, rec := ts.snapshot()
	if t == nil {
		return "", fmt.Errorf("tenant %s has neither a file nor a remembered spec", ts.name)
	}
	var names []string
	for n := range rec.Nodes {
		names = append(names, n)
	}
	slices.Sort(names)
	if t.Provider == tenant.ProviderMetal {
		r.setStep(stepReset)
		if err := ts.resetNodes(ctx, r, t, names, false); err != nil {
			return "", err
		}
	}
	ws, err := e.opts.Infra.Workspace(ts.name, tofu.WorkspaceOptions{Env: e.opts.CloudEnv(t.Provider)})
	if err != nil {
		return "", err
	}
	r.setStep(stepInfra)
	if _, err := os.Stat(filepath.Join(ws.Dir(), tofu.ConfigFile)); err == nil {
		start := time.Now()
		_, err := ws.Destroy(ctx, ts.tofuOptions(r, func(pr tofu.Progress) {
			if pr.Planned > 0 {
				r.setProgress(pr.Completed * 100 / pr.Planned)
			}
		}))
		r.addTofu(time.Since(start))
		if err != nil {
			return "", err
		}
	}
	if err := ts.recs.save(func(r *record) {
		r.Infra, r.Bootstrapped, r.Nodes, r.Endpoint, r.Rollout = false, false, nil, "", nil
	}); err != nil {
		return "", err
	}
	e.unshare(ts.name, false, state.Kubeconfig, state.Talosconfig)
	for _, f := range []string{state.Kubeconfig, state.Talosconfig} {
		os.Remove(filepath.Join(e.tenantDir(ts.name), f))
		if e.opts.ShareDir != "" {
			os.Remove(filepath.Join(e.opts.ShareDir, ts.name, f))
		}
	}
	ts.mu.Lock()
	ts.plan, ts.drift = nil, nil
	orphan := ts.spec == nil
	ts.mu.Unlock()
	for _, n := range names {
		r.release(n)
	}
	e.updatePollTargets()
	r.setProgress(100)
	if orphan {
		e.forget(ts)
	}
	return "destroyed; the secrets bundle is kept until the tenant file is removed", nil
}

// forget removes an orphaned tenant after its destroy.
func (e *Engine) forget(ts *tenantState) {
	e.mu.Lock()
	if cur, ok := e.ts[ts.name]; ok && cur == ts && !e.closed {
		delete(e.ts, ts.name)
		ts.close()
	}
	ts.mu.Lock()
	ts.forgotten = true
	ts.mu.Unlock()
	e.mu.Unlock()
	e.removeTenantFiles(ts.name)
	e.publishTenants()
}

// removeTenantFiles deletes what the engine kept of a tenant that has no
// infrastructure and no file any more: its secrets bundle and record.
func (e *Engine) removeTenantFiles(name string) {
	e.unshare(name, true, state.SecretKinds...)
	for _, p := range []string{talos.SecretsPath(e.tenantDir(name)), e.recordPath(name)} {
		if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
			e.log.Warn("removing a forgotten tenant's file", zap.String("file", p), zap.Error(err))
		}
	}
	os.Remove(e.tenantDir(name)) // only if empty
}

// refreshShare puts the tenant's kubeconfig and talosconfig into the share
// folder where it lacks them or holds others (a new box that took over a
// shared store, a share folder emptied by hand): the user reads them there.
func (e *Engine) refreshShare(name string) {
	if e.opts.ShareDir == "" {
		return
	}
	for _, kind := range []string{state.Kubeconfig, state.Talosconfig} {
		data, err := safefile.Read(filepath.Join(e.tenantDir(name), kind), 1<<20)
		if err != nil {
			continue // none yet
		}
		dst := filepath.Join(e.opts.ShareDir, name, kind)
		if have, err := safefile.Read(dst, 1<<20); err == nil && bytes.Equal(have, data) {
			continue
		}
		if err := writePrivate(dst, data); err != nil {
			e.log.Warn("writing a secret into the share folder", zap.String("tenant", name), zap.String("file", dst), zap.Error(err))
		}
	}
}

// bootstrap bootstraps etcd once (AlreadyExists counts as done).
func (ts *tenantState) bootstrap(ctx context.Context, r *run) (string, error) {
	t, _ := ts.snapshot()
	tc, err := ts.talosconfig()
	if err != nil || t == nil {
		return "", fmt.Errorf("tenant %s is not provisioned: press Apply", ts.name)
	}
	first, ok := ts.target(firstControlPlane(t))
	if !ok {
		return "", fmt.Errorf("tenant %s has no provisioned control plane", ts.name)
	}
	r.setStep(stepBootstrap)
	if err := ts.e.opts.Nodes.Bootstrap(ctx, first, tc); err != nil {
		return "", err
	}
	if err := ts.recs.save(func(r *record) { r.Bootstrapped = true }); err != nil {
		return "", err
	}
	return "etcd is bootstrapped", nil
}

// reboot reboots one node and waits until it runs and is ready again.
func (ts *tenantState) reboot(ctx context.Context, r *run, node string) (string, error) {
	ep, ok := ts.target(node)
	if !ok {
		return "", fmt.Errorf("node %s is not provisioned", node)
	}
	tc, err := ts.talosconfig()
	if err != nil {
		return "", err
	}
	if err := ts.e.opts.Nodes.Reboot(ctx, ep, tc); err != nil {
		return "", err
	}
	r.intend(node, tenant.StageRebooting, false)
	ctx, cancel := context.WithTimeout(ctx, ts.e.opts.NodeTimeout)
	defer cancel()
	// down first (a reboot is seen within a minute), then back up
	dctx, dcancel := context.WithTimeout(ctx, time.Minute)
	_, _ = ts.waitNodes(dctx, []string{node}, func(_ string, o nodeObs) bool { return o.st.Stage != tenant.StageRunning })
	dcancel()
	if ctx.Err() != nil {
		return "", context.Cause(ctx)
	}
	r.expect(node) // shown as it reports itself from now on
	if _, err := ts.waitNodes(ctx, []string{node}, runningReady); err != nil {
		return "", fmt.Errorf("node %s did not come back running and ready after its reboot: %w", node, err)
	}
	return fmt.Sprintf("node %s rebooted and runs again", node), nil
}

// writeSecretFile writes a tenant secret (0600) under the data dir and,
// when the share folder is mapped, under <share>/<tenant>/.
func (e *Engine) writeSecretFile(name, file string, data []byte) error {
	if err := e.shareSecret(name, file, data); err != nil {
		return err
	}
	dirs := []string{e.tenantDir(name)}
	if e.opts.ShareDir != "" {
		dirs = append(dirs, filepath.Join(e.opts.ShareDir, name))
	}
	for _, d := range dirs {
		if err := writePrivate(filepath.Join(d, file), data); err != nil {
			return fmt.Errorf("tenant %s: %w", name, err)
		}
	}
	return nil
}

// writePrivate writes a file 0600 (its folder 0700), atomically.
func writePrivate(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	if err := atomicfile.Write(path, data, 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
