package web

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"regexp"
	"strings"
)

// The guard (docs/reference.md "The panel", security):
//
//   - Peers: only the trusted addresses may connect (the Supervisor's
//     ingress gateway 172.30.32.2 in the add-on): everyone else gets 403
//     whatever they send. Home Assistant's login is in front of the
//     gateway, so every request that gets through is from a logged-in user,
//     and the X-Remote-User-* headers (set by the Supervisor, which drops
//     any a browser sends) say which one.
//   - Administrators: any logged-in user can open an add-on's panel
//     (panel_admin only hides the sidebar entry), so every command, file
//     write and secret download asks Admins; the others can look only.
//   - Forged requests: a state-changing request (POST) must come from a
//     page of the same origin: Sec-Fetch-Site (a header no page can set)
//     must say same-origin when the browser sends it, else the Origin (or
//     Referer) must name the host the browser used (X-Forwarded-Host, which
//     Home Assistant sets, or Host); and it must carry the page's token, an
//     HMAC of the user's id under a key made at start-up (a form field or
//     the X-Panel-Token header; a custom header also makes a cross-origin
//     fetch need a CORS preflight, which the panel never grants). Cookies
//     are not used: the panel's origin is Home Assistant's, shared with every
//     other add-on's panel, and Home Assistant's own ingress_session cookie
//     (SameSite=Strict) already keeps cross-site requests out of ingress;
//     the checks here hold without it (outside the Supervisor) and against
//     a page that strips Origin.
//
// What no check here can stop: a page of another add-on's panel is of the
// same origin (Home Assistant's) and can script this one; trust in the
// add-ons a user installs is Home Assistant's model.

// trustedPeer reports whether the request's peer may use the panel.
func (s *Server) trustedPeer(r *http.Request) bool {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	a := ap.Addr().Unmap()
	for _, p := range s.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// reIngressPath is a path the Supervisor gives: /api/hassio_ingress/<token>.
var reIngressPath = regexp.MustCompile(`^(?:/[A-Za-z0-9._~-]+)+$`)

// ingressPath is the prefix the browser sees in front of the panel's paths
// (X-Ingress-Path; "" outside the Supervisor). Every link is relative to
// it (the pages' <base href>).
func ingressPath(r *http.Request) string {
	p := r.Header.Get("X-Ingress-Path")
	if !reIngressPath.MatchString(p) || strings.Contains(p, "/../") || strings.HasSuffix(p, "/..") {
		return ""
	}
	return p
}

// userOf reads who Home Assistant says the user is.
func userOf(r *http.Request) User {
	return User{ID: r.Header.Get("X-Remote-User-Id"), Name: r.Header.Get("X-Remote-User-Name"),
		DisplayName: r.Header.Get("X-Remote-User-Display-Name")}
}

// token is the user's same-origin token.
func (s *Server) token(u User) string {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte("rezuscloud panel token\x00" + u.ID))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil)[:18])
}

// errForged is the answer to a request that is not from the panel's own pages.
var errForged = errors.New("refused: this request did not come from the panel's own page")

// sameOrigin checks that a state-changing request comes from a page of
// the panel's origin and carries the user's token.
func (s *Server) sameOrigin(r *http.Request, u User) error {
	switch site := r.Header.Get("Sec-Fetch-Site"); site {
	case "same-origin", "":
	default:
		return fmt.Errorf("%w (Sec-Fetch-Site: %s)", errForged, site)
	}
	host := r.Host
	if fh := r.Header.Get("X-Forwarded-Host"); fh != "" {
		host = strings.TrimSpace(strings.Split(fh, ",")[0])
	}
	from := r.Header.Get("Origin")
	if from == "" {
		from = r.Header.Get("Referer")
	}
	if from == "" {
		return fmt.Errorf("%w (no Origin or Referer)", errForged)
	}
	o, err := url.Parse(from)
	if err != nil || o.Host == "" || !strings.EqualFold(o.Host, host) {
		return fmt.Errorf("%w (from %q, not %q)", errForged, truncate(from, 80), host)
	}
	got := r.Header.Get("X-Panel-Token")
	if got == "" {
		got = r.PostFormValue("_token")
	}
	if !hmac.Equal([]byte(got), []byte(s.token(u))) {
		return fmt.Errorf("%w (its token is missing or from before the add-on restarted: reload the page)", errForged)
	}
	return nil
}

// adminKey keys the request's administrator verdict in its context.
type adminKey struct{}

type verdict struct {
	admin bool
	err   error
}

// isAdmin asks Admins once per request.
func (s *Server) isAdmin(r *http.Request) (bool, error) {
	if v, ok := r.Context().Value(adminKey{}).(*verdict); ok {
		return v.admin, v.err
	}
	if s.admins == nil {
		return false, errors.New("the panel has no way to tell administrators")
	}
	ok, err := s.admins.IsAdmin(r.Context(), userOf(r))
	return ok && err == nil, err
}

// withVerdict remembers the verdict for the rest of the request.
func (s *Server) withVerdict(r *http.Request) *http.Request {
	admin, err := s.isAdmin(r)
	return r.WithContext(context.WithValue(r.Context(), adminKey{}, &verdict{admin, err}))
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
