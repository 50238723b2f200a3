package profiles

import (
	"reflect"
	"slices"
	"strings"

	"github.com/jailrt/jail"
	"github.com/jailrt/jail/mounts"
)

// Apply lays the fields of over that set names on base and returns the
// result; base and over are not changed. set holds JSON names: "timeout",
// "network.allow" for a field of network. These are the merge rules of
// every profile layer (a file over what it extends, the CLI's flags or a
// server request over a profile); a field not named here replaces the
// base's, zero included (`timeout: 0` lifts a base's timeout):
//
//   - env: by key: a KEY=VALUE replaces the base's KEY, others are added
//     (the base's nil env is the default one);
//   - rlimits: by name;
//   - mounts: by target: a mount at the target of a base's replaces it in
//     place, others are added after the base's;
//   - disable_namespaces, network.allow, allow_sensitive_sources: the union
//     (true allows every source);
//   - seccomp and seccomp_policy: setting one clears the other.
func Apply(base, over jail.Spec, set []string) jail.Spec {
	out := base
	out.Env = slices.Clone(base.Env)
	out.Rlimits = slices.Clone(base.Rlimits)
	out.Mounts = slices.Clone(base.Mounts)
	out.DisableNamespaces = slices.Clone(base.DisableNamespaces)
	out.Network.Allow = slices.Clone(base.Network.Allow)
	out.AllowSensitiveSources.Paths = slices.Clone(base.AllowSensitiveSources.Paths)
	for _, key := range set {
		switch key {
		case "env":
			if out.Env == nil {
				out.Env = slices.Clone(jail.DefaultEnv)
			}
			out.Env = setEnv(out.Env, over.Env...)
		case "rlimits":
			for _, r := range over.Rlimits {
				out.Rlimits = setRlimit(out.Rlimits, r)
			}
		case "mounts":
			for _, m := range over.Mounts {
				out.Mounts = setMount(out.Mounts, m)
			}
		case "disable_namespaces":
			out.DisableNamespaces = union(out.DisableNamespaces, over.DisableNamespaces)
		case "network.allow":
			out.Network.Allow = union(out.Network.Allow, over.Network.Allow)
		case "allow_sensitive_sources":
			out.AllowSensitiveSources = jail.SensitiveSources{
				All:   out.AllowSensitiveSources.All || over.AllowSensitiveSources.All,
				Paths: union(out.AllowSensitiveSources.Paths, over.AllowSensitiveSources.Paths),
			}
		case "seccomp":
			out.Seccomp, out.SeccompPolicy = over.Seccomp, nil
		case "seccomp_policy":
			out.Seccomp, out.SeccompPolicy = "", over.SeccompPolicy
		default:
			dst, src := reflect.ValueOf(&out).Elem(), reflect.ValueOf(over)
			name := key
			if sub, ok := strings.CutPrefix(key, "network."); ok {
				dst, src, name = dst.FieldByName("Network"), src.FieldByName("Network"), sub
			}
			f, ok := jsonFields(dst.Type())[name]
			if !ok {
				panic("profiles.Apply: no Spec field " + key) // a caller's bug
			}
			v := src.FieldByIndex(f.Index)
			if v.Kind() == reflect.Pointer && !v.IsNil() { // a copy of its own
				c := reflect.New(v.Type().Elem())
				c.Elem().Set(v.Elem())
				v = c
			}
			dst.FieldByIndex(f.Index).Set(v)
		}
	}
	return out
}

// Fields lists the keys [Apply] takes: every JSON name of the Spec, and
// "network.NAME" for the fields of network.
func Fields() []string {
	var out []string
	for name := range jsonFields(reflect.TypeFor[jail.Spec]()) {
		if name == "network" {
			for sub := range jsonFields(reflect.TypeFor[jail.Network]()) {
				out = append(out, "network."+sub)
			}
			continue
		}
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

func setEnv(env []string, kvs ...string) []string {
	for _, kv := range kvs {
		k, _, _ := strings.Cut(kv, "=")
		i := slices.IndexFunc(env, func(e string) bool { return strings.HasPrefix(e, k+"=") })
		if i >= 0 {
			env[i] = kv
		} else {
			env = append(env, kv)
		}
	}
	return env
}

func setRlimit(list []jail.Rlimit, r jail.Rlimit) []jail.Rlimit {
	if i := slices.IndexFunc(list, func(e jail.Rlimit) bool { return e.Name == r.Name }); i >= 0 {
		list[i] = r
		return list
	}
	return append(list, r)
}

func setMount(list []mounts.Mount, m mounts.Mount) []mounts.Mount {
	if i := slices.IndexFunc(list, func(e mounts.Mount) bool { return e.Target == m.Target }); i >= 0 {
		list[i] = m
		return list
	}
	return append(list, m)
}

func union(a, b []string) []string {
	for _, s := range b {
		if !slices.Contains(a, s) {
			a = append(a, s)
		}
	}
	return a
}
