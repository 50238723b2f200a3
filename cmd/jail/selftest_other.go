//go:build !linux

package main

import (
	"errors"
	"io"

	"github.com/spf13/cobra"
)

// Off Linux jail runs no jails, so there is nothing to try escapes from.

func newSelftestCommand(_, _ io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "selftest [flags]",
		Short: "Try escapes from a jail (Linux only)",
		RunE:  func(*cobra.Command, []string) error { return errors.New("selftest: jail runs jails on Linux only") },
	}
}

func newSelftestProbeCommand(io.Writer) *cobra.Command {
	return &cobra.Command{Use: "selftest-probe", Hidden: true, RunE: func(*cobra.Command, []string) error {
		return errors.New("selftest-probe: Linux only")
	}}
}
