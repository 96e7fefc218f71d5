package mgmt

import (
	"context"
	"encoding/base64"
	"net/http"
	"regexp"
	"slices"
	"strings"

	"github.com/raftmq/raftmq/api/ops"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// The writes below are shared with the definitions import.

// putUser writes a user from a body with password, or password_hash (and
// hashing_algorithm), and tags. A body with neither keeps the user's
// current password (RabbitMQ would make it passwordless; raftmq has no
// passwordless users).
func (m *Server) putUser(ctx context.Context, name string, b map[string]any) (existed bool, err error) {
	tags := tagsOf(b["tags"])
	var (
		oldHash []byte
		oldAlg  string
	)
	m.node.LocalView(func(s ops.State) {
		oldHash, oldAlg, existed = s.UserPasswordHash(name)
		oldHash = slices.Clone(oldHash)
	})
	if pw, ok := b["password"].(string); ok {
		_, err := m.ops.AddUserOrReplace(ctx, name, pw, tags)
		return existed, err
	}
	if h, ok := b["password_hash"].(string); ok {
		alg, err := fieldString(b, "hashing_algorithm", fsm.PasswordHashAlgorithm)
		if err != nil {
			return existed, err
		}
		if alg != fsm.PasswordHashAlgorithm {
			return existed, badRequest("hashing_algorithm %q is not supported: raftmq checks %s hashes only", alg, fsm.PasswordHashAlgorithm)
		}
		hash, err := base64.StdEncoding.DecodeString(h)
		if err != nil {
			return existed, badRequest("password_hash is not base64: %v", err)
		}
		if len(hash) != 0 && len(hash) != fsm.PasswordSaltLen+32 {
			return existed, badRequest("password_hash must hold a %d-byte salt and a SHA-256 digest", fsm.PasswordSaltLen)
		}
		return existed, m.ops.PutUser(ctx, name, hash, alg, tags)
	}
	if !existed {
		return false, badRequest("Mandatory field 'password' or 'password_hash' is missing")
	}
	return true, m.ops.PutUser(ctx, name, oldHash, oldAlg, tags)
}

// putPermission sets a user's permissions in a vhost from a body with
// configure, write and read.
func (m *Server) putPermission(ctx context.Context, vhost, user string, b map[string]any) (existed bool, err error) {
	var pats [3]string
	for i, k := range []string{"configure", "write", "read"} {
		if pats[i], err = fieldString(b, k, ""); err != nil {
			return false, err
		}
		if _, err := regexp.Compile(pats[i]); err != nil {
			return false, badRequest("%s pattern %q does not compile: %v", k, pats[i], err)
		}
	}
	userFound, vhostFound := false, false
	m.node.LocalView(func(s ops.State) {
		for _, u := range s.Users() {
			userFound = userFound || u.GetName() == user
		}
		for _, v := range s.Vhosts() {
			vhostFound = vhostFound || v.GetName() == vhost
		}
		for _, p := range s.Permissions() {
			existed = existed || (p.GetUser() == user && p.GetVhost() == vhost)
		}
	})
	if !userFound || !vhostFound {
		return false, badRequest("no_such_user_or_vhost: user '%s', vhost '%s'", user, vhost)
	}
	_, err = m.ops.SetPermissions(ctx, &proto.SetPermissionsRequest{User: user, Vhost: vhost, Configure: pats[0], Write: pats[1], Read: pats[2]})
	return existed, err
}

func userJSON(s ops.State, u *proto.UserInfo) map[string]any {
	hash, alg, _ := s.UserPasswordHash(u.GetName())
	if alg == "" {
		alg = fsm.PasswordHashAlgorithm
	}
	return map[string]any{
		"name": u.GetName(), "tags": nonNil(slices.Clone(u.GetTags())), "limits": map[string]any{},
		"password_hash": base64.StdEncoding.EncodeToString(hash), "hashing_algorithm": alg,
	}
}

// tagsOf reads tags as RabbitMQ takes them: a comma-separated string or a
// list.
func tagsOf(v any) []string {
	var out []string
	switch x := v.(type) {
	case string:
		for _, t := range strings.Split(x, ",") {
			if t = strings.TrimSpace(t); t != "" {
				out = append(out, t)
			}
		}
	case []any:
		for _, e := range x {
			if s, ok := e.(string); ok && s != "" {
				out = append(out, s)
			}
		}
	}
	return out
}

// permissionsOf serves /api/vhosts/v/permissions and
// /api/users/u/permissions: the permissions in the vhost, or of the user.
func (q *req) permissionsOf() error {
	if !q.user.admin() {
		return notAuthorised("Not administrator user")
	}
	vhost, user := q.arg("vhost"), q.arg("user")
	return q.listPermissions(func(p *proto.PermissionInfo) bool {
		return (vhost != "" && p.GetVhost() == vhost) || (user != "" && p.GetUser() == user)
	})
}

// noTopicPermissions serves /api/vhosts/v/topic-permissions and
// /api/users/u/topic-permissions: raftmq checks no topic permissions.
func (q *req) noTopicPermissions() error {
	if !q.user.admin() {
		return notAuthorised("Not administrator user")
	}
	q.list(nil)
	return nil
}

func (q *req) users() error {
	if !q.user.admin() {
		return notAuthorised("Not administrator user")
	}
	name := q.arg("user")
	switch q.r.Method {
	case http.MethodGet:
		var out []map[string]any
		q.view(func(s ops.State) {
			for _, u := range s.Users() {
				if name == "" || u.GetName() == name {
					out = append(out, userJSON(s, u))
				}
			}
		})
		if name != "" {
			if len(out) == 0 {
				return notFound()
			}
			q.ok(out[0])
			return nil
		}
		q.list(out)
		return nil
	case http.MethodPut:
		if name == "" {
			return methodNotAllowed()
		}
		b, err := q.body()
		if err != nil {
			return err
		}
		existed, err := q.m.putUser(q.ctx, name, b)
		if err != nil {
			return err
		}
		q.created(existed)
		return nil
	case http.MethodDelete:
		if _, err := q.m.ops.DeleteUser(q.ctx, &proto.DeleteUserRequest{Name: name}); err != nil {
			return err
		}
		q.noContent()
		return nil
	}
	return methodNotAllowed()
}

func (q *req) listPermissions(keep func(*proto.PermissionInfo) bool) error {
	var out []map[string]any
	q.view(func(s ops.State) {
		for _, p := range s.Permissions() {
			if keep(p) {
				out = append(out, permissionJSON(p))
			}
		}
	})
	q.list(out)
	return nil
}

func permissionJSON(p *proto.PermissionInfo) map[string]any {
	return map[string]any{"user": p.GetUser(), "vhost": p.GetVhost(), "configure": p.GetConfigure(), "write": p.GetWrite(), "read": p.GetRead()}
}

func (q *req) permissions() error {
	if !q.user.admin() {
		return notAuthorised("Not administrator user")
	}
	vhost, user := q.arg("vhost"), q.arg("user")
	if vhost == "" {
		return q.listPermissions(func(*proto.PermissionInfo) bool { return true })
	}
	// current is the user's permissions in vhost, nil for none.
	current := func() (out map[string]any) {
		q.view(func(s ops.State) {
			for _, p := range s.Permissions() {
				if p.GetVhost() == vhost && p.GetUser() == user {
					out = permissionJSON(p)
				}
			}
		})
		return out
	}
	switch q.r.Method {
	case http.MethodGet:
		out := current()
		if out == nil {
			return notFound()
		}
		q.ok(out)
		return nil
	case http.MethodPut:
		b, err := q.body()
		if err != nil {
			return err
		}
		existed, err := q.m.putPermission(q.ctx, vhost, user, b)
		if err != nil {
			return err
		}
		q.created(existed)
		return nil
	case http.MethodDelete:
		if current() == nil {
			// Nothing to clear: RabbitMQ's API answers 404.
			return notFound()
		}
		if _, err := q.m.ops.ClearPermissions(q.ctx, &proto.ClearPermissionsRequest{User: user, Vhost: vhost}); err != nil {
			return err
		}
		q.noContent()
		return nil
	}
	return methodNotAllowed()
}
