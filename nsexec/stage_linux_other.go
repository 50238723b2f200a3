//go:build linux && !amd64

package nsexec

// No stage is embedded for this architecture: Start re-executes the
// program, whose nsexec constructor is the stage.
var stageELF []byte
