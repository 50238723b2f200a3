// Package profiles loads jail profiles: YAML (or JSON) files whose fields
// are those of [jail.Spec], plus a description and extends (the profile
// one starts from). Four are built in: strict, default (extends strict),
// net-egress (strict with an allow-list the caller gives) and dev (trusted
// local work; not a security boundary). Their files beside this package
// are compiled, merged, into Go values (compiled.go, by go generate) so
// that a run does not parse them; any other name is read as a file.
//
// Every field is checked against the Spec's types with its line, so that
// an unknown field, a wrong type or a value out of range is one line
// naming the file, line and field ([LoadError]); a typo cannot silently
// loosen a jail. [Apply] holds the merge rules every layer goes by: a
// profile over what it extends, the CLI's flags and a server request's
// overrides over a profile. docs/profiles.md describes the format.
package profiles
