package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/jailrt/jail/internal/hostcheck"
	"github.com/jailrt/jail/server"
)

// defaultServeDirs are the socket and the state directory of `jail serve`
// for this user: root's under /run and /var/lib, another user's under
// $XDG_RUNTIME_DIR and $XDG_STATE_HOME (~/.local/state).
func defaultServeDirs() (socket, state string, err error) {
	if os.Geteuid() == 0 {
		return "/run/jail/jail.sock", "/var/lib/jail/serve", nil
	}
	rt := os.Getenv("XDG_RUNTIME_DIR")
	st := os.Getenv("XDG_STATE_HOME")
	if st == "" {
		home, herr := os.UserHomeDir()
		if herr != nil {
			return "", "", errors.New("no $XDG_STATE_HOME or home directory for the state: give --state-dir")
		}
		st = filepath.Join(home, ".local", "state")
	}
	if rt == "" {
		return "", filepath.Join(st, "jail", "serve"), nil
	}
	return filepath.Join(rt, "jail", "jail.sock"), filepath.Join(st, "jail", "serve"), nil
}

func newServeCommand(stdout, stderr io.Writer) *cobra.Command {
	var (
		listen, stateDir, logFormat, socketMode string
		maxRuns                                 int
		grace                                   time.Duration
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve jail's HTTP API on a unix socket",
		Long: `serve answers jail's HTTP API (schema/openapi.yaml): runs, sessions, their commands
(waited for, or streamed as NDJSON events with Accept: application/x-ndjson) and their files,
and Prometheus metrics at /metrics.

It listens on a unix socket only (root: /run/jail/jail.sock; another user:
$XDG_RUNTIME_DIR/jail/jail.sock), mode 0660 by default. A client is the uid the kernel
gives for its connection (SO_PEERCRED): its tenant. Each tenant has its own sessions,
snapshots and workspaces under --state-dir/tenants/UID; another tenant's are not found.
The server makes every jail with its own privilege: a tenant that is neither root nor the
server's own user may not set a field that uses it on the host (a root directory, bind
mounts, host ids, fewer namespaces, the host's network or an address pool, a cgroup
parent, a weaker seccomp filter or Landlock, unenforced settings, a dir workspace, a
profile file): such a request is refused with 403 FORBIDDEN naming the field.

Sessions live in the state directory: they outlive the server, and a new server finds
them. SIGTERM or SIGINT drains: new work is refused (503), /v1/ready answers 503,
requests under way get --grace to finish, then the server exits.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			defSock, defState, err := defaultServeDirs()
			if err != nil && stateDir == "" {
				return usageError("%v", err)
			}
			socket := defSock
			if listen != "" {
				if p, ok := strings.CutPrefix(listen, "unix:"); ok && p != "" {
					socket = p
				} else {
					return usageError("--listen %q: want unix:PATH (TCP needs bearer tokens and TLS, which this version of jail serve does not have)", listen)
				}
			}
			if socket == "" {
				return usageError("no $XDG_RUNTIME_DIR for the socket: give --listen unix:PATH")
			}
			if stateDir == "" {
				stateDir = defState
			}
			mode, err := strconv.ParseUint(socketMode, 8, 32)
			if err != nil || mode > 0o777 {
				return usageError("--socket-mode %q: want octal permission bits such as 0660", socketMode)
			}
			if maxRuns < 1 {
				return usageError("--max-runs %d: want at least 1", maxRuns)
			}
			var h slog.Handler
			switch logFormat {
			case "text":
				h = slog.NewTextHandler(stderr, nil)
			case "json":
				h = slog.NewJSONHandler(stderr, nil)
			default:
				return usageError("--log-format %q: want text or json", logFormat)
			}
			log := slog.New(h)
			if err := os.MkdirAll(stateDir, 0o700); err != nil {
				return usageError("--state-dir: %v", err)
			}
			features := hostcheck.Run()
			ready := true
			for _, f := range features {
				ready = ready && f.Verdict != hostcheck.Missing
			}
			srv, err := server.New(server.Config{StateDir: stateDir, Logger: log, MaxRuns: maxRuns, Version: versionString(),
				Host: features, Ready: ready})
			if err != nil {
				return err
			}
			ln, err := listenUnix(socket, os.FileMode(mode))
			if err != nil {
				return usageError("%v", err)
			}
			hs := &http.Server{Handler: srv.Handler(), ConnContext: server.ConnContext, ReadHeaderTimeout: 10 * time.Second,
				IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10, ErrorLog: slog.NewLogLogger(h, slog.LevelWarn)}
			sigs := make(chan os.Signal, 1)
			signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
			done := make(chan error, 1)
			go func() { done <- hs.Serve(ln) }()
			log.Info("serving", "socket", socket, "state_dir", stateDir, "ready", ready)
			select {
			case err := <-done:
				return err
			case sig := <-sigs:
				log.Info("draining", "signal", sig.String(), "grace", grace)
				srv.Drain()
				ctx, cancel := context.WithTimeout(context.Background(), grace)
				defer cancel()
				err := hs.Shutdown(ctx)
				_ = os.Remove(socket)
				if err != nil {
					hs.Close()
					return fmt.Errorf("requests still under way after %v: %w", grace, err)
				}
				log.Info("stopped")
				return nil
			}
		},
	}
	f := cmd.Flags()
	f.StringVar(&listen, "listen", "", "where to listen: `unix:PATH` (default /run/jail/jail.sock for root, $XDG_RUNTIME_DIR/jail/jail.sock for another user)")
	f.StringVar(&stateDir, "state-dir", "", "the tenants' sessions, snapshots and workspaces (default /var/lib/jail/serve for root, $XDG_STATE_HOME/jail/serve for another user)")
	f.StringVar(&socketMode, "socket-mode", "0660", "the socket's permission bits: who may connect (each peer is then its own tenant)")
	f.IntVar(&maxRuns, "max-runs", server.DefaultMaxRuns, "runs and session commands one tenant may have under way at once; one more gets 503")
	f.DurationVar(&grace, "grace", 30*time.Second, "on SIGTERM, how long requests under way may take to finish")
	f.StringVar(&logFormat, "log-format", "text", "log records on stderr, one per request: text or json")
	_ = stdout
	return cmd
}

// listenUnix listens on a unix socket at path, mode mode. A socket file
// left by a server that is gone is replaced; one a server answers on is
// not.
func listenUnix(path string, mode os.FileMode) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("%s exists and is not a socket", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("%s: a server answers there already", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, err
		}
	}
	// Made with no permission for anyone, then opened up: no moment when
	// it is wider than asked.
	old := syscall.Umask(0o177)
	ln, err := net.Listen("unix", path)
	syscall.Umask(old)
	if err != nil {
		return nil, err
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	if err := os.Chmod(path, mode); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}
