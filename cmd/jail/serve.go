package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/jailrt/jail"
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
		listens                                                             []string
		stateDir, logFormat, socketMode, tokensFile, tenantsFile, poolsFile string
		tlsCert, tlsKey                                                     string
		insecurePlaintext                                                   bool
		maxRuns, maxStreams, netnsPool                                      int
		grace                                                               time.Duration
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve jail's HTTP API on a unix socket (or TCP with tokens and TLS)",
		Long: `serve answers jail's HTTP API (schema/openapi.yaml): runs, sessions, their commands
(waited for, or streamed as NDJSON events with Accept: application/x-ndjson) and their files,
and Prometheus metrics at /metrics.

It listens on a unix socket by default (root: /run/jail/jail.sock; another user:
$XDG_RUNTIME_DIR/jail/jail.sock), mode 0660. A client there is the uid the kernel gives for
its connection (SO_PEERCRED): its tenant, named by the uid in decimal.

--listen tcp://HOST:PORT (repeatable, with unix:PATH too) serves TCP, and needs --tokens: a
file of bearer tokens by their SHA-256, each with its tenant and scopes (run, sessions,
metrics); a TCP client sends Authorization: Bearer TOKEN. "jail serve token" makes one. TCP
needs TLS (--tls-cert, --tls-key), or --insecure-plaintext on a loopback address only;
otherwise serve refuses to start. No jail's egress allow-list may open this host's
addresses on a port serve listens on.

Each tenant has its own sessions, snapshots and workspaces under --state-dir/tenants/NAME;
another tenant's are not found. The server makes every jail with its own privilege: a
tenant that is neither root nor the server's own user may not set a field that uses it on
the host (a root directory, bind mounts, host ids, fewer namespaces, the host's network or
an address pool, a cgroup parent, a weaker seccomp filter or Landlock, unenforced settings,
a dir workspace, a profile file): such a request is refused with 403 FORBIDDEN naming the
field. --tenants FILE (YAML or JSON) allows exactly what it names, per tenant or by
default, and sets quotas:

  default:
    quotas: {sessions: 8, execs: 4, streams: 16, memory_max_bytes: 536870912, workspace_bytes: 268435456,
             snapshot_bytes: 1073741824}
  tenants:
    "1000":                   # a unix peer, by uid
      profiles: [strict]      # what it may name; the first is its default
      spec: false             # a profile's name only, never a whole spec
    ci:                       # a token's tenant
      scopes: [run, sessions]
      bind_roots: [{path: /srv/datasets}, {path: /srv/out, writable: true}]
      allow_fields: [seccomp] # of: root allow_sensitive_sources host_uid host_gid
                              # disable_namespaces network.mode network.pool cgroup_parent
                              # seccomp seccomp_policy landlock allow_unenforced workspace.type
      admin: false            # true: every field, as the server's own user

--pools FILE keeps warm pools of jails built ahead (pools: [{name, kind, profile or spec,
min_ready, max, max_age, replenish_delay, workspace}]); a run names one with "pool" and its
result says "pool": "hit", or "miss" for a cold start when none was ready. A pool of kind
"session" keeps sessions for POST /v1/sessions with "pool".

As root, --netns-pool N (default 4) keeps N empty network namespaces (lo up) made ahead:
a jail with a network of its own joins one at its clone instead of waiting for the kernel
to make one (about 0.3 ms of a run). They belong to the host's user namespace, so nothing
in a jail holds a capability over its network.

Sessions live in the state directory: they outlive the server, and a new server finds
them. One server has a state directory at a time: another started on it refuses to start
(exit 125) until the first has exited. SIGTERM or SIGINT drains: new work is refused
(503), /v1/ready answers 503, requests and background execs under way get --grace to
finish, then the server exits; an exec it cuts short ends with it. A background or
detached exec's document is kept in the state directory: a new server answers for it
(GET .../exec/EID), as "interrupted" if the last one stopped while it ran. SIGHUP reads --tokens, --tenants and --pools again: a token left out is refused
from the next request on, the policy applies to the next request, and pools the file
adds, changes or drops are made, replaced or removed (pools made with PUT stay); a file
that does not parse changes nothing and is logged.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			defSock, defState, err := defaultServeDirs()
			if err != nil && stateDir == "" {
				return usageError("%v", err)
			}
			if stateDir == "" {
				stateDir = defState
			}
			mode, err := strconv.ParseUint(socketMode, 8, 32)
			if err != nil || mode > 0o777 {
				return usageError("--socket-mode %q: want octal permission bits such as 0660", socketMode)
			}
			if netnsPool < 0 {
				return usageError("--netns-pool %d: want 0 (none) or more", netnsPool)
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
			if len(listens) == 0 {
				if defSock == "" {
					return usageError("no $XDG_RUNTIME_DIR for the socket: give --listen unix:PATH")
				}
				listens = []string{"unix:" + defSock}
			}
			eps, err := parseListens(listens, tokensFile != "", tlsCert, tlsKey, insecurePlaintext)
			if err != nil {
				return usageError("%v", err)
			}
			if maxStreams < 1 {
				return usageError("--max-streams %d: want at least 1", maxStreams)
			}
			cfg := server.Config{StateDir: stateDir, MaxRuns: maxRuns, MaxStreams: maxStreams, Version: versionString(), NetnsPool: netnsPool}
			if netnsPool == 0 {
				cfg.NetnsPool = -1
			}
			files := serveFiles{tokens: tokensFile, tenants: tenantsFile, pools: poolsFile}
			if cfg.Tokens, cfg.Policy, cfg.Pools, err = files.load(); err != nil {
				return usageError("%v", err)
			}
			var tlsConf *tls.Config
			if tlsCert != "" || tlsKey != "" {
				if tlsCert == "" || tlsKey == "" {
					return usageError("--tls-cert and --tls-key go together")
				}
				cert, err := tls.LoadX509KeyPair(tlsCert, tlsKey)
				if err != nil {
					return usageError("--tls-cert, --tls-key: %v", err)
				}
				tlsConf = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
			}
			for _, ep := range eps {
				if ep.tcp != "" {
					cfg.TCPPorts = append(cfg.TCPPorts, ep.port)
				}
				if ep.unix != "" {
					cfg.Private = append(cfg.Private, ep.unix)
				}
			}
			// No tenant's bind reaches these (nor the state directory).
			cfg.Private = append(cfg.Private, tokensFile, tenantsFile, poolsFile, tlsCert, tlsKey)
			log := slog.New(h)
			if err := os.MkdirAll(stateDir, 0o700); err != nil {
				return usageError("--state-dir: %v", err)
			}
			cfg.Check = func() (any, bool) {
				features := hostcheck.Run()
				ready := true
				for _, f := range features {
					ready = ready && f.Verdict != hostcheck.Missing
				}
				return features, ready
			}
			cfg.Host, cfg.Ready = cfg.Check()
			cfg.Logger = log
			srv, err := server.New(cfg)
			if errors.Is(err, server.ErrStateDirInUse) || errors.Is(err, server.ErrStateDirUnsafe) {
				return usageError("--state-dir: %s", strings.TrimPrefix(err.Error(), "server: "))
			}
			if err != nil {
				return err
			}
			defer srv.Close() // the pools' ready members
			var lns []net.Listener
			defer func() {
				for _, ln := range lns {
					ln.Close()
				}
			}()
			for _, ep := range eps {
				ln, err := ep.listen(os.FileMode(mode), tlsConf)
				if err != nil {
					return usageError("%v", err)
				}
				lns = append(lns, ln)
			}
			hs := &http.Server{Handler: srv.Handler(), ConnContext: server.ConnContext, ReadHeaderTimeout: 10 * time.Second,
				IdleTimeout: 2 * time.Minute, MaxHeaderBytes: server.HTTPMaxHeaderBytes, ErrorLog: slog.NewLogLogger(h, slog.LevelWarn)}
			sigs := make(chan os.Signal, 1)
			signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
			done := make(chan error, len(lns))
			for i, ln := range lns {
				go func() { done <- hs.Serve(ln) }()
				log.Info("serving", "listen", eps[i].String(), "tls", eps[i].tcp != "" && tlsConf != nil)
			}
			log.Info("state", "state_dir", stateDir, "ready", cfg.Ready, "tokens", cfg.Tokens != nil, "tenants_policy", tenantsFile)
			removeSockets := func() {
				for _, ep := range eps {
					if ep.unix != "" {
						_ = os.Remove(ep.unix)
					}
				}
			}
			for {
				var sig os.Signal
				select {
				case err := <-done:
					hs.Close()
					removeSockets()
					return err
				case sig = <-sigs:
				}
				if sig == syscall.SIGHUP {
					// The files again; one that does not parse changes nothing.
					tok, pol, pools, err := files.load()
					if err == nil {
						err = srv.Reload(tok, pol, pools)
					}
					if err != nil {
						log.Error("reload", "err", err)
					} else {
						log.Info("reloaded", "tokens", files.tokens, "tenants_policy", files.tenants, "pools", files.pools)
					}
					continue
				}
				log.Info("draining", "signal", sig.String(), "grace", grace)
				srv.Drain()
				ctx, cancel := context.WithTimeout(context.Background(), grace)
				defer cancel()
				err := hs.Shutdown(ctx)
				removeSockets()
				if err != nil {
					hs.Close()
					return fmt.Errorf("requests still under way after %v: %w", grace, err)
				}
				// Background execs, which no request holds, end with the
				// server: they get what is left of the grace too.
				if err := srv.Idle(ctx); err != nil {
					return fmt.Errorf("commands still under way after %v: %w", grace, err)
				}
				log.Info("stopped")
				return nil
			}
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&listens, "listen", nil, "where to listen, repeatable: `unix:PATH` (default /run/jail/jail.sock for root, $XDG_RUNTIME_DIR/jail/jail.sock for another user) or tcp://HOST:PORT (needs --tokens, and TLS or --insecure-plaintext)")
	f.StringVar(&stateDir, "state-dir", "", "the tenants' sessions, snapshots and workspaces: a directory of the server's user that no one else may write to (default /var/lib/jail/serve for root, $XDG_STATE_HOME/jail/serve for another user)")
	f.StringVar(&socketMode, "socket-mode", "0660", "the unix socket's permission bits: who may connect (each peer is then its own tenant)")
	f.StringVar(&tokensFile, "tokens", "", "`FILE` of bearer tokens (by SHA-256) with their tenants and scopes, for TCP clients (jail serve token makes one)")
	f.StringVar(&tenantsFile, "tenants", "", "`FILE`: the tenants' policy (allowed profiles, bind roots and fields, quotas); see above")
	f.StringVar(&poolsFile, "pools", "", "`FILE` of warm pools (YAML or JSON): pools: [{name, profile or spec, min_ready, max, max_age, replenish_delay}]; a run names one with \"pool\"")
	f.StringVar(&tlsCert, "tls-cert", "", "`FILE`: the PEM certificate (chain) of the TCP listeners")
	f.StringVar(&tlsKey, "tls-key", "", "`FILE`: the PEM private key of --tls-cert")
	f.BoolVar(&insecurePlaintext, "insecure-plaintext", false, "serve TCP without TLS: only on a loopback address")
	f.IntVar(&netnsPool, "netns-pool", jail.DefaultNetnsPoolSize, "as root, how many empty network namespaces (lo up) to keep made ahead for jails with a network of their own: about 0.3 ms less a run; 0: none")
	f.IntVar(&maxRuns, "max-runs", server.DefaultMaxRuns, "runs and session commands one tenant may have under way at once (unless its quota says); one more gets 503")
	f.IntVar(&maxStreams, "max-streams", server.DefaultMaxStreams, "followers of exec events (GET .../events) one tenant may have open at once (unless its quota says); one more gets 503")
	f.DurationVar(&grace, "grace", 30*time.Second, "on SIGTERM, how long requests and background execs under way may take to finish (then the server exits 125, and what still ran ends with it)")
	f.StringVar(&logFormat, "log-format", "text", "log records on stderr, one per request: text or json")
	cmd.AddCommand(newServeTokenCommand(stdout))
	return cmd
}

// endpoint is one --listen: a unix socket or a TCP address.
type endpoint struct {
	unix, tcp string
	port      uint16
	plaintext bool
}

func (e endpoint) String() string {
	if e.unix != "" {
		return "unix:" + e.unix
	}
	return "tcp://" + e.tcp
}

// parseListens checks each --listen and what TCP needs: tokens, and TLS or
// plaintext on loopback with the flag that says so.
func parseListens(listens []string, tokens bool, cert, key string, plaintext bool) ([]endpoint, error) {
	var eps []endpoint
	tcp := false
	for _, l := range listens {
		if p, ok := strings.CutPrefix(l, "unix:"); ok && p != "" {
			eps = append(eps, endpoint{unix: p})
			continue
		}
		addr, ok := strings.CutPrefix(l, "tcp://")
		if !ok {
			return nil, fmt.Errorf("--listen %q: want unix:PATH or tcp://HOST:PORT", l)
		}
		ap, err := netip.ParseAddrPort(addr)
		if err != nil || ap.Port() == 0 {
			return nil, fmt.Errorf("--listen %q: want tcp://IP:PORT with an IP address (no name: it is not resolved) and a port", l)
		}
		if !tokens {
			return nil, fmt.Errorf("--listen %s: TCP needs --tokens (bearer tokens with their tenants): a TCP peer has no uid to be its tenant", l)
		}
		if cert == "" || key == "" {
			if !plaintext {
				return nil, fmt.Errorf("--listen %s: TCP needs TLS (--tls-cert and --tls-key), or --insecure-plaintext on a loopback address", l)
			}
			if !ap.Addr().IsLoopback() {
				return nil, fmt.Errorf("--listen %s: --insecure-plaintext only on a loopback address (127.0.0.1, ::1): tokens would cross the network in clear", l)
			}
		}
		tcp = true
		eps = append(eps, endpoint{tcp: ap.String(), port: ap.Port(), plaintext: cert == ""})
	}
	if plaintext && !tcp {
		return nil, errors.New("--insecure-plaintext: no tcp:// listener")
	}
	return eps, nil
}

func (e endpoint) listen(mode os.FileMode, tlsConf *tls.Config) (net.Listener, error) {
	if e.unix != "" {
		return listenUnix(e.unix, mode)
	}
	ln, err := net.Listen("tcp", e.tcp)
	if err != nil {
		return nil, err
	}
	if e.plaintext {
		return ln, nil
	}
	return tls.NewListener(ln, tlsConf), nil
}

// newServeTokenCommand is `jail serve token`: a new bearer token.
func newServeTokenCommand(stdout io.Writer) *cobra.Command {
	var tenant, file string
	var scopes []string
	cmd := &cobra.Command{
		Use:   "token --tenant NAME [--scope S]... [--tokens FILE]",
		Short: "Make a bearer token for a TCP client of jail serve",
		Long: `token makes a random bearer token and prints it on the first line: give it to the
client, which sends it as Authorization: Bearer TOKEN. The server keeps only its SHA-256.
With --tokens FILE the token's entry is added to that token file (made, mode 0600, if it is
not there; a running server reads it again only when restarted); without, the entry is
printed after the token, to add by hand.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if tenant == "" {
				return usageError("--tenant: the token's tenant is needed")
			}
			b := make([]byte, 32)
			if _, err := rand.Read(b); err != nil {
				return err
			}
			secret := "jail_" + base64.RawURLEncoding.EncodeToString(b)
			entry := fmt.Sprintf("- sha256: %s\n  tenant: %s\n  scopes: [%s]\n", server.HashToken(secret), tenant, strings.Join(scopes, ", "))
			if _, err := server.ParseTokens([]byte("tokens:\n" + entry)); err != nil {
				return usageError("%v", err)
			}
			if file == "" {
				fmt.Fprintf(stdout, "%s\n# the token file's entry (tokens: [...]):\n%s", secret, entry)
				return nil
			}
			old, err := os.ReadFile(file)
			if err != nil && !os.IsNotExist(err) {
				return usageError("--tokens: %v", err)
			}
			if len(old) == 0 {
				old = []byte("tokens:\n")
			} else if old[len(old)-1] != '\n' {
				old = append(old, '\n')
			}
			data := append(old, entry...)
			if _, err := server.ParseTokens(data); err != nil {
				return usageError("--tokens %s: with the new entry: %v", file, err)
			}
			tmp := file + ".tmp"
			if err := os.WriteFile(tmp, data, 0o600); err != nil {
				return err
			}
			if err := os.Rename(tmp, file); err != nil {
				_ = os.Remove(tmp)
				return err
			}
			fmt.Fprintln(stdout, secret)
			return nil
		},
	}
	cmd.Flags().StringVar(&tenant, "tenant", "", "the token's tenant: 1 to 63 of [a-z0-9_.-], starting with a letter")
	cmd.Flags().StringSliceVar(&scopes, "scope", []string{server.ScopeRun, server.ScopeSessions}, "what the token may do: run, sessions, metrics (repeatable or comma-separated)")
	cmd.Flags().StringVar(&file, "tokens", "", "add the entry to this token `FILE`")
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

// serveFiles are jail serve's files, read at the start and again on
// SIGHUP.
type serveFiles struct{ tokens, tenants, pools string }

// load reads and checks the files given; nil for one not given.
func (f serveFiles) load() (tokens *server.Tokens, policy *server.Policy, pools *server.PoolsFile, err error) {
	read := func(flag, path string, parse func([]byte) error) error {
		if path == "" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("--%s: %v", flag, err)
		}
		if err := parse(b); err != nil {
			return fmt.Errorf("--%s %s: %v", flag, path, err)
		}
		return nil
	}
	if err = read("tokens", f.tokens, func(b []byte) (err error) { tokens, err = server.ParseTokens(b); return err }); err != nil {
		return nil, nil, nil, err
	}
	if err = read("tenants", f.tenants, func(b []byte) (err error) { policy, err = server.ParsePolicy(b); return err }); err != nil {
		return nil, nil, nil, err
	}
	if err = read("pools", f.pools, func(b []byte) (err error) { pools, err = server.ParsePools(b); return err }); err != nil {
		return nil, nil, nil, err
	}
	return tokens, policy, pools, nil
}
