package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
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
	"github.com/rezuscloud/rezuscloud/internal/provider"
	"github.com/rezuscloud/rezuscloud/internal/provider/platform"
	"github.com/rezuscloud/rezuscloud/internal/talos"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
	"github.com/rezuscloud/rezuscloud/internal/tofu"
)

// pendingPlan is a plan waiting for Apply, good only for the document it
// was made from.
type pendingPlan struct {
	plan    *tofu.Plan
	docHash [32]byte
}

// progress shares: tofu takes the first half of an apply, Talos the rest.
const tofuShare = 50

func (e *Engine) talosconfigPath(name string) string {
	return filepath.Join(e.tenantDir(name), "talosconfig")
}

func (e *Engine) kubeconfigPath(name string) string {
	return filepath.Join(e.tenantDir(name), "kubeconfig")
}

// dispatch runs an operation's flow and returns a message for the user.
func (ts *tstate) dispatch(ctx context.Context, op *operation) (string, error) {
	switch op.name {
	case "plan":
		return ts.planOrApply(ctx, false)
	case "apply":
		msg, err := ts.planOrApply(ctx, true)
		if err == nil {
			ts.queueAutoUpgrades() // auto_apply: a changed version rolls out after the apply
		}
		return msg, err
	case "destroy":
		return ts.destroy(ctx)
	case "bootstrap":
		return ts.bootstrap(ctx)
	case "reboot":
		return ts.reboot(ctx, op.args.node)
	case "power_off":
		return ts.powerOff(ctx, op.args.node) // power.go
	case "power_on":
		return ts.powerOn(ctx, op.args.node)
	case "upgrade":
		return ts.upgrade(ctx, op.args.component)
	case "backup":
		return ts.backup(ctx)
	}
	return "", fmt.Errorf("unknown operation %q", op.name)
}

// snapshot returns the spec to work on and the record, under the lock.
func (ts *tstate) snapshot() (*tenant.Tenant, record) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	t := ts.spec
	if t == nil {
		t = ts.applied
	}
	return t, ts.rec.clone()
}

func (ts *tstate) setProgress(pct int) {
	ts.setStatus(func(s *tenant.Status) { s.Progress = min(max(pct, 0), 100) })
}

// saveRec changes the record and writes it. Writes are serialised by
// saveMu and each writes the record as it is when the write starts, so a
// slower writer can never put back an older record over a newer one (two
// nodes' config markers saved at once both survive).
func (ts *tstate) saveRec(f func(*record)) error {
	ts.saveMu.Lock()
	defer ts.saveMu.Unlock()
	ts.mu.Lock()
	if f != nil {
		f(&ts.rec)
	}
	rec := ts.rec.clone()
	ts.mu.Unlock()
	return ts.e.saveRecord(ts.name, rec)
}

// commit is the crash-ordering rule in one place: what act is about to do
// is recorded (and on disk) before act runs, so that a stop, a kill or a
// power cut in the middle of act finds a record that covers it (Infra
// before tofu creates anything; a node's config marker before the node
// gets the config). A failed write runs nothing.
func (ts *tstate) commit(change func(*record), act func() error) error {
	if err := ts.saveRec(change); err != nil {
		return err
	}
	return act()
}

// persist writes the record as it is now (after a change made under mu).
func (ts *tstate) persist() error { return ts.saveRec(nil) }

// prepared is what a plan needs and an apply reuses.
type prepared struct {
	t       *tenant.Tenant
	bundle  *secrets.Bundle
	configs *talos.Configs
	ws      Workspace
	doc     []byte
	// networkOnly: doc is a cloud tenant's network part (no endpoint yet)
	networkOnly bool
}

// prepare loads the secrets, generates the machine configs, renders the
// document and writes it into the tenant's work dir. A cloud tenant whose
// endpoint does not exist yet needs its network part first: for an apply
// it is created now; a plan (which must change nothing) gets the network
// part alone to plan (networkOnly).
func (ts *tstate) prepare(ctx context.Context, apply bool) (*prepared, error) {
	e := ts.e
	t, rec := ts.snapshot()
	if t == nil {
		return nil, fmt.Errorf("tenant %s has no file", ts.name)
	}
	t = pinVersions(t, rec) // a running cluster keeps its versions until a rollout
	bundle, err := talos.LoadOrCreateSecrets(e.tenantDir(ts.name), t.Name, t.TalosVersion, rec.Infra)
	if err != nil {
		return nil, err
	}
	ws, err := e.opts.Infra.Workspace(ts.name, tofu.WorkspaceOptions{Env: e.opts.CloudEnv(t.Provider)})
	if err != nil {
		return nil, err
	}
	r, err := platform.For(t.Provider)
	if err != nil {
		return nil, err
	}
	endpoint := talos.Endpoint(t) // the file's endpoint, or metal's first control plane
	if endpoint == "" {
		endpoint = rec.Endpoint // a cloud endpoint created earlier
	}
	if endpoint == "" && provider.NeedsNetworkStage(t) {
		if !apply {
			doc, err := r.Render(provider.Input{Tenant: t, Stage: provider.StageNetwork})
			if err != nil {
				return nil, err
			}
			if err := ws.WriteConfig(doc); err != nil {
				return nil, err
			}
			return &prepared{t: t, bundle: bundle, ws: ws, doc: doc, networkOnly: true}, nil
		}
		if endpoint, err = ts.networkStage(ctx, r, ws, t); err != nil {
			return nil, err
		}
	}
	// the same pipeline as `rezuscloud render`
	full, err := platform.RenderFull(t, bundle, endpoint)
	if err != nil {
		return nil, err
	}
	configs, doc := full.Configs, full.Doc
	if err := ws.WriteConfig(doc); err != nil {
		return nil, err
	}
	if err := ts.saveRec(func(r *record) { r.Endpoint = configs.Endpoint; recordVersions(r, t) }); err != nil {
		return nil, err
	}
	return &prepared{t: t, bundle: bundle, configs: configs, ws: ws, doc: doc}, nil
}

// networkStage creates a cloud tenant's network part first, so that its
// endpoint exists before the machine configs that name it.
func (ts *tstate) networkStage(ctx context.Context, r provider.Renderer, ws Workspace, t *tenant.Tenant) (string, error) {
	doc, err := r.Render(provider.Input{Tenant: t, Stage: provider.StageNetwork})
	if err != nil {
		return "", err
	}
	if err := ws.WriteConfig(doc); err != nil {
		return "", err
	}
	plan, err := ws.Plan(ctx, tofu.RunOptions{})
	if err != nil {
		return "", err
	}
	if err := ts.commit(func(r *record) { r.Infra = true }, func() error {
		_, err := ws.Apply(ctx, plan, tofu.RunOptions{})
		return err
	}); err != nil {
		return "", fmt.Errorf("creating the network for the endpoint: %w", err)
	}
	out, err := outputsJSON(ctx, ws)
	if err != nil {
		return "", err
	}
	addr, err := provider.EndpointAddress(out)
	if err != nil {
		return "", err
	}
	return talos.EndpointURL(addr), nil
}

func outputsJSON(ctx context.Context, ws Workspace) ([]byte, error) {
	outs, err := ws.Output(ctx)
	if err != nil {
		return nil, err
	}
	return json.Marshal(outs)
}

// planOrApply plans the tenant; with apply it then applies that plan (or
// the pending plan made for exactly this document) and brings the nodes up.
func (ts *tstate) planOrApply(ctx context.Context, apply bool) (string, error) {
	p, err := ts.prepare(ctx, apply)
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
		start := time.Now()
		plan, err = p.ws.Plan(ctx, tofu.RunOptions{})
		ts.addTofu(time.Since(start))
		if err != nil {
			return "", err
		}
	}
	changes := tenant.Changes{Add: plan.Summary.Add, Change: plan.Summary.Change, Destroy: plan.Summary.Remove}
	ts.setStatus(func(s *tenant.Status) { s.Pending = changes })
	if !apply {
		ts.mu.Lock()
		ts.plan = &pendingPlan{plan: plan, docHash: hash}
		ts.advanceLocked(evPlanned, facts{changes: plan.HasChanges()})
		ts.mu.Unlock()
		ts.publish()
		if p.networkOnly {
			return fmt.Sprintf("plan of the network part: %d to add; the machines are planned once the endpoint exists (press Apply)", changes.Add), nil
		}
		return fmt.Sprintf("plan: %d to add, %d to change, %d to destroy; press Apply to apply it", changes.Add, changes.Change, changes.Destroy), nil
	}
	ts.mu.Lock()
	ts.plan = nil
	ts.mu.Unlock()
	return ts.applyPlan(ctx, p, plan)
}

// applyPlan brings the tenant to what p declares, in named steps: reset
// the nodes the plan removes and apply the plan (applyInfra), record the
// nodes tofu reports (recordNodes), configure them through Talos
// (configureTalos), bootstrap etcd once and fetch the kubeconfig
// (bootstrapOnce), and wait until every node runs (awaitRunning).
func (ts *tstate) applyPlan(ctx context.Context, p *prepared, plan *tofu.Plan) (string, error) {
	_, rec := ts.snapshot()
	declared := map[string]tenant.Node{}
	for _, n := range p.t.Nodes() {
		declared[n.Name] = n
	}
	var removed []string
	for n := range rec.Nodes {
		if _, ok := declared[n]; !ok {
			removed = append(removed, n)
		}
	}
	slices.Sort(removed)
	if err := ts.applyInfra(ctx, p, plan, rec, declared, removed); err != nil {
		return "", err
	}
	nodes, err := ts.recordNodes(ctx, p, plan, rec, declared, removed)
	if err != nil {
		return "", err
	}
	tc, err := ts.configureTalos(ctx, p, nodes)
	if err != nil {
		return "", err
	}
	if err := ts.bootstrapOnce(ctx, p, rec, tc); err != nil {
		return "", err
	}
	ts.setProgress(90)
	if err := ts.waitRunning(ctx, nodes, tc); err != nil {
		return "", err
	}
	ts.setStatus(func(s *tenant.Status) { s.Phase = next(s.Phase, evApplyDone, facts{}); s.Progress = 100 })
	return fmt.Sprintf("%d nodes running; kubeconfig in %s", len(nodes), ts.e.kubeconfigPath(ts.name)), nil
}

// applyInfra resets the nodes the plan removes (gracefully: they leave a
// running cluster) and applies the plan, when it changes anything. The
// record says Infra before tofu creates the first resource.
func (ts *tstate) applyInfra(ctx context.Context, p *prepared, plan *tofu.Plan, rec record, declared map[string]tenant.Node, removed []string) error {
	if plan.HasChanges() {
		ts.mu.Lock()
		for n := range declared {
			if _, exists := rec.Nodes[n]; !exists {
				s := ts.nodes[n]
				s.Stage = tenant.StageProvisioning
				ts.nodes[n] = s
			}
		}
		ts.advanceLocked(evApplyStarted, facts{changes: true})
		ts.mu.Unlock()
		ts.publish()
		if len(removed) > 0 {
			if err := ts.resetNodes(ctx, p.t, removed, true); err != nil {
				return err
			}
		}
		planned := plan.Planned()
		start := time.Now()
		err := ts.commit(func(r *record) { r.Infra = true }, func() error {
			_, err := p.ws.Apply(ctx, plan, tofu.RunOptions{OnProgress: func(pr tofu.Progress) {
				if pr.Planned > 0 {
					ts.setProgress(pr.Completed * tofuShare / pr.Planned)
				} else if planned > 0 {
					ts.setProgress(pr.Completed * tofuShare / planned)
				}
			}})
			return err
		})
		ts.addTofu(time.Since(start))
		if err != nil {
			return ts.explain(ctx, p.t, err)
		}
	}
	ts.setStatus(func(s *tenant.Status) { s.Pending = tenant.Changes{}; s.Progress = tofuShare })
	return nil
}

// reportedNodes reads the nodes tofu's outputs report. An interrupted
// apply (a stop, a killed add-on) can leave every resource in the state but
// not the outputs, which tofu writes at the end: then the plan changes only
// outputs, and it is applied to write them.
func (ts *tstate) reportedNodes(ctx context.Context, p *prepared, plan *tofu.Plan, declared map[string]tenant.Node) ([]provider.NodeOutput, error) {
	r, err := platform.For(p.t.Provider)
	if err != nil {
		return nil, err
	}
	read := func() ([]provider.NodeOutput, error) {
		start := time.Now()
		out, err := outputsJSON(ctx, p.ws)
		ts.addTofu(time.Since(start))
		if err != nil {
			return nil, err
		}
		return r.Nodes(out)
	}
	outs, err := read()
	if err != nil || plan.HasChanges() || allReported(declared, outs) {
		return outs, err
	}
	start := time.Now()
	_, err = p.ws.Apply(ctx, plan, tofu.RunOptions{})
	ts.addTofu(time.Since(start))
	if err != nil {
		return nil, ts.explain(ctx, p.t, err)
	}
	return read()
}

// recordNodes records the nodes as tofu reports them (before any Talos
// call to them) and shows them; removed nodes leave Home Assistant.
func (ts *tstate) recordNodes(ctx context.Context, p *prepared, plan *tofu.Plan, rec record, declared map[string]tenant.Node, removed []string) (map[string]nodeRecord, error) {
	e := ts.e
	outs, err := ts.reportedNodes(ctx, p, plan, declared)
	if err != nil {
		return nil, err
	}
	nodes := map[string]nodeRecord{}
	for _, o := range outs {
		if n, ok := declared[o.Name]; ok {
			nr := nodeRecord{Address: o.Address, ID: o.ID, Group: n.Group, Role: n.Role}
			if p.t.Provider != tenant.ProviderMetal {
				nr.PrivateAddress = o.PrivateAddress
			}
			if old, ok := rec.Nodes[o.Name]; ok && old.Address == o.Address && old.ID == o.ID {
				nr.ConfigHash = old.ConfigHash // the same machine: it has that config
			} else if p.t.Provider != tenant.ProviderMetal {
				// a new instance booted from its user_data, which is this
				// config: it is not sent it again
				nr.ConfigHash = configHash(p.configs.Nodes[o.Name])
			}
			nodes[o.Name] = nr
		}
	}
	for n := range declared {
		if _, ok := nodes[n]; !ok {
			return nil, fmt.Errorf("tofu reports no address for node %s", n)
		}
	}
	specRaw := ts.currentSpecRaw()
	if err := ts.saveRec(func(r *record) { r.Nodes = nodes; r.Spec = specRaw }); err != nil {
		return nil, err
	}
	ts.mu.Lock()
	for _, n := range removed {
		delete(ts.nodes, n)
	}
	for name, nr := range nodes {
		s := ts.nodes[name]
		s.Address, s.PrivateAddress = e.shownAddress(p.t.Provider, ts.rec.Endpoint, nodes, name), nr.PrivateAddress
		s.Role, s.Group = nr.Role, nr.Group
		ts.nodes[name] = s
	}
	ts.mu.Unlock()
	e.publishTenants() // removed nodes leave Home Assistant
	return nodes, nil
}

// configureTalos writes the talosconfig (the control planes reached
// directly are its endpoints) and gives every node its machine config.
func (ts *tstate) configureTalos(ctx context.Context, p *prepared, nodes map[string]nodeRecord) ([]byte, error) {
	e := ts.e
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
	ts.advance(evConfiguring, facts{})
	if err := ts.configureNodes(ctx, p, nodes, tc); err != nil {
		return nil, err
	}
	ts.setProgress(75)
	return tc, nil
}

// bootstrapOnce bootstraps etcd on the first control plane unless the
// record says it was, and writes the kubeconfig.
func (ts *tstate) bootstrapOnce(ctx context.Context, p *prepared, rec record, tc []byte) error {
	ts.advance(evBootstrapping, facts{})
	first, ok := ts.target(firstControlPlane(p.t))
	if !ok {
		return fmt.Errorf("the first control plane %s has no address", firstControlPlane(p.t))
	}
	if !rec.Bootstrapped {
		if err := ts.e.opts.Nodes.Bootstrap(ctx, first, tc); err != nil {
			return fmt.Errorf("bootstrap: %w", err)
		}
		if err := ts.saveRec(func(r *record) { r.Bootstrapped = true }); err != nil {
			return err
		}
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
func (ts *tstate) explain(ctx context.Context, t *tenant.Tenant, err error) error {
	if ctx.Err() != nil {
		return err
	}
	r, rerr := platform.For(t.Provider)
	if rerr != nil {
		return err
	}
	ex, ok := r.(explainer)
	if !ok {
		return err
	}
	if msg := ex.Explain(ctx, t, ts.e.opts.CloudEnv(t.Provider), err.Error()); msg != err.Error() {
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

// addTofu adds to the time the running operation spent in tofu.
func (ts *tstate) addTofu(d time.Duration) {
	ts.mu.Lock()
	ts.tofuTime += d
	ts.mu.Unlock()
}

func (ts *tstate) currentSpecRaw() []byte {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return slices.Clone(ts.specRaw)
}

// configureNodes gives every node in maintenance mode its machine config,
// control planes first, and then waits for each node's secure API. The two
// steps are apart because a worker's API comes up only after a control
// plane of its cluster is configured (it gets its certificate from trustd):
// waiting for workers while holding the slots a control plane needs would
// never end.
func (ts *tstate) configureNodes(ctx context.Context, p *prepared, nodes map[string]nodeRecord, tc []byte) error {
	e := ts.e
	ctx, cancel := context.WithTimeout(ctx, e.opts.NodeTimeout)
	defer cancel()
	var order []string
	for _, n := range p.t.Nodes() { // control-plane group first, as declared
		if _, ok := nodes[n.Name]; ok && n.Role == tenant.RoleControlPlane {
			order = append(order, n.Name)
		}
	}
	for _, n := range p.t.Nodes() {
		if _, ok := nodes[n.Name]; ok && n.Role != tenant.RoleControlPlane {
			order = append(order, n.Name)
		}
	}
	macs := map[string]string{}
	for _, n := range p.t.Nodes() {
		if n.Machine != nil {
			macs[n.Name] = n.Machine.MAC
		}
	}
	if err := parallel(ctx, order, func(name string) error {
		t, _ := ts.target(name)
		return ts.configureNode(ctx, name, t, macs[name], p.configs.Nodes[name], tc)
	}); err != nil {
		return err
	}
	return parallel(ctx, order, func(name string) error {
		t, _ := ts.target(name)
		return ts.waitConfigured(ctx, name, t, p.configs.Nodes[name], tc)
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
func (ts *tstate) configureNode(ctx context.Context, name string, target talos.Target, mac string, cfg, tc []byte) error {
	hash := configHash(cfg)
	ep := target.String()
	last := tenant.StageUnreachable
	var woken time.Time
	for {
		st, err := ts.e.opts.Nodes.Status(ctx, target, tc)
		if err == nil {
			ts.observe(name, st, "")
			switch st.Stage {
			case tenant.StageMaintenance:
				if target.Routed() {
					return fmt.Errorf("node %s is in maintenance mode, and it can only be reached through a control plane, which maintenance mode does not serve: recreate the instance so that it boots from its user_data", name)
				}
				// recorded first: if a stop interrupts the call after the
				// node took the config, the node comes up with it and is
				// not given it again; if the node did not take it, it is
				// still in maintenance next time, whatever the record says
				if err := ts.commit(func(r *record) { setConfigHash(r, name, hash) }, func() error {
					return ts.e.opts.Nodes.ApplyMaintenance(ctx, ep, cfg)
				}); err != nil {
					return fmt.Errorf("node %s: applying its machine config: %w", name, err)
				}
				ts.intend(name, tenant.StageInstalling, false)
				return nil
			case tenant.StageRunning:
				if ts.appliedHash(name) == hash {
					return nil
				}
				if err := ts.e.opts.Nodes.ApplyConfig(ctx, target, tc, cfg); err != nil {
					return fmt.Errorf("node %s: applying its changed machine config: %w", name, err)
				}
				return ts.configApplied(name, hash)
			}
			// unreachable, or on its way up with a config (installing,
			// rebooting, booting: an interrupted apply): wait for it
			last = st.Stage
			if st.Stage == tenant.StageUnreachable {
				ts.wakeMachine(ctx, name, mac, &woken) // power.go: Wake-on-LAN or the machine's power
			}
		} else if errors.Is(err, talos.ErrCredentials) {
			return fmt.Errorf("node %s at %s belongs to another cluster (it refuses this tenant's credentials); reset it to maintenance mode first", name, ep)
		}
		select {
		case <-ctx.Done():
			if last != tenant.StageUnreachable {
				return fmt.Errorf("node %s at %s stayed in stage %s: %w", name, ep, last, context.Cause(ctx))
			}
			return fmt.Errorf("node %s did not answer at %s: %w", name, ep, context.Cause(ctx))
		case <-time.After(time.Second):
		}
	}
}

// waitConfigured waits until a node that was given its config answers
// the secure API. A node that falls back to maintenance mode instead (its
// install failed, it rebooted from the ISO) is noticed, logged, shown in
// stage maintenance and given its config again, twice at most; then the
// apply fails and says so, instead of waiting in silence until its timeout.
func (ts *tstate) waitConfigured(ctx context.Context, name string, target talos.Target, cfg, tc []byte) error {
	const maxReapply = 2
	reapplied := 0
	for attempt := 0; ; attempt++ {
		try := ts.e.opts.secureTry
		if try <= 0 {
			try = 3 * time.Second
		}
		tctx, cancel := context.WithTimeout(ctx, try)
		_, err := ts.e.opts.Nodes.WaitSecure(tctx, target, tc)
		definitive := err != nil && tctx.Err() == nil // not a time-out: the node refused
		cancel()
		if err == nil {
			return nil
		}
		if definitive {
			return fmt.Errorf("node %s: waiting for its Talos API: %w", name, err)
		}
		if ctx.Err() != nil {
			return fmt.Errorf("node %s: waiting for its Talos API: %w", name, context.Cause(ctx))
		}
		if st, serr := ts.e.opts.Nodes.Status(ctx, target, tc); serr == nil && st.Stage == tenant.StageMaintenance && !target.Routed() {
			ts.observe(name, st, "")
			if reapplied >= maxReapply {
				return fmt.Errorf("node %s fell back to maintenance mode %d times after it was given its machine config: check its install disk and its console", name, reapplied+1)
			}
			reapplied++
			ts.e.log.Warn("node fell back to maintenance mode after it was configured; giving it its machine config again",
				zap.String("tenant", ts.name), zap.String("node", name), zap.Int("attempt", reapplied))
			if err := ts.e.opts.Nodes.ApplyMaintenance(ctx, target.Endpoints[0], cfg); err != nil {
				return fmt.Errorf("node %s: applying its machine config again after it fell back to maintenance mode: %w", name, err)
			}
			ts.intend(name, tenant.StageInstalling, false)
		}
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

// appliedHash is the hash of the config a node was last given.
func (ts *tstate) appliedHash(name string) string {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.rec.Nodes[name].ConfigHash
}

// configApplied records that a node has the config of that hash.
func (ts *tstate) configApplied(name, hash string) error {
	return ts.saveRec(func(r *record) { setConfigHash(r, name, hash) })
}

// setConfigHash marks in r that a node has the config of that hash.
func setConfigHash(r *record, name, hash string) {
	if n, ok := r.Nodes[name]; ok {
		n.ConfigHash = hash
		r.Nodes[name] = n
	}
}

// waitRunning waits until every node runs and is ready.
func (ts *tstate) waitRunning(ctx context.Context, nodes map[string]nodeRecord, tc []byte) error {
	e := ts.e
	ctx, cancel := context.WithTimeout(ctx, e.opts.NodeTimeout)
	defer cancel()
	for {
		var waiting []string
		for name := range nodes {
			t, ok := ts.target(name)
			if !ok {
				return fmt.Errorf("node %s has no address", name)
			}
			st, err := ts.e.opts.Nodes.Status(ctx, t, tc)
			if err == nil {
				ts.observe(name, st, "")
			}
			if err != nil || st.Stage != tenant.StageRunning || !st.Ready {
				waiting = append(waiting, name)
			}
		}
		if len(waiting) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			slices.Sort(waiting)
			return fmt.Errorf("nodes not running and ready in time: %s: %w", strings.Join(waiting, ", "), context.Cause(ctx))
		case <-time.After(time.Second):
		}
	}
}

// resetNodes resets nodes through the Talos API: gracefully (cordon,
// drain, leave etcd) when removing them from a running cluster, or not
// (back to maintenance) when the whole cluster goes. A removed metal node
// whose machine has a mac is halted instead of rebooted, to save power:
// Wake-on-LAN brings it back when the group grows again.
func (ts *tstate) resetNodes(ctx context.Context, t *tenant.Tenant, names []string, graceful bool) error {
	e := ts.e
	tc, err := os.ReadFile(e.talosconfigPath(ts.name))
	if err != nil {
		return nil // never configured: nothing to reset
	}
	var errs []error
	for _, n := range names {
		ep, ok := ts.target(n)
		if !ok {
			continue
		}
		ts.intend(n, tenant.StageResetting, false)
		opts := talos.ResetOptions{Graceful: graceful}
		m := machineOf(t, n)
		if graceful && e.canPowerOff(m) { // power.go
			opts.Halt = true
		}
		rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		err := ts.e.opts.Nodes.Reset(rctx, ep, tc, opts)
		cancel()
		if err == nil && opts.Halt {
			e.log.Info("node reset and halted; its power brings it back when needed", zap.String("node", n))
			ts.afterHalt(ctx, n, ep, m, tc)
		}
		if err != nil {
			st, serr := ts.e.opts.Nodes.Status(ctx, ep, tc)
			if serr == nil && st.Stage == tenant.StageMaintenance {
				continue // already reset
			}
			if serr == nil && st.Stage == tenant.StageUnreachable && !graceful {
				e.log.Warn("node unreachable during reset; tofu will remove it anyway", zap.String("node", n))
				continue
			}
			errs = append(errs, fmt.Errorf("resetting node %s: %w", n, err))
		}
	}
	return errors.Join(errs...)
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
func (ts *tstate) destroy(ctx context.Context) (string, error) {
	e := ts.e
	t, rec := ts.snapshot()
	if t == nil {
		return "", fmt.Errorf("tenant %s has neither a file nor a remembered spec", ts.name)
	}
	ts.advance(evDestroyStarted, facts{})
	var names []string
	for n := range rec.Nodes {
		names = append(names, n)
	}
	slices.Sort(names)
	if t.Provider == tenant.ProviderMetal {
		if err := ts.resetNodes(ctx, t, names, false); err != nil {
			return "", err
		}
	}
	ws, err := e.opts.Infra.Workspace(ts.name, tofu.WorkspaceOptions{Env: e.opts.CloudEnv(t.Provider)})
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(ws.Dir(), tofu.ConfigFile)); err == nil {
		_, err := ws.Destroy(ctx, tofu.RunOptions{OnProgress: func(pr tofu.Progress) {
			if pr.Planned > 0 {
				ts.setProgress(pr.Completed * 100 / pr.Planned)
			}
		}})
		if err != nil {
			return "", err
		}
	}
	if err := ts.saveRec(func(r *record) {
		r.Infra, r.Bootstrapped, r.Nodes, r.Endpoint = false, false, nil, ""
		r.Phase = next(r.Phase, evDestroyDone, facts{})
	}); err != nil {
		return "", err
	}
	for _, f := range []string{"kubeconfig", "talosconfig"} {
		os.Remove(filepath.Join(e.tenantDir(ts.name), f))
		if e.opts.ShareDir != "" {
			os.Remove(filepath.Join(e.opts.ShareDir, ts.name, f))
		}
	}
	ts.mu.Lock()
	ts.plan = nil
	for n, s := range ts.nodes {
		s.Stage, s.Ready, s.TalosVersion = tenant.StagePending, false, ""
		ts.nodes[n] = s
	}
	ts.advanceLocked(evDestroyDone, facts{})
	ts.status.Pending = tenant.Changes{}
	ts.status.Progress = 100
	orphan := ts.spec == nil
	ts.pruneNodesLocked() // nodes the file no longer declares go
	ts.mu.Unlock()
	e.updatePollTargets()
	if orphan {
		e.forget(ts)
	}
	return "destroyed; the secrets bundle is kept until the tenant file is removed", nil
}

// forget removes an orphaned tenant after its destroy.
func (e *Engine) forget(ts *tstate) {
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
}

// removeTenantFiles deletes what the engine kept of a tenant that has no
// infrastructure and no file any more: its secrets bundle and record.
func (e *Engine) removeTenantFiles(name string) {
	for _, p := range []string{talos.SecretsPath(e.tenantDir(name)), e.recordPath(name)} {
		if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
			e.log.Warn("removing a forgotten tenant's file", zap.String("file", p), zap.Error(err))
		}
	}
	os.Remove(e.tenantDir(name)) // only if empty
}

// bootstrap bootstraps etcd once (AlreadyExists counts as done).
func (ts *tstate) bootstrap(ctx context.Context) (string, error) {
	e := ts.e
	t, _ := ts.snapshot()
	tc, err := os.ReadFile(e.talosconfigPath(ts.name))
	if err != nil || t == nil {
		return "", fmt.Errorf("tenant %s is not provisioned: press Apply", ts.name)
	}
	first, ok := ts.target(firstControlPlane(t))
	if !ok {
		return "", fmt.Errorf("tenant %s has no provisioned control plane", ts.name)
	}
	if err := ts.e.opts.Nodes.Bootstrap(ctx, first, tc); err != nil {
		return "", err
	}
	if err := ts.saveRec(func(r *record) { r.Bootstrapped = true }); err != nil {
		return "", err
	}
	return "etcd is bootstrapped", nil
}

// reboot reboots one node.
func (ts *tstate) reboot(ctx context.Context, node string) (string, error) {
	e := ts.e
	ep, ok := ts.target(node)
	if !ok {
		return "", fmt.Errorf("node %s is not provisioned", node)
	}
	tc, err := os.ReadFile(e.talosconfigPath(ts.name))
	if err != nil {
		return "", fmt.Errorf("tenant %s has no talosconfig: press Apply", ts.name)
	}
	if err := ts.e.opts.Nodes.Reboot(ctx, ep, tc); err != nil {
		return "", err
	}
	ts.intend(node, tenant.StageRebooting, false) // and polls it soon
	return fmt.Sprintf("node %s is rebooting", node), nil
}

// writeSecretFile writes a tenant secret (0600) under the data dir and,
// when the share folder is mapped, under <share>/<tenant>/.
func (e *Engine) writeSecretFile(name, file string, data []byte) error {
	dirs := []string{e.tenantDir(name)}
	if e.opts.ShareDir != "" {
		dirs = append(dirs, filepath.Join(e.opts.ShareDir, name))
	}
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("tenant %s: %w", name, err)
		}
		if err := atomicfile.Write(filepath.Join(d, file), data, 0o600); err != nil {
			return fmt.Errorf("tenant %s: writing %s: %w", name, file, err)
		}
	}
	return nil
}
