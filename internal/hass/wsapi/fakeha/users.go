package fakeha

// User is one of Home Assistant's users as config/auth/list returns it
// (homeassistant/components/config/auth.py, _user_info).
type User struct {
	ID       string   `json:"id"`
	Username string   `json:"username"`
	Name     string   `json:"name"`
	IsOwner  bool     `json:"is_owner"`
	IsActive bool     `json:"is_active"`
	Groups   []string `json:"group_ids"`
}

// Home Assistant's user groups.
const (
	GroupAdmin = "system-admin"
	GroupUsers = "system-users"
)

// AddUser adds a user to what config/auth/list returns.
func (s *Server) AddUser(u User) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.users = append(s.users, u)
}

// handleUsers answers config/auth/list (an administrator's command: the
// fake's token is one); it reports whether typ is it.
func (s *Server) handleUsers(c *conn, id int64, typ string) bool {
	if typ != "config/auth/list" {
		return false
	}
	s.mu.Lock()
	out := make([]map[string]any, 0, len(s.users))
	for _, u := range s.users {
		groups := u.Groups
		if groups == nil {
			groups = []string{}
		}
		out = append(out, map[string]any{"id": u.ID, "username": u.Username, "name": u.Name,
			"is_owner": u.IsOwner, "is_active": u.IsActive, "local_only": false, "system_generated": false,
			"group_ids": groups, "credentials": []map[string]string{{"type": "homeassistant"}}})
	}
	s.commands = append(s.commands, Command{Type: typ})
	s.mu.Unlock()
	c.ok(id, out)
	return true
}
