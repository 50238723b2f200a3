package procfs

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

func TestParseStat(t *testing.T) {
	for _, tc := range []struct {
		name string
		stat string
		want Stat
		ok   bool
	}{
		{"plain", "42 (sleep) S 7 42 7 0 -1 4194560 99 0 0 0 0 0 0 0 20 0 1 0 12345 2265088 128", Stat{'S', 7, 12345}, true},
		{"comm with blanks and parentheses", "9 (a) b (c) Z 1 9 9 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 777 0 0", Stat{'Z', 1, 777}, true},
		{"truncated", "9 (x) S 1 9", Stat{}, false},
		{"no parenthesis", "garbage", Stat{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := ParseStat([]byte(tc.stat))
			if ok != tc.ok || got != tc.want {
				t.Errorf("got %+v, %v, want %+v, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestReadStatSelf(t *testing.T) {
	st, ok := ReadStat(os.Getpid())
	if !ok {
		t.Fatal("got no stat for this process")
	}
	if st.PPID != os.Getppid() {
		t.Errorf("got ppid %d, want %d", st.PPID, os.Getppid())
	}
}

func TestReadIdentity(t *testing.T) {
	self, err := ReadIdentity("self")
	if err != nil {
		t.Fatal(err)
	}
	byPid, err := ReadIdentity(strconv.Itoa(os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	st, _ := ReadStat(os.Getpid())
	// The state is the main thread's: running, or sleeping while another
	// thread runs this test (as under -race); never a zombie's.
	if self.StartTime != byPid.StartTime || self.PIDNS != byPid.PIDNS || self.StartTime != st.StartTime || self.PIDNS == 0 || (self.State != 'R' && self.State != 'S') {
		t.Errorf("got %+v by self and %+v by pid, want one live identity with start time %d", self, byPid, st.StartTime)
	}
	if _, err := ReadIdentity("999999999"); err == nil {
		t.Error("got an identity for a pid that cannot exist")
	}
}

func TestSelfPIDNS(t *testing.T) {
	ns, err := SelfPIDNS()
	if err != nil {
		t.Fatal(err)
	}
	self, err := ReadIdentity("self")
	if err != nil || ns == 0 || ns != self.PIDNS {
		t.Errorf("got %d, want this process's PID namespace %d (%v)", ns, self.PIDNS, err)
	}
}

func TestOwnerGone(t *testing.T) {
	tag := OwnerTag()
	f := strings.Split(tag, ":")
	if len(f) != 4 {
		t.Fatalf("OwnerTag %q", tag)
	}
	boot, ns, start := f[0], f[1], f[3]
	for _, tc := range []struct {
		tag       string
		otherBoot bool
		gone      bool
	}{
		{tag, true, false}, // this process
		{boot + ":" + ns + ":2147483646:" + start, true, true}, // no such pid
		{boot + ":" + ns + ":" + f[2] + ":1", true, true},      // the pid holds another process
		{boot + ":1:" + f[2] + ":" + start, true, false},       // another PID namespace: cannot judge
		{"other-boot:" + ns + ":1:1", true, true},              // a local engine after a reboot
		{"other-boot:" + ns + ":1:1", false, false},            // a cluster: another machine's
		{"garbage", true, false},
		{"", true, false},
	} {
		if got := OwnerGone(tc.tag, tc.otherBoot); got != tc.gone {
			t.Errorf("OwnerGone(%q, %v) = %v, want %v", tc.tag, tc.otherBoot, got, tc.gone)
		}
	}
}
