package web

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"go.uber.org/zap"

	"github.com/rezuscloud/rezuscloud/internal/hass"
)

// request runs one action through the command path: POST
// api/request/<action> with the request's fields as a form (the action
// table's names: tenant, group, count, node, confirm, enabled, component,
// version, mac, install_disk, state; target = "<tenant>/<group>" sets
// both). JavaScript asks for JSON and gets the command path's Response;
// a plain form gets a redirect back to the page it came from (_back)
// with the answer.
func (s *Server) request(w http.ResponseWriter, r *http.Request) {
	action := r.PathValue("action")
	u := userOf(r)
	if err := r.ParseForm(); err != nil {
		s.answer(w, r, http.StatusBadRequest, hass.ErrorResponse(hass.Request{}, fmt.Errorf("bad form: %w", err)), "")
		return
	}
	if err := s.sameOrigin(r, u); err != nil {
		s.log.Warn("panel: request refused", zap.String("action", action), zap.String("user", u.Label()), zap.Error(err))
		s.answer(w, r, http.StatusForbidden, hass.ErrorResponse(hass.Request{}, err), "")
		return
	}
	if err := s.mustBeAdmin(r); err != nil {
		s.answer(w, r, http.StatusForbidden, hass.ErrorResponse(hass.Request{}, err), "")
		return
	}
	req, err := formRequest(action, r.PostForm)
	if err != nil {
		s.answer(w, r, http.StatusBadRequest, hass.ErrorResponse(req, err), "")
		return
	}
	resp := s.cmd(r.Context(), req)
	s.log.Info("panel: request", zap.String("action", action), zap.String("tenant", req.Tenant),
		zap.String("user", u.Label()), zap.String("status", resp.Status), zap.String("error", resp.Error))
	status := http.StatusOK
	if !resp.OK() {
		status = http.StatusUnprocessableEntity
	}
	s.answer(w, r, status, resp, describe(req, resp))
}

// mustBeAdmin refuses anyone but an administrator.
func (s *Server) mustBeAdmin(r *http.Request) error {
	admin, err := s.isAdmin(r)
	switch {
	case err != nil:
		return fmt.Errorf("only administrators may do this, and the panel cannot tell whether you are one: %w", err)
	case !admin:
		return errors.New("only Home Assistant administrators may do this")
	}
	return nil
}

// formFields are the form fields a request may carry, besides _token and
// _back.
var formFields = map[string]bool{"tenant": true, "group": true, "count": true, "node": true, "confirm": true,
	"enabled": true, "level": true, "component": true, "version": true, "mac": true, "install_disk": true,
	"state": true, "target": true}

// formRequest builds the command path's Request from a form. The command
// path checks the fields (hass's checkFields) and the engine what they
// mean; this only reads them.
func formRequest(action string, f url.Values) (hass.Request, error) {
	req := hass.Request{Action: action}
	for k := range f {
		if !formFields[k] && k != "_token" && k != "_back" {
			return req, fmt.Errorf("unknown field %q", truncate(k, 40))
		}
	}
	req.Tenant, req.Group, req.Node = f.Get("tenant"), f.Get("group"), f.Get("node")
	req.Confirm, req.Level, req.Component = f.Get("confirm"), f.Get("level"), f.Get("component")
	req.Version, req.MAC, req.InstallDisk, req.State = f.Get("version"), f.Get("mac"), f.Get("install_disk"), f.Get("state")
	if t := f.Get("target"); t != "" {
		tn, g, ok := strings.Cut(t, "/")
		if !ok {
			return req, fmt.Errorf("target %q is not <cluster>/<group>", truncate(t, 60))
		}
		req.Tenant, req.Group = tn, g
	}
	if c := f.Get("count"); c != "" {
		n, err := strconv.Atoi(strings.TrimSpace(c))
		if err != nil {
			return req, fmt.Errorf("count %q is not a whole number", truncate(c, 20))
		}
		req.Count = &n
	}
	if e := f.Get("enabled"); e != "" {
		b, err := strconv.ParseBool(e)
		if err != nil {
			return req, fmt.Errorf("enabled %q is not true or false", truncate(e, 20))
		}
		req.Enabled = &b
	}
	return req, nil
}

// describe words an answer for the page.
func describe(req hass.Request, resp hass.Response) string {
	if !resp.OK() {
		return resp.Error
	}
	what := strings.ReplaceAll(req.Action, "_", " ")
	if req.Tenant != "" {
		what += " of " + req.Tenant
	}
	if m, ok := resp.Data.(map[string]any); ok {
		switch {
		case m["queued"] == true:
			return upperFirst(what) + " queued."
		case m["adopted"] != nil:
			return fmt.Sprintf("Adopted %v into %s/%s (install disk %v): the file has it now.", m["address"], req.Tenant, req.Group, m["install_disk"])
		case m["machines"] != nil:
			return "Scan finished."
		}
	}
	return upperFirst(what) + ": done."
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// reBack is a page of the panel, relative to the ingress root.
var reBack = regexp.MustCompile(`^(?:[a-z0-9][a-z0-9._-]*(?:/[a-z0-9][a-z0-9._-]*)*)?$`)

// wantsJSON tells the page's JavaScript from a plain form.
func wantsJSON(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "application/json")
}

// answer writes a request's response: JSON for JavaScript, else a redirect
// back with the message.
func (s *Server) answer(w http.ResponseWriter, r *http.Request, status int, resp hass.Response, msg string) {
	if msg == "" {
		msg = resp.Error
	}
	if wantsJSON(r) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(struct {
			hass.Response
			Message string `json:"message"`
		}{resp, msg})
		return
	}
	back := r.PostFormValue("_back")
	if !reBack.MatchString(back) {
		back = ""
	}
	key := "ok"
	if !resp.OK() {
		key = "error"
	}
	loc := ingressPath(r) + "/" + back + "?" + url.Values{key: {msg}}.Encode()
	http.Redirect(w, r, loc, http.StatusSeeOther)
}
