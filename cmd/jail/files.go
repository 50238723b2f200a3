package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/jailrt/jail"
	"github.com/jailrt/jail/internal/hostfs"
)

// The files of a session: put, get, ls, mv, cp (and rm ID:PATH, in
// session.go). Every operation runs in the session, as its workload's
// user; the host never resolves a path of the jail.

const filesHelp = `Every file operation runs inside the session: a helper joins it as ` + "`exec`" + ` does, as the
workload's user, with the workload's view of the file system. A symlink the jailed code planted
leads to the jail's own files, never the host's. A write goes to a new file that replaces the old one
in one rename once all of it is written and synced; it never follows a final symlink and refuses a
directory, FIFO or device in the way; one that fails or runs out of space leaves no partial file.
Tar input refuses absolute names, "..", device nodes, FIFOs and links that leave the destination.
Host paths are opened without following symlinks, as jail's other host paths are.`

func newSessionPut(m func() *jail.Sessions) *cobra.Command {
	var mode string
	var mkdir, asTar bool
	cmd := &cobra.Command{
		Use:   "put [--mode MODE] [--mkdir] [--tar] ID SRC... DST",
		Short: "Copy host files or directories (or a tar stream) into a session",
		Long: `put copies each SRC, a host file or directory or - (standard input), to DST in session ID. One
file SRC is written at DST unless DST is a directory or ends in /; then, and for several SRCs, each
goes into DST under its own name. A directory SRC is copied as a whole (as a tar stream; symlinks in
it stay symlinks). With --tar, the single SRC is a tar stream (a file, or - for standard input)
unpacked into the directory DST.

` + filesHelp,
		Example: `  jail session put "$id" main.py /workspace/
  jail session put --mkdir "$id" tests/ /workspace/tests
  git archive HEAD | jail session put --tar "$id" - /workspace/src`,
		Args: cobra.MinimumNArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			o := jail.WriteOptions{Mkdir: mkdir}
			if mode != "" {
				n, err := strconv.ParseUint(mode, 8, 32)
				if err != nil || n&^0o777 != 0 {
					return usageError("--mode %q: want octal permission bits, e.g. 0644", mode)
				}
				o.Mode = os.FileMode(n)
			}
			s, err := m().Get(args[0])
			if err != nil {
				return sessionError(err)
			}
			srcs, dst := args[1:len(args)-1], args[len(args)-1]
			ctx := context.Background()
			if asTar {
				if len(srcs) != 1 {
					return usageError("put --tar: want one SRC, a tar file or -")
				}
				in, closeIn, err := openSource(srcs[0], cmd.InOrStdin())
				if err != nil {
					return err
				}
				defer closeIn()
				_, err = s.PutTar(ctx, dst, in, o)
				return sessionError(err)
			}
			return sessionError(putSources(ctx, s, srcs, dst, o, cmd.InOrStdin()))
		},
	}
	fl := cmd.Flags()
	fl.SetInterspersed(false)
	fl.StringVar(&mode, "mode", "", "permission bits of the files written, in octal (default 0644; a directory's files keep theirs)")
	fl.BoolVarP(&mkdir, "mkdir", "p", false, "make missing directories above DST (mode 0755)")
	fl.BoolVar(&asTar, "tar", false, "SRC is a tar stream to unpack into the directory DST")
	return cmd
}

// openSource opens a host file to read (no symlinks in its path, a
// regular file or a pipe), or stdin for "-".
func openSource(src string, stdin io.Reader) (io.Reader, func(), error) {
	if src == "-" {
		return stdin, func() {}, nil
	}
	f, err := hostfs.OpenInput(src)
	if err != nil {
		return nil, nil, usageError("%s: %v", src, err)
	}
	return f, func() { f.Close() }, nil
}

// putSources copies host srcs to dst in the session (put, and cp into a
// session).
func putSources(ctx context.Context, s *jail.Session, srcs []string, dst string, o jail.WriteOptions, stdin io.Reader) error {
	into := len(srcs) > 1 || strings.HasSuffix(dst, "/")
	for _, src := range srcs {
		target, o := dst, o
		switch {
		case src == "-" && into:
			return usageError("put: - (standard input) needs a file name as DST")
		case into:
			target = path.Join(dst, filepath.Base(filepath.Clean(src)))
		case src != "-":
			// Into a directory if DST is one: the helper sees, in the
			// jail, with no round trip to ask first.
			o.Into = filepath.Base(filepath.Clean(src))
		}
		if err := putOne(ctx, s, src, target, o, stdin); err != nil {
			return err
		}
	}
	return nil
}

func putOne(ctx context.Context, s *jail.Session, src, target string, o jail.WriteOptions, stdin io.Reader) error {
	if src != "-" {
		if fi, err := os.Lstat(src); err == nil && fi.IsDir() {
			pr, pw := io.Pipe()
			go func() { _, err := jail.ArchiveDir(src, pw); pw.CloseWithError(err) }()
			o.Mkdir = true // the directory itself is made
			_, err = s.PutTar(ctx, target, pr, o)
			pr.Close()
			return err
		}
	}
	in, closeIn, err := openSource(src, stdin)
	if err != nil {
		return err
	}
	defer closeIn()
	_, err = s.WriteFile(ctx, target, in, o)
	return err
}

func newSessionGet(m func() *jail.Sessions, stdout io.Writer) *cobra.Command {
	var asTar bool
	cmd := &cobra.Command{
		Use:   "get [--tar] ID PATH [DEST|-]",
		Short: "Copy a file or directory out of a session",
		Long: `get copies PATH of session ID to the host: a file to DEST (default: its name in the current
directory; - for standard output; into DEST when DEST is a directory), a directory as a whole into
DEST (created; into DEST/NAME when DEST exists), with the same refusals as tar input (what the jail
made is untrusted on the host too). With --tar, PATH goes out as a tar stream, to standard output or
to the file DEST. Host files are written to a new file renamed over DEST: nothing planted there is
written through.

` + filesHelp,
		Example: `  jail session get "$id" /workspace/out.json
  jail session get "$id" /workspace/results ./results
  jail session get --tar "$id" /workspace | tar -t`,
		Args: cobra.RangeArgs(2, 3),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := m().Get(args[0])
			if err != nil {
				return sessionError(err)
			}
			dest := ""
			if len(args) == 3 {
				dest = args[2]
			}
			ctx := context.Background()
			if asTar {
				if dest == "" || dest == "-" {
					_, err := s.GetTar(ctx, args[1], stdout)
					return sessionError(err)
				}
				return sessionError(writeHost(dest, func(w io.Writer) error { _, err := s.GetTar(ctx, args[1], w); return err }))
			}
			return sessionError(getPath(ctx, s, args[1], dest, stdout))
		},
	}
	cmd.Flags().SetInterspersed(false)
	cmd.Flags().BoolVar(&asTar, "tar", false, "write PATH as a tar stream (to standard output, or to the file DEST)")
	return cmd
}

// getPath copies path of the session to dest on the host (get, and cp
// out of a session).
func getPath(ctx context.Context, s *jail.Session, p, dest string, stdout io.Writer) error {
	name := path.Base(p)
	if dest == "-" {
		_, err := s.ReadFile(ctx, p, stdout)
		if errors.Is(err, syscall.EISDIR) {
			return usageError("get: %s is a directory: use --tar for a stream", p)
		}
		return err
	}
	if dest == "" {
		dest = name
	} else if st, err := os.Stat(dest); err == nil && st.IsDir() {
		dest = filepath.Join(dest, name)
	}
	// A file, as most are (one round trip); a directory says so, and
	// comes as a tree (into dest, when that is a directory already).
	if st, err := os.Lstat(dest); err != nil || !st.IsDir() {
		err := writeHost(dest, func(w io.Writer) error { _, err := s.ReadFile(ctx, p, w); return err })
		if !errors.Is(err, syscall.EISDIR) {
			return err
		}
	}
	if err := os.Mkdir(dest, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := jail.ExtractTar(dest, pr)
		pr.CloseWithError(err)
		done <- err
	}()
	_, err := s.GetTar(ctx, p, pw)
	pw.CloseWithError(err)
	xerr := <-done
	if errors.Is(xerr, syscall.EXDEV) {
		// A link out of dest is refused on the host too; the stream as
		// it is remains the caller's to unpack.
		return fmt.Errorf("%w (what was before it is in %s; `jail session get --tar` gives the tree as it is)", xerr, dest)
	}
	if xerr != nil {
		return xerr
	}
	return err
}

// writeHost writes what write yields to the host file dest, which
// appears only once all of it is there.
func writeHost(dest string, write func(io.Writer) error) error {
	out, err := hostfs.CreateOutput(dest)
	if err != nil {
		return usageError("%s: %v", dest, err)
	}
	defer out.Close()
	return writeFrom(out, write)
}

func newSessionLs(m func() *jail.Sessions, stdout io.Writer) *cobra.Command {
	var recursive, asJSON bool
	var depth int
	cmd := &cobra.Command{
		Use:   "ls [-R|--depth N] [--json] ID [PATH]",
		Short: "List files of a session",
		Long: `ls lists PATH of session ID (default /), as lstat(2) sees it in the jail: type and mode, owner in
the jail, size, modification time, path, and a symlink's target. A directory lists its entries, N
levels deep with --depth (default 1), every level with -R; symlinks below PATH are never followed.
--json prints an array of {name, path, type, size, mode, mtime, uid, gid, target}.

` + filesHelp,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := m().Get(args[0])
			if err != nil {
				return sessionError(err)
			}
			p := "/"
			if len(args) == 2 {
				p = args[1]
			}
			if recursive {
				depth = 0
			} else if depth < 1 {
				return usageError("--depth %d: want 1 or more (or -R)", depth)
			}
			list, err := s.ReadDir(context.Background(), p, depth)
			if err != nil {
				return sessionError(err)
			}
			if list == nil {
				list = []jail.FileInfo{}
			}
			if asJSON {
				return printJSON(stdout, list)
			}
			tw := tabwriter.NewWriter(stdout, 0, 4, 1, ' ', tabwriter.AlignRight)
			for _, f := range list {
				name := f.Path
				if f.Target != "" {
					name += " -> " + f.Target
				}
				fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t %s\t %s\n", typeChar(f.Type)+f.Mode.Perm().String()[1:], f.UID, f.GID, f.Size,
					f.ModTime.Local().Format(time.DateTime), name)
			}
			return tw.Flush()
		},
	}
	fl := cmd.Flags()
	fl.SetInterspersed(false)
	fl.BoolVarP(&recursive, "recursive", "R", false, "list every level below PATH")
	fl.IntVar(&depth, "depth", 1, "levels of directories to list below PATH")
	fl.BoolVar(&asJSON, "json", false, "print a JSON array of file entries")
	return cmd
}

func typeChar(t string) string {
	switch t {
	case "dir":
		return "d"
	case "symlink":
		return "l"
	case "fifo":
		return "p"
	case "socket":
		return "s"
	case "char":
		return "c"
	case "block":
		return "b"
	}
	return "-"
}

func newSessionMv(m func() *jail.Sessions) *cobra.Command {
	return &cobra.Command{
		Use:   "mv ID FROM TO",
		Short: "Move or rename a file in a session",
		Long: `mv renames FROM to TO in session ID, as rename(2) does (a file at TO is replaced); when TO is a
directory, FROM moves into it. Neither is followed if it is a symlink.`,
		Args: cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := m().Get(args[0])
			if err != nil {
				return sessionError(err)
			}
			return sessionError(s.Rename(context.Background(), args[1], args[2]))
		},
	}
}

// splitSessionPath splits "ID:PATH"; ok is false for a host path.
func splitSessionPath(arg string) (id, p string, ok bool) {
	id, p, ok = strings.Cut(arg, ":")
	if !ok || id == "" || strings.Contains(id, "/") {
		return "", "", false
	}
	return id, p, true
}

func newSessionCp(m func() *jail.Sessions, stdout io.Writer) *cobra.Command {
	var mkdir bool
	cmd := &cobra.Command{
		Use:   "cp [-p] SRC DST",
		Short: "Copy between the host and a session (ID:PATH on one side)",
		Long: `cp copies a file or directory between the host and a session; the session's side is written
ID:PATH. Into a session it is ` + "`put`" + `, out of one ` + "`get`" + `: when DST is an existing directory, SRC goes into
it under its own name; a directory is copied as a whole.

` + filesHelp,
		Example: `  jail session cp ./src "$id":/workspace/src
  jail session cp "$id":/workspace/report.html .`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			sid, sp, sok := splitSessionPath(args[0])
			did, dp, dok := splitSessionPath(args[1])
			ctx := context.Background()
			switch {
			case sok == dok:
				return usageError("cp: want ID:PATH on exactly one side")
			case dok:
				s, err := m().Get(did)
				if err != nil {
					return sessionError(err)
				}
				return sessionError(putSources(ctx, s, []string{args[0]}, dp, jail.WriteOptions{Mkdir: mkdir}, cmd.InOrStdin()))
			default:
				s, err := m().Get(sid)
				if err != nil {
					return sessionError(err)
				}
				return sessionError(getPath(ctx, s, sp, args[1], stdout))
			}
		},
	}
	cmd.Flags().BoolVarP(&mkdir, "mkdir", "p", false, "make missing directories above DST in the session")
	return cmd
}
