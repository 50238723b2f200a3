package server

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/jailrt/jail/profiles"
)

// Scopes a tenant's requests need: run (POST /v1/run), sessions (every
// /v1/sessions and /v1/snapshots route), metrics (GET /metrics). A unix
// peer has all three unless the policy names fewer; a token has those it
// lists.
const (
	ScopeRun      = "run"
	ScopeSessions = "sessions"
	ScopeMetrics  = "metrics"
)

var allScopes = []string{ScopeRun, ScopeSessions, ScopeMetrics}

// Policy is the tenant policy file of `jail serve --tenants FILE`: what
// each tenant may ask of the server beyond the defaults, and its quotas.
//
//	default:            # every tenant the file does not name
//	  quotas: {sessions: 8, execs: 4, memory_max_bytes: 536870912}
//	tenants:
//	  "1000":           # a unix peer, by uid
//	    profiles: [strict]
//	  ci:               # a token's tenant (--tokens)
//	    bind_roots: [{path: /srv/datasets}]
//	    allow_fields: [network.mode]
type Policy struct {
	// Default is the policy of a tenant that Tenants does not name;
	// without it such a tenant has the built-in one (no privileged
	// field, no bind, every built-in profile, no quota but --max-runs).
	Default *TenantPolicy `json:"default,omitempty"`
	// Tenants by name: a unix peer's uid in decimal, or a token's tenant.
	Tenants map[string]TenantPolicy `json:"tenants,omitempty"`
}

// TenantPolicy is what one tenant may do.
type TenantPolicy struct {
	// Admin lets the tenant set every field, as root and the server's
	// own user may: only for a tenant as trusted as the server's user.
	Admin bool `json:"admin,omitempty"`
	// Scopes a unix peer has (all by default); a token's are its own.
	Scopes []string `json:"scopes,omitempty"`
	// Profiles the tenant may name; empty: every built-in one. A tenant
	// that may not send a whole spec is held to these (Spec: false).
	Profiles []string `json:"profiles,omitempty"`
	// Spec: the tenant may send a whole spec rather than a profile's name
	// (default true).
	Spec *bool `json:"spec,omitempty"`
	// BindRoots are the host directories under which the tenant may bind
	// mount a source: the source, its symlinks resolved on the server,
	// must lie under one, and must neither be, lie under nor contain a
	// file of the server's own (Config.Private, the state directory). A
	// root must not be writable by the tenant's jails or users (a symlink
	// swapped in between the check and the mount would be followed).
	BindRoots []BindRoot `json:"bind_roots,omitempty"`
	// AllowFields are privileged fields the tenant may set after all,
	// as the FORBIDDEN answer names them without "spec." (seccomp,
	// network.mode, ...). Bind mounts are BindRoots' business.
	AllowFields []string `json:"allow_fields,omitempty"`
	// Pools the tenant may use whatever their spec (a pool of a profile
	// is open to every tenant that may name the profile).
	Pools  []string `json:"pools,omitempty"`
	Quotas Quotas   `json:"quotas,omitzero"`
}

// BindRoot is a host directory a tenant may bind mount from.
type BindRoot struct {
	Path string `json:"path"`
	// Writable lets a bind below it be read-write; else only read-only
	// binds are taken.
	Writable bool `json:"writable,omitempty"`
}

// Quotas bound a tenant; 0 is no bound (Execs: the server's --max-runs).
type Quotas struct {
	// Sessions the tenant may have at once (forks and pool claims count).
	Sessions int `json:"sessions,omitempty"`
	// Execs: runs and session commands under way at once.
	Execs int `json:"execs,omitempty"`
	// Streams: followers of execs' events (GET .../events) open at once.
	Streams int `json:"streams,omitempty"`
	// MemoryMaxBytes bounds each of its jails' memory_max_bytes; a spec
	// without one gets this.
	MemoryMaxBytes int64 `json:"memory_max_bytes,omitempty"`
	// WorkspaceBytes bounds each session's workspace.
	WorkspaceBytes int64 `json:"workspace_bytes,omitempty"`
	// SnapshotBytes bounds the tenant's snapshots together.
	SnapshotBytes int64 `json:"snapshot_bytes,omitempty"`
}

// ParsePolicy reads a tenant policy file (YAML or JSON), refusing
// unknown fields and naming what is wrong.
func ParsePolicy(data []byte) (*Policy, error) {
	var p Policy
	if err := yaml.UnmarshalStrict(data, &p); err != nil {
		return nil, err
	}
	if p.Default != nil {
		if err := p.Default.validate("default"); err != nil {
			return nil, err
		}
	}
	for name, tp := range p.Tenants {
		if !validTenantName(name) && !isUID(name) {
			return nil, fmt.Errorf("tenants.%s: a tenant is a uid in decimal or a name of 1 to 63 of [a-z0-9_.-] starting with a letter", name)
		}
		if err := tp.validate("tenants." + name); err != nil {
			return nil, err
		}
	}
	return &p, nil
}

func (tp *TenantPolicy) validate(at string) error {
	for _, s := range tp.Scopes {
		if !slices.Contains(allScopes, s) {
			return fmt.Errorf("%s.scopes: %q: want %s", at, s, strings.Join(allScopes, ", "))
		}
	}
	for _, p := range tp.Profiles {
		if !slices.Contains(profiles.Names(), p) {
			return fmt.Errorf("%s.profiles: %q is not a built-in profile (%s)", at, p, strings.Join(profiles.Names(), ", "))
		}
	}
	for i, b := range tp.BindRoots {
		if !filepath.IsAbs(b.Path) || filepath.Clean(b.Path) != b.Path || b.Path == "/" {
			return fmt.Errorf("%s.bind_roots[%d].path: %q: want a clean absolute path other than /", at, i, b.Path)
		}
	}
	for _, f := range tp.AllowFields {
		if !slices.Contains(privilegedFields, f) {
			return fmt.Errorf("%s.allow_fields: %q: want one of %s", at, f, strings.Join(privilegedFields, ", "))
		}
	}
	for _, p := range tp.Pools {
		if !validTenantName(p) {
			return fmt.Errorf("%s.pools: %q is not a pool's name", at, p)
		}
	}
	q := tp.Quotas
	for name, v := range map[string]int64{"sessions": int64(q.Sessions), "execs": int64(q.Execs), "streams": int64(q.Streams), "memory_max_bytes": q.MemoryMaxBytes,
		"workspace_bytes": q.WorkspaceBytes, "snapshot_bytes": q.SnapshotBytes} {
		if v < 0 {
			return fmt.Errorf("%s.quotas.%s: %d is negative", at, name, v)
		}
	}
	return nil
}

// policyOf is the policy of the tenant named name: its own, the file's
// default, or the built-in one (nil fields).
func (p *Policy) policyOf(name string) TenantPolicy {
	if p == nil {
		return TenantPolicy{}
	}
	if tp, ok := p.Tenants[name]; ok {
		return tp
	}
	if p.Default != nil {
		return *p.Default
	}
	return TenantPolicy{}
}

// Tokens is the token file of `jail serve --tokens FILE`: the bearer
// tokens a TCP client may present, by their SHA-256 (the file holds no
// token itself: `jail serve token` makes one and prints its hash).
//
//	tokens:
//	  - sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
//	    tenant: ci
//	    scopes: [run, sessions]
type Tokens struct {
	Tokens []Token `json:"tokens"`
	byHash map[[sha256.Size]byte]*Token
}

// Token is one bearer token: its hash, its tenant and what it may do.
type Token struct {
	SHA256 string   `json:"sha256"`
	Tenant string   `json:"tenant"`
	Scopes []string `json:"scopes"`
}

// ParseTokens reads a token file, refusing unknown fields, a hash that is
// not 64 hex digits, one listed twice, and an unknown scope.
func ParseTokens(data []byte) (*Tokens, error) {
	var t Tokens
	if err := yaml.UnmarshalStrict(data, &t); err != nil {
		return nil, err
	}
	t.byHash = map[[sha256.Size]byte]*Token{}
	for i := range t.Tokens {
		tok := &t.Tokens[i]
		at := "tokens[" + strconv.Itoa(i) + "]"
		b, err := hex.DecodeString(tok.SHA256)
		if err != nil || len(b) != sha256.Size {
			return nil, fmt.Errorf("%s.sha256: want the 64 hex digits of the token's SHA-256 (jail serve token prints them)", at)
		}
		h := [sha256.Size]byte(b)
		if _, dup := t.byHash[h]; dup {
			return nil, fmt.Errorf("%s.sha256: listed twice", at)
		}
		if !validTenantName(tok.Tenant) {
			return nil, fmt.Errorf("%s.tenant: %q: want 1 to 63 of [a-z0-9_.-] starting with a letter", at, tok.Tenant)
		}
		if len(tok.Scopes) == 0 {
			return nil, fmt.Errorf("%s.scopes: none: want some of %s", at, strings.Join(allScopes, ", "))
		}
		for _, s := range tok.Scopes {
			if !slices.Contains(allScopes, s) {
				return nil, fmt.Errorf("%s.scopes: %q: want %s", at, s, strings.Join(allScopes, ", "))
			}
		}
		t.byHash[h] = tok
	}
	if len(t.Tokens) == 0 {
		return nil, errors.New("tokens: none")
	}
	return &t, nil
}

// lookup finds the token whose hash is that of secret. The map's lookup
// is by the SHA-256 of the secret, so its timing tells nothing of any
// stored token.
func (t *Tokens) lookup(secret string) *Token {
	if t == nil || secret == "" {
		return nil
	}
	return t.byHash[sha256.Sum256([]byte(secret))]
}

// HashToken is the SHA-256 of a token in hex, as the token file lists it.
func HashToken(secret string) string {
	h := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(h[:])
}

// validTenantName: 1 to 63 of [a-z0-9_.-], starting with a letter, so
// that it is never a uid and never a path.
func validTenantName(s string) bool {
	if len(s) == 0 || len(s) > 63 || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

func isUID(s string) bool {
	n, err := strconv.ParseUint(s, 10, 32)
	return err == nil && strconv.FormatUint(n, 10) == s
}
