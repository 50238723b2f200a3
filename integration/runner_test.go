package integration

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jailrt/jail"
	"github.com/jailrt/jail/internal/schematest"
)

// program is one language's test code: hello world reading stdin, a
// compile error (compiled languages), a runtime error, a loop for the
// timeout and an allocation for the OOM.
type program struct {
	hello, compileError, runtimeError, loop, alloc string
}

var programs = map[string]program{
	"python": {
		hello:        "import sys\nprint('hello', sys.stdin.read().strip())\n",
		runtimeError: "raise SystemExit(3)\n",
		loop:         "while True: pass\n",
		alloc:        "a = bytearray(512 << 20)\nprint(len(a))\n",
	},
	"node": {
		hello:        "let s = require('fs').readFileSync(0, 'utf8').trim(); console.log('hello', s)\n",
		runtimeError: "process.exit(3)\n",
		loop:         "for (;;) {}\n",
		alloc:        "const a = Buffer.alloc(512 << 20, 1); console.log(a.length)\n",
	},
	"typescript": {
		hello:        "const s: string = require('fs').readFileSync(0, 'utf8').trim(); console.log('hello', s)\n",
		runtimeError: "process.exit(3 as number)\n",
		loop:         "for (;;) {}\n",
		alloc:        "const a: Buffer = Buffer.alloc(512 << 20, 1); console.log(a.length)\n",
	},
	"sh": {
		hello:        "read x; echo hello $x\n",
		runtimeError: "exit 3\n",
		loop:         "while :; do :; done\n",
		alloc:        "x=$(head -c 600000000 /dev/zero | tr '\\0' a); echo ${#x}\n",
	},
	"bash": {
		hello:        "read -r x; echo hello $x\n",
		runtimeError: "exit 3\n",
		loop:         "while :; do :; done\n",
		alloc:        "x=$(head -c 600000000 /dev/zero | tr '\\0' a); echo ${#x}\n",
	},
	"c": {
		hello:        "#include <stdio.h>\nint main(void){char b[64]; if(!fgets(b,sizeof b,stdin)) return 9; printf(\"hello %s\", b); return 0;}\n",
		compileError: "int main(void){ return undeclared; }\n",
		runtimeError: "#include <stdlib.h>\nint main(void){ exit(3); }\n",
		loop:         "int main(void){ for(;;); }\n",
		alloc:        "#include <stdlib.h>\n#include <stdio.h>\nint main(void){ size_t n = 512u<<20; volatile char *p = malloc(n); long s = 0; for (size_t i = 0; i < n; i += 4096) p[i] = (char)i; for (size_t i = 0; i < n; i += 4096) s += p[i]; printf(\"%ld\\n\", s); }\n",
	},
	"cpp": {
		hello:        "#include <iostream>\n#include <string>\nint main(){ std::string s; std::getline(std::cin, s); std::cout << \"hello \" << s << \"\\n\"; }\n",
		compileError: "int main(){ return undeclared; }\n",
		runtimeError: "#include <cstdlib>\nint main(){ std::exit(3); }\n",
		loop:         "int main(){ for(;;); }\n",
		alloc:        "#include <vector>\n#include <iostream>\nint main(){ std::vector<char> v(512<<20, 1); std::cout << v.size() << \"\\n\"; }\n",
	},
	"go": {
		hello:        "package main\nimport (\"bufio\";\"fmt\";\"os\")\nfunc main(){ s, _ := bufio.NewReader(os.Stdin).ReadString('\\n'); fmt.Print(\"hello \", s) }\n",
		compileError: "package main\nfunc main(){ undeclared() }\n",
		runtimeError: "package main\nimport \"os\"\nfunc main(){ os.Exit(3) }\n",
		loop:         "package main\nfunc main(){ for {} }\n",
		alloc:        "package main\nimport \"fmt\"\nfunc main(){ b := make([]byte, 512<<20); for i := range b { b[i] = 1 }; fmt.Println(len(b)) }\n",
	},
	"rust": {
		hello:        "use std::io::Read;\nfn main(){ let mut s = String::new(); std::io::stdin().read_to_string(&mut s).unwrap(); println!(\"hello {}\", s.trim()); }\n",
		compileError: "fn main(){ undeclared(); }\n",
		runtimeError: "fn main(){ std::process::exit(3); }\n",
		loop:         "fn main(){ loop {} }\n",
		alloc:        "fn main(){ let v = vec![1u8; 512 << 20]; println!(\"{}\", v.len()); }\n",
	},
}

// languages is what `jail languages --json` says of this host.
func languages(t *testing.T) map[string]bool {
	t.Helper()
	r := runJail(t, "languages", "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var list []struct {
		Language  string
		Available bool
		Reason    string
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &list))
	out := map[string]bool{}
	for _, l := range list {
		out[l.Language] = l.Available
		if !l.Available {
			t.Logf("%s: not on this host: %s", l.Language, l.Reason)
		}
	}
	return out
}

// TestLanguageRunners runs every runner whose toolchain this host has:
// hello world reading stdin, a compile error, a runtime error, a timeout
// and an OOM, all under the strict seccomp policy.
func TestLanguageRunners(t *testing.T) {
	avail := languages(t)
	require.Len(t, avail, len(programs), "a test program for every runner")
	for _, lang := range []string{"python", "node", "sh", "bash", "c", "cpp", "go", "rust"} { // .ci/run installs them
		if os.Getenv("CI") != "" {
			require.True(t, avail[lang], "CI has the %s toolchain", lang)
		}
	}
	for lang, prog := range programs {
		t.Run(lang, func(t *testing.T) {
			dir := hostDir(t)
			if !avail[lang] && lang == "typescript" {
				// Refused, never run as JavaScript.
				f := filepath.Join(dir, "main.ts")
				require.NoError(t, os.WriteFile(f, []byte(prog.hello), 0o644))
				r := runJail(t, "run", "--language", lang, "--code", f)
				assert.Equal(t, jail.ExitSetupError, r.code)
				assert.Empty(t, r.stdout)
				assert.Contains(t, r.stderr, "fails the runner's check")
				return
			}
			if !avail[lang] {
				t.Skipf("no %s toolchain here (jail languages)", lang)
			}
			src := func(name, code string) string {
				f := filepath.Join(dir, name)
				require.NoError(t, os.WriteFile(f, []byte(code), 0o644))
				return f
			}
			in := src("in.txt", "world\n")
			compiled := prog.compileError != ""
			var extra []string
			if compiled && unprivileged {
				// No cgroup for the compile's memory and pids limits:
				// refused, unless the caller says to go without.
				r := runJail(t, "run", "--language", lang, "--code", src("hello", prog.hello))
				assert.Equal(t, jail.ExitSetupError, r.code)
				assert.Contains(t, r.stderr, "compile_limits")
				extra = []string{"--allow-unenforced"}
			}
			run := func(args ...string) (jail.Result, result) {
				return runJSON(t, append(append([]string{"--language", lang}, extra...), args...)...)
			}
			res, r := run("--code", src("hello", prog.hello), "--stdin", in)
			require.Equal(t, 0, r.code, "stderr: %s; result: %+v", r.stderr, res)
			assert.Equal(t, "hello world\n", res.Stdout)
			assert.Equal(t, lang, res.Language)
			assert.Equal(t, "strict", res.Isolation.Seccomp)
			if compiled {
				require.NotNil(t, res.Compile, "a compiled language's result holds its compile's")
				assert.Equal(t, jail.StatusExited, res.Compile.Status)
				assert.Equal(t, "strict", res.Compile.Isolation.Seccomp, "the compile is jailed too")
			} else {
				assert.Nil(t, res.Compile)
			}

			res, _ = run("--code", src("rt", prog.runtimeError))
			assert.Equal(t, jail.StatusExited, res.Status)
			assert.Equal(t, 3, res.ExitCode)

			if compiled {
				res, r = run("--code", src("ce", prog.compileError))
				assert.Equal(t, jail.StatusCompileError, res.Status)
				assert.Equal(t, 1, r.code)
				require.NotNil(t, res.Compile)
				assert.Contains(t, res.Compile.Stderr+res.Compile.Stdout, "undeclared", "the compiler's output is kept")
				var raw any
				require.NoError(t, json.Unmarshal([]byte(r.stdout), &raw))
				assert.NoError(t, schematest.Validate(schematest.Compile(t, schemaDir(), "result"), raw), "a compile_error result, with its compile's nested, is as schema/result.schema.json says")
				assert.Empty(t, res.Stdout)
			}

			res, r = run("--code", src("loop", prog.loop), "--timeout", "1s")
			assert.Equal(t, jail.StatusTimedOut, res.Status, "%+v", res)
			assert.Equal(t, 124, r.code)

			if !unprivileged { // a cgroup: root's
				res, _ = runJSON(t, "--language", lang, "--code", src("alloc", prog.alloc), "--memory", "128M", "--timeout", "30s")
				assert.Equal(t, jail.StatusOOMKilled, res.Status, "stdout %q stderr %q", res.Stdout, res.Stderr)
			}
		})
	}
	assert.Empty(t, codeDirs(t), "every job's code directory is removed")
}

// codeDirs lists the runners' code directories in jail's temp dir
// (jailCmd gives jail no TMPDIR: /tmp).
func codeDirs(t *testing.T) []string {
	t.Helper()
	m, err := filepath.Glob("/tmp/jail-code-*")
	require.NoError(t, err)
	return m
}

// TestRunnerCompileAttack: a hostile toolchain (here the code itself is
// the compile) can write nothing of the host: not the code, not a file
// beside it, not the artifact's file (no chmod to setuid), and its
// artifact cannot outgrow its bound: the compile is killed.
func TestRunnerCompileAttack(t *testing.T) {
	dir := hostDir(t)
	profile := filepath.Join(dir, "evil.yaml")
	require.NoError(t, os.WriteFile(profile, []byte(`extends: strict
runner:
  language: evil
  source: main.sh
  compile: [sh, /code/main.sh, /tmp/out]
  artifact: /tmp/out
  compile_limits: {artifact_max_bytes: 1Mi, timeout: 20s}
  run: [sh, -c, "wc -c < /code/out; ls /code; stat -c %a /code/out"]
  version: ["true"]
`), 0o644))
	code := filepath.Join(dir, "main.sh")
	write := func(script string) { require.NoError(t, os.WriteFile(code, []byte(script), 0o644)) }
	var extra []string
	if unprivileged {
		extra = []string{"--allow-unenforced"}
	}

	write(`echo pwned > /code/main.sh && echo rewrote the code >&2
touch /code/extra && echo added a file >&2
chmod 4755 /code/main.sh && echo made it setuid >&2
cat /dev/null > /code/out && echo wrote the artifact file >&2
head -c 4096 /dev/zero > "$1"
`)
	res, r := runJSON(t, append([]string{"--profile", profile, "--code", code}, extra...)...)
	require.Equal(t, 0, r.code, r.stderr)
	require.NotNil(t, res.Compile)
	for _, bad := range []string{"rewrote the code", "added a file", "made it setuid", "wrote the artifact file"} {
		assert.NotContains(t, res.Compile.Stderr, bad)
	}
	assert.Equal(t, int64(4096), res.Compile.StdoutBytes, "the artifact came out on the compile's stdout")
	assert.Empty(t, res.Compile.Stdout, "and is not kept as output")
	mode := "750"
	if unprivileged {
		mode = "700"
	}
	assert.Equal(t, "4096\nmain.sh\nout\n"+mode+"\n", res.Stdout, "the run sees the code and the artifact, nothing else")

	// A 3 MB artifact, bound 1 MiB: its write in the compile's /tmp
	// ends at RLIMIT_FSIZE.
	write("head -c 3000000 /dev/zero > \"$1\"\n")
	res, r = runJSON(t, append([]string{"--profile", profile, "--code", code}, extra...)...)
	assert.Equal(t, jail.StatusCompileError, res.Status)
	assert.Equal(t, 1, r.code)
	require.NotNil(t, res.Compile)
	assert.Equal(t, 128+int(syscall.SIGXFSZ), res.Compile.ExitCode, "%+v", res.Compile)

	// Straight into the stdout the artifact crosses by, through the
	// wrapper shell's descriptors in /proc: refused (root's jails, whose
	// processes are not dumpable to each other), or reached, and then
	// jail's own bound on the artifact kills the compile past 1 MiB.
	write("for f in /proc/$PPID/fd/*; do head -c 3000000 /dev/zero > \"$f\" 2>/dev/null; done\nhead -c 1 /dev/zero > \"$1\"\n")
	res, r = runJSON(t, append([]string{"--profile", profile, "--code", code}, extra...)...)
	require.NotNil(t, res.Compile, r.stderr)
	if res.Status == jail.StatusCompileError {
		require.NotNil(t, res.Compile.Error, "%+v", res.Compile)
		assert.Equal(t, "artifact", res.Compile.Error.Step)
		assert.Contains(t, res.Compile.Error.Message, "over 1048576 bytes")
	} else {
		assert.Equal(t, 0, r.code, r.stderr)
		assert.Equal(t, int64(1), res.Compile.StdoutBytes, "only the artifact crossed")
	}
	t.Logf("writing to the artifact's pipe through /proc: %s", res.Status)
	assert.Empty(t, codeDirs(t))
}

// TestRunnerCodeDirectory: while a job runs, its directory on the host is
// the jails' and this process's only (root: root's, the jails' host group
// may read; unprivileged: 0700), and a job whose jail process was killed
// leaves one that jail check --clean removes.
func TestRunnerCodeDirectory(t *testing.T) {
	dir := hostDir(t)
	code := filepath.Join(dir, "main.sh")
	require.NoError(t, os.WriteFile(code, []byte("echo started; sleep 30\n"), 0o644))
	c := jailCmd(t.Context(), "run", "--language", "sh", "--code", code)
	out, err := c.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, c.Start())
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "started\n", line)
	dirs := codeDirs(t)
	require.Len(t, dirs, 1)
	want := map[string]os.FileMode{dirs[0]: 0o710, filepath.Join(dirs[0], "code"): 0o750, filepath.Join(dirs[0], "code", "main.sh"): 0o640}
	if unprivileged {
		want = map[string]os.FileMode{dirs[0]: 0o700, filepath.Join(dirs[0], "code"): 0o700, filepath.Join(dirs[0], "code", "main.sh"): 0o600}
	}
	for p, mode := range want {
		st, err := os.Stat(p)
		require.NoError(t, err)
		assert.Equal(t, mode, st.Mode().Perm(), p)
		if !unprivileged {
			sys := st.Sys().(*syscall.Stat_t)
			assert.Equal(t, uint32(0), sys.Uid, "%s stays root's", p)
			assert.Equal(t, uint32(jail.DefaultHostUID), sys.Gid, "%s: the jails' host group", p)
		}
	}
	require.NoError(t, c.Process.Signal(syscall.SIGKILL)) // jail itself: no Close
	_ = c.Wait()
	inits := ourInits()
	for end := time.Now().Add(10 * time.Second); len(inits) > 0 && time.Now().Before(end); inits = ourInits() {
		time.Sleep(20 * time.Millisecond)
	}
	require.Empty(t, inits, "the jail ends with jail:%s", describeProcs(inits))
	assert.Equal(t, dirs, codeDirs(t), "left behind by the killed jail")
	check := runJail(t, "check", "--clean")
	assert.Equal(t, 0, check.code, check.stderr)
	assert.Contains(t, check.stdout, "removed "+dirs[0])
	assert.Empty(t, codeDirs(t))
}

// TestRunnerErrors: bad input is one line and exit 125.
func TestRunnerErrors(t *testing.T) {
	dir := hostDir(t)
	code := filepath.Join(dir, "m.py")
	require.NoError(t, os.WriteFile(code, []byte("print(1)\n"), 0o644))
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--language", "cobol", "--code", code}, `--language "cobol": no such runner`},
		{[]string{"--language", "python"}, "--code: missing"},
		{[]string{"--language", "python", "--code", filepath.Join(dir, "nope.py")}, `--code "` + filepath.Join(dir, "nope.py") + `"`},
		{[]string{"--profile", "strict", "--code", code}, "profile strict has no runner"},
		{[]string{"--language", "python", "--profile", "strict", "--code", code}, "--language: not with --profile"},
	} {
		r := runJail(t, append([]string{"run"}, tc.args...)...)
		assert.Equal(t, jail.ExitSetupError, r.code, "%v", tc.args)
		assert.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line: %q", r.stderr)
		assert.Contains(t, r.stderr, tc.want)
	}
}

// TestRunnerInterruptedCompile: SIGINT to jail while a runner compiles
// ends the compile and jail (130, "interrupted while compiling"), and the
// code's directory goes with them.
func TestRunnerInterruptedCompile(t *testing.T) {
	dir := hostDir(t)
	profile := filepath.Join(dir, "slow.yaml")
	require.NoError(t, os.WriteFile(profile, []byte(`extends: strict
runner:
  language: slow
  source: main.sh
  compile: [sh, /code/main.sh, /tmp/out]
  artifact: /tmp/out
  run: ["true"]
  version: ["true"]
`), 0o644))
	code := filepath.Join(dir, "main.sh")
	require.NoError(t, os.WriteFile(code, []byte("echo compiling >&2; sleep 30\n"), 0o644))
	args := []string{"run", "--profile", profile, "--code", code}
	if unprivileged {
		args = append(args, "--allow-unenforced")
	}
	before := codeDirs(t)
	c := jailCmd(t.Context(), args...)
	var stderr strings.Builder
	c.Stderr = &stderr
	require.NoError(t, c.Start())
	deadline := time.Now().Add(20 * time.Second)
	for len(codeDirs(t)) == len(before) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	require.Greater(t, len(codeDirs(t)), len(before), "the code's directory was made")
	time.Sleep(200 * time.Millisecond) // the compile runs
	require.NoError(t, c.Process.Signal(syscall.SIGINT))
	err := c.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, stderr.String())
	assert.Equal(t, 130, ee.ExitCode(), stderr.String())
	assert.Contains(t, stderr.String(), "interrupted while compiling")
	assert.Equal(t, before, codeDirs(t), "the code's directory is removed")
}
