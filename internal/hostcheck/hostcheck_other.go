//go:build !linux

package hostcheck

import "runtime"

// Run probes the host for the calling user and returns one Feature per check,
// in a stable order. jail needs Linux, so on other systems Run returns a
// single Missing "linux" feature.
func Run() []Feature {
	return []Feature{{
		Name:    "linux",
		Verdict: Missing,
		Detail:  "this is " + runtime.GOOS + "; jail runs only on Linux",
		Fix:     "run jail on Linux 5.12 or later (a VM works)",
	}}
}
