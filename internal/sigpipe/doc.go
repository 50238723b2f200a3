// Package sigpipe catches signals without os/signal, for a process that
// only forwards them and is about to exit: jail run and jail session exec.
//
// os/signal.Notify makes, the first time, a runtime thread that owns the
// signal mask (LockOSThread) and then one round trip to it per signal
// enabled: an empty static Go program takes 1.25 ms from fork to exit
// here, with a Notify of four signals 1.56 ms (300 interleaved rounds).
// Catch instead installs a C handler with sigaction that writes the
// signal's number into a non-blocking pipe, and a goroutine reads it
// through the poller, as os/signal's own loop reads the runtime's queue:
// four sigaction calls and a pipe, no thread. A strict `jail run` uses
// 0.4 ms less CPU with it (10.04 -> 9.64 ms, 200 rounds) and runs 4.6 %
// more jails a second at 8 in flight; its wall time moved within the
// noise (bench/README.md).
//
// The handler replaces the Go runtime's for the signals given, which the
// runtime allows for signals it does not use itself (SA_ONSTACK, as the
// os/signal documentation asks of non-Go handlers). Do not mix Catch and
// signal.Notify on one signal: whichever ran last owns it.
package sigpipe
