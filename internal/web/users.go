package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Operator is the Admins of a panel outside the Supervisor: there is no
// user directory, so whoever reaches the panel from a trusted address (the
// operator's own reverse proxy or browser) is its administrator.
type Operator struct{}

// IsAdmin is always true.
func (Operator) IsAdmin(context.Context, User) (bool, error) { return true, nil }

// CallFunc sends one Home Assistant WebSocket API command and returns its
// result ((*wsapi.Client).Call).
type CallFunc func(ctx context.Context, msg map[string]any) (json.RawMessage, error)

// HAUsers are Home Assistant's users, read with the WebSocket API's
// config/auth/list (an administrator's command; the Supervisor's token is
// one): a user is an administrator when active and in the system-admin
// group, or the owner. The Supervisor's ingress only says who the user is
// (X-Remote-User-Id), never whether they are an administrator, and it
// lets every logged-in user open an add-on's panel (panel_admin only hides
// the sidebar entry), so the panel must ask. The list is kept for ttl;
// an unknown id asks again at most every few seconds. Without an answer
// nobody is an administrator.
type HAUsers struct {
	call CallFunc
	ttl  time.Duration
	now  func() time.Time

	mu      sync.Mutex
	users   map[string]haUser
	fetched time.Time
}

type haUser struct {
	ID       string   `json:"id"`
	Username string   `json:"username"`
	Name     string   `json:"name"`
	IsOwner  bool     `json:"is_owner"`
	IsActive bool     `json:"is_active"`
	Groups   []string `json:"group_ids"`
}

// adminGroup is Home Assistant's administrators' group id.
const adminGroup = "system-admin"

// NewHAUsers reads Home Assistant's users through call.
func NewHAUsers(call CallFunc) *HAUsers {
	return &HAUsers{call: call, ttl: time.Minute, now: time.Now}
}

// IsAdmin implements Admins.
func (h *HAUsers) IsAdmin(ctx context.Context, u User) (bool, error) {
	if u.ID == "" {
		return false, errors.New("Home Assistant did not say who you are (no X-Remote-User-Id): open the panel from Home Assistant's sidebar")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	hu, ok := h.users[u.ID]
	age := h.now().Sub(h.fetched)
	if h.users == nil || age > h.ttl || (!ok && age > 5*time.Second) {
		if err := h.fetchLocked(ctx); err != nil {
			return false, err
		}
		hu, ok = h.users[u.ID]
	}
	if !ok {
		return false, nil
	}
	return hu.IsActive && (hu.IsOwner || slices.Contains(hu.Groups, adminGroup)), nil
}

func (h *HAUsers) fetchLocked(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	raw, err := h.call(ctx, map[string]any{"type": "config/auth/list"})
	if err != nil {
		return fmt.Errorf("asking Home Assistant who is an administrator (config/auth/list): %w", err)
	}
	var list []haUser
	if err := json.Unmarshal(raw, &list); err != nil {
		return fmt.Errorf("Home Assistant's user list (config/auth/list): %w", err)
	}
	h.users = make(map[string]haUser, len(list))
	for _, u := range list {
		h.users[u.ID] = u
	}
	h.fetched = h.now()
	return nil
}
