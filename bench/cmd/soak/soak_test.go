package main

import (
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// goodReport is what jail prints for the plan of TestCheck.
const goodReport = `{"schema":"jail.result/v1","status":"exited","exit_code":0,"signal":"","wall_time_ms":35,
"stdout":"soak-1-2\n4096\n","stderr":"","stdout_bytes":14,"stderr_bytes":0,"stdout_truncated":false,"stderr_truncated":false,
"memory_peak_bytes":1269760,"pids_peak":4,"oom_kills":0,"limits_hit":[],"seccomp_denials":[],"seccomp_denials_total":0,
"error":null,"isolation":{"cgroup":"v1","seccomp":"strict"}}
`

func TestCheck(t *testing.T) {
	p := plan{id: "2", marker: "soak-1-2", sleep: 30 * time.Millisecond}
	for _, tc := range []struct {
		name    string
		status  syscall.WaitStatus // as wait4 gives it: exit code << 8
		report  string
		stderr  string
		reasons []string
	}{
		{"right", 0, goodReport, "", nil},
		{"exit status", 1 << 8, goodReport, "", []string{"jail exit status"}},
		{"jail wrote to stderr", 0, goodReport, "jail: warning\n", []string{"jail stderr"}},
		{"not json", 0, "jail: oops", "", []string{"report json"}},
		{"two documents", 0, goodReport + goodReport, "", []string{"report json"}},
		{"other stdout", 0, strings.Replace(goodReport, `soak-1-2\n4096`, `soak-1-2\n4095`, 1), "", []string{"stdout"}},
		{"stdout missing", 0, strings.Replace(goodReport, `"stdout":"soak-1-2\n4096\n",`, "", 1), "", []string{"stdout"}},
		{"status", 0, strings.Replace(goodReport, `"status":"exited"`, `"status":"signaled"`, 1), "", []string{"status"}},
		{"limit hit", 0, strings.Replace(goodReport, `"limits_hit":[]`, `"limits_hit":["pids"]`, 1), "", []string{"limits_hit"}},
		{"error", 0, strings.Replace(goodReport, `"error":null`, `"error":{"step":"x"}`, 1), "", []string{"error"}},
		{"no cgroup", 0, strings.Replace(goodReport, `"cgroup":"v1"`, `"cgroup":"none"`, 1), "", []string{"isolation.cgroup"}},
		{"shorter than the sleep", 0, strings.Replace(goodReport, `"wall_time_ms":35`, `"wall_time_ms":3`, 1), "", []string{"wall_time_ms"}},
		{"no memory peak", 0, strings.Replace(goodReport, `"memory_peak_bytes":1269760`, `"memory_peak_bytes":null`, 1), "", []string{"memory_peak_bytes"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := outcome{plan: p, status: "exit ?"}
			(&runner{}).check(&o, tc.status, []byte(tc.report), []byte(tc.stderr))
			var got []string
			for _, f := range o.failures {
				got = append(got, f.reason)
			}
			if !slices.Equal(got, tc.reasons) {
				t.Errorf("got failures %v, want reasons %v", o.failures, tc.reasons)
			}
		})
	}
}

func TestMakePlans(t *testing.T) {
	tl := measured{init: 6 * time.Millisecond, exec: 12 * time.Millisecond, tail: 5 * time.Millisecond, teardown: 3 * time.Millisecond}
	c := config{runs: 4000, killFraction: 0.1, seed: 42}
	plans := makePlans(c, "soak-1-", tl)
	t.Run("a seed gives one plan", func(t *testing.T) {
		if again := makePlans(c, "soak-1-", tl); !slices.Equal(plans, again) {
			t.Error("got two different plans from one seed")
		}
	})
	t.Run("exactly the kill fraction, every window", func(t *testing.T) {
		perWindow := map[string]int{}
		kills := 0
		for _, p := range plans {
			if p.kill {
				kills++
				perWindow[p.window]++
			}
		}
		if kills != 400 {
			t.Errorf("got %d kills of 4000, want 400", kills)
		}
		for _, w := range windows {
			if perWindow[w.name] == 0 {
				t.Errorf("got no kill in window %q", w.name)
			}
		}
	})
	t.Run("delays inside their windows", func(t *testing.T) {
		for _, p := range plans {
			if !p.kill {
				continue
			}
			lo, hi := killWindow(p.window, p.sleep, tl)
			if p.delay < lo || p.delay > hi {
				t.Errorf("run %s: got delay %v in window %s, want %v to %v", p.id, p.delay, p.window, lo, hi)
			}
			if want := p.window == "workload" || p.window == "end"; p.fromExec != want {
				t.Errorf("run %s: got fromExec %v in window %s, want %v", p.id, p.fromExec, p.window, want)
			}
		}
	})
	t.Run("sleeps from 0 to 45 ms", func(t *testing.T) {
		for _, p := range plans {
			if p.sleep < 0 || p.sleep > 45*time.Millisecond {
				t.Errorf("run %s: got sleep %v", p.id, p.sleep)
			}
		}
	})
	t.Run("a fixed delay counts from the start", func(t *testing.T) {
		c := c
		c.delay = 3 * time.Millisecond
		for _, p := range makePlans(c, "soak-1-", tl) {
			if p.kill && (p.delay != c.delay || p.fromExec) {
				t.Fatalf("run %s: got delay %v fromExec %v, want %v from the start", p.id, p.delay, p.fromExec, c.delay)
			}
		}
	})
}

func TestScript(t *testing.T) {
	p := plan{marker: "soak-9-17", sleep: 7 * time.Millisecond}
	if got, want := p.script(), "echo soak-9-17; head -c 4096 /dev/urandom | wc -c; sleep 0.007"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		name  string
		t     tracker
		begun bool
		phase string
	}{
		{"nothing seen", tracker{}, false, phaseBeforeClone},
		{"init seen", tracker{initPID: 5}, false, phaseSetup},
		{"workload forked, not exec'd", tracker{initPID: 5, workloadSeen: true}, false, phaseSetup},
		{"workload exec'd", tracker{initPID: 5, workloadSeen: true, workloadExeced: true}, false, phaseRun},
		{"workload gone", tracker{initPID: 5, workloadSeen: true, workloadExeced: true, workloadGone: true}, false, phaseTeardown},
		{"init gone", tracker{initPID: 5, initGone: true}, false, phaseTeardown},
		{"report begun", tracker{}, true, phaseTeardown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.t.classify(tc.begun); got != tc.phase {
				t.Errorf("got %q, want %q", got, tc.phase)
			}
		})
	}
}

func TestKillAt(t *testing.T) {
	p := plan{kill: true, delay: 4 * time.Millisecond, fromExec: true}
	if _, known := p.killAt(timeline{}); known {
		t.Error("got a kill time before the workload's exec was seen")
	}
	if at, known := p.killAt(timeline{exec: 10 * time.Millisecond}); !known || at != 14*time.Millisecond {
		t.Errorf("got %v, %v, want 14ms, true", at, known)
	}
	p.fromExec = false
	if at, known := p.killAt(timeline{}); !known || at != 4*time.Millisecond {
		t.Errorf("got %v, %v, want 4ms, true", at, known)
	}
}
