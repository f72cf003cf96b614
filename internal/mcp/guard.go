package mcp

import (
	"context"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/rezuscloud/rezuscloud/internal/hass"
	"github.com/rezuscloud/rezuscloud/internal/tenant"
)

// Write tools: each checks its own arguments against the view, then write
// runs the common guard and sends one request through the command path.

func (s *Server) writeSimple(tool, action, next string) func(context.Context, Caller, ClusterIn) (WriteOut, error) {
	return func(ctx context.Context, c Caller, in ClusterIn) (WriteOut, error) {
		return s.write(ctx, c, tool, in.Cluster, nil, func(View) (hass.Request, string, error) {
			return hass.Request{Action: action, Tenant: in.Cluster}, next, nil
		})
	}
}

func (s *Server) scaleWorkers(ctx context.Context, c Caller, in ScaleIn) (WriteOut, error) {
	args := []zap.Field{zap.String("group", in.Group), zap.Int("count", in.Count)}
	return s.write(ctx, c, ToolScaleWorkers, in.Cluster, args, func(v View) (hass.Request, string, error) {
		t := v.Spec
		if t == nil {
			return hass.Request{}, "", refuse("cluster %s has no file to scale", v.Name)
		}
		g, err := workerGroup(t, in.Group)
		if err != nil {
			return hass.Request{}, "", err
		}
		lo, hi := limits(t, g)
		if in.Count < lo || in.Count > hi {
			why := ""
			if t.Provider == tenant.ProviderMetal && hi < 100 {
				why = fmt.Sprintf(" (its machine pool has %d machines)", len(g.Machines))
			}
			return hass.Request{}, "", refuse("count %d is out of range %d..%d for group %s of cluster %s%s",
				in.Count, lo, hi, g.Name, v.Name, why)
		}
		if in.Count == g.Count {
			return hass.Request{}, "", refuse("group %s of cluster %s has %d nodes already", g.Name, v.Name, g.Count)
		}
		n := in.Count
		next := fmt.Sprintf("group %s of %s is set to %d nodes in the file (was %d); ", g.Name, v.Name, n, g.Count)
		switch {
		case v.Status.Phase == tenant.PhaseAbsent || v.Status.Phase == "":
			next += "the next apply creates them"
		case t.AutoApply:
			next += "the cluster applies the change now"
		default:
			next += "the cluster plans the change; apply it to make it happen"
		}
		return hass.Request{Action: hass.ActionScale, Tenant: v.Name, Group: g.Name, Count: &n}, next, nil
	})
}

// workerGroup picks the group to scale: the named one, which must be a
// worker group, or the only worker group.
func workerGroup(t *tenant.Tenant, name string) (*tenant.NodeGroup, error) {
	var workers []string
	for i := range t.NodeGroups {
		if t.NodeGroups[i].Role == tenant.RoleWorker {
			workers = append(workers, t.NodeGroups[i].Name)
		}
	}
	if name == "" {
		switch len(workers) {
		case 0:
			return nil, refuse("cluster %s has no worker group", t.Name)
		case 1:
			return t.Group(workers[0]), nil
		}
		return nil, refuse("cluster %s has several worker groups (%s): name one in group", t.Name, strings.Join(workers, ", "))
	}
	g := t.Group(name)
	switch {
	case g == nil:
		return nil, refuse("cluster %s has no group %q (its worker groups: %s)", t.Name, name, listOr(workers, "none"))
	case g.Role != tenant.RoleWorker:
		return nil, refuse("group %s of cluster %s is a control-plane group: AI assistants may only scale worker groups "+
			"(a control plane's count decides etcd quorum)", name, t.Name)
	}
	return g, nil
}

func (s *Server) powerWorker(ctx context.Context, c Caller, in PowerIn) (WriteOut, error) {
	args := []zap.Field{zap.String("node", in.Node), zap.String("state", in.State)}
	return s.write(ctx, c, ToolPowerWorker, in.Cluster, args, func(v View) (hass.Request, string, error) {
		t := v.Spec
		if t == nil {
			return hass.Request{}, "", refuse("cluster %s has no file", v.Name)
		}
		if in.State != "on" && in.State != "off" {
			return hass.Request{}, "", refuse("state must be on or off, not %q", in.State)
		}
		n, ok := t.Node(in.Node)
		if !ok {
			return hass.Request{}, "", refuse("cluster %s has no node %q", v.Name, in.Node)
		}
		if n.Role != tenant.RoleWorker {
			return hass.Request{}, "", refuse("node %s of cluster %s is a control plane: AI assistants never switch a "+
				"control plane's power", in.Node, v.Name)
		}
		if t.Provider != tenant.ProviderMetal {
			return hass.Request{}, "", refuse("node %s of cluster %s is a %s cloud node: only bare-metal workers are "+
				"powered here (scale the group instead)", in.Node, v.Name, t.Provider)
		}
		next := "the machine is powered on; it joins the cluster when it has booted"
		if in.State == "off" {
			next = "the node shuts down gracefully, then its machine is switched off"
		}
		return hass.Request{Action: hass.ActionPower, Tenant: v.Name, Node: in.Node, State: in.State}, next, nil
	})
}

func (s *Server) upgrade(ctx context.Context, c Caller, in UpgradeIn) (WriteOut, error) {
	args := []zap.Field{zap.String("component", in.Component)}
	return s.write(ctx, c, ToolUpgrade, in.Cluster, args, func(v View) (hass.Request, string, error) {
		t := v.Spec
		if t == nil {
			return hass.Request{}, "", refuse("cluster %s has no file", v.Name)
		}
		var target, running string
		switch in.Component {
		case hass.ComponentTalos:
			target, running = t.TalosVersion, v.Status.TalosVersionRunning
		case hass.ComponentKubernetes:
			target, running = t.KubernetesVersion, v.Status.KubernetesVersionRunning
		default:
			return hass.Request{}, "", refuse("component must be talos or kubernetes, not %q", in.Component)
		}
		if running == "" {
			return hass.Request{}, "", refuse("cluster %s runs no nodes to upgrade yet", v.Name)
		}
		if strings.TrimPrefix(running, "v") == strings.TrimPrefix(target, "v") {
			return hass.Request{}, "", refuse("cluster %s runs %s %s already, the version its file names", v.Name, in.Component, running)
		}
		next := fmt.Sprintf("an upgrade of %s from %s to %s (the file's version) is queued: an etcd snapshot, "+
			"then node by node", in.Component, running, target)
		return hass.Request{Action: hass.ActionUpgrade, Tenant: v.Name, Component: in.Component}, next, nil
	})
}

// write is the guard every write goes through: the cluster exists, no
// operation runs or waits for it, the tool's own check passes; then one
// request goes through the command path, logged with who and what.
func (s *Server) write(ctx context.Context, c Caller, tool, cluster string, args []zap.Field,
	build func(View) (hass.Request, string, error)) (WriteOut, error) {
	log := s.log.With(append(c.fields(), zap.String("tool", tool), zap.String("cluster", cluster))...).With(args...)
	out, err := s.writeLocked(ctx, log, tool, cluster, build)
	if err != nil {
		log.Warn("AI assistant write refused", zap.Error(err))
		return WriteOut{}, err
	}
	log.Info("AI assistant write sent", zap.String("action", out.Action), zap.Bool("queued", out.Queued))
	return out, nil
}

func (s *Server) writeLocked(ctx context.Context, log *zap.Logger, tool, cluster string,
	build func(View) (hass.Request, string, error)) (WriteOut, error) {
	if !s.opts.Writes {
		return WriteOut{}, refuse("%s changes clusters, and writes for AI assistants are off", tool)
	}
	// one write per tenant at a time here, so two calls cannot both pass
	// the busy check
	s.mu.Lock()
	if s.busy[cluster] {
		s.mu.Unlock()
		return WriteOut{}, refuse("another AI assistant request for cluster %s is being handled; try again in a moment", cluster)
	}
	s.busy[cluster] = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.busy, cluster)
		s.mu.Unlock()
	}()

	v, err := s.view(cluster)
	if err != nil {
		return WriteOut{}, refuse("%v", err)
	}
	if err := s.idle(v); err != nil {
		return WriteOut{}, err
	}
	req, next, err := build(v)
	if err != nil {
		return WriteOut{}, err
	}
	log.Debug("AI assistant write checked", zap.String("action", req.Action))
	resp := s.opts.Command(ctx, req)
	if !resp.OK() {
		return WriteOut{}, refuse("rezuscloud refused %s: %s", req.Action, resp.Error)
	}
	queued := false
	if m, ok := resp.Data.(map[string]any); ok {
		queued, _ = m["queued"].(bool)
	}
	if queued {
		last := v.Status.LastOperation
		q := queuedOp{at: s.opts.Now(), action: req.Action}
		if last != nil {
			q.last = last.At
		}
		s.mu.Lock()
		s.pending[cluster] = q
		s.mu.Unlock()
	}
	return WriteOut{Cluster: cluster, Action: req.Action, Queued: queued, Message: next}, nil
}

// idle refuses a cluster with an operation running or waiting: what the
// view shows, and a write queued here that the view does not show yet.
func (s *Server) idle(v View) error {
	st := v.Status
	if st.Operation != nil || st.Activity != "" {
		op := st.Activity
		if op == "" {
			op = *st.Operation
		}
		if st.OperationStep != "" {
			op += " (" + st.OperationStep + ")"
		}
		return refuse("cluster %s is busy: %s is running; try again when it has finished", v.Name, op)
	}
	if st.Queued > 0 {
		return refuse("cluster %s has %d operations queued; try again when they have run", v.Name, st.Queued)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	q, ok := s.pending[v.Name]
	if !ok {
		return nil
	}
	var last time.Time
	if st.LastOperation != nil {
		last = st.LastOperation.At
	}
	if !last.Equal(q.last) || s.opts.Now().Sub(q.at) > pendingFor {
		delete(s.pending, v.Name) // it ran (or never will): the view speaks again
		return nil
	}
	return refuse("cluster %s: the %s queued a moment ago has not started yet; try again when it has run", v.Name, q.action)
}

func listOr(xs []string, none string) string {
	if len(xs) == 0 {
		return none
	}
	return strings.Join(xs, ", ")
}
