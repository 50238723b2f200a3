// Package profiles loads jail profiles: YAML (or JSON) files whose fields
// are those of [jail.Spec], plus a description. Two profiles are built in,
// "strict" and "default": the files strict.yaml and default.yaml beside
// this package, compiled into Go values (compiled.go, by go generate) so
// that a run does not parse them; any other name is read as a file.
// Unknown fields are refused, so a typo in a profile cannot silently
// loosen a jail.
package profiles
