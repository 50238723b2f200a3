package hostcheck

import (
	"errors"
	"io/fs"
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestUsernsFeature(t *testing.T) {
	// forkErr is what os/exec returns when clone or the map write fails.
	forkErr := func(errno syscall.Errno) error {
		return &fs.PathError{Op: "fork/exec", Path: "/bin/true", Err: errno}
	}
	tests := []struct {
		name        string
		facts       usernsFacts
		wantVerdict Verdict
		wantFix     string
	}{
		{
			name:        "created as root",
			facts:       usernsFacts{Root: true, MaxUserNamespaces: "96365"},
			wantVerdict: OK,
		},
		{
			name:        "created unprivileged despite apparmor sysctl",
			facts:       usernsFacts{AppArmorRestrict: "1", MaxUserNamespaces: "15000"},
			wantVerdict: OK,
		},
		{
			name:        "ubuntu apparmor restriction EPERM",
			facts:       usernsFacts{ProbeErr: forkErr(syscall.EPERM), AppArmorRestrict: "1", MaxUserNamespaces: "15000"},
			wantVerdict: Missing,
			wantFix:     fixAppArmor,
		},
		{
			name:        "ubuntu apparmor restriction EACCES",
			facts:       usernsFacts{ProbeErr: forkErr(syscall.EACCES), AppArmorRestrict: "1"},
			wantVerdict: Missing,
			wantFix:     fixAppArmor,
		},
		{
			name:        "apparmor restriction does not apply to root",
			facts:       usernsFacts{Root: true, ProbeErr: forkErr(syscall.EPERM), AppArmorRestrict: "1"},
			wantVerdict: Missing,
			wantFix:     fixContainer,
		},
		{
			name:        "debian unprivileged_userns_clone off",
			facts:       usernsFacts{ProbeErr: forkErr(syscall.EPERM), UnprivilegedClone: "0"},
			wantVerdict: Missing,
			wantFix:     fixUnprivilegedClone,
		},
		{
			name:        "max_user_namespaces zero",
			facts:       usernsFacts{Root: true, ProbeErr: forkErr(syscall.ENOSPC), MaxUserNamespaces: "0"},
			wantVerdict: Missing,
			wantFix:     fixMaxUserNamespaces,
		},
		{
			name:        "max_user_namespaces reached",
			facts:       usernsFacts{ProbeErr: forkErr(syscall.ENOSPC), MaxUserNamespaces: "10"},
			wantVerdict: Missing,
			wantFix:     fixMaxUserNamespaces,
		},
		{
			name:        "kernel without user namespaces",
			facts:       usernsFacts{ProbeErr: forkErr(syscall.EINVAL)},
			wantVerdict: Missing,
			wantFix:     fixNoUserNS,
		},
		{
			name:        "container seccomp",
			facts:       usernsFacts{ProbeErr: forkErr(syscall.EPERM), MaxUserNamespaces: "15000"},
			wantVerdict: Missing,
			wantFix:     fixContainer,
		},
		{
			name: "probe binary broken",
			facts: usernsFacts{ProbeBinary: "/bin/true", ProbeErr: forkErr(syscall.ENOENT),
				ProbeBinaryErr: forkErr(syscall.ENOENT), AppArmorRestrict: "1"},
			wantVerdict: Warn,
			wantFix:     fixProbeBinary,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := usernsFeature(tt.facts)
			assert.Equal(t, nameUserNS, got.Name)
			assert.Equal(t, tt.wantVerdict, got.Verdict, "got verdict %q, want %q", got.Verdict, tt.wantVerdict)
			assert.Equal(t, tt.wantFix, got.Fix)
			assert.NotEmpty(t, got.Detail)
			assert.NotContains(t, got.Detail, "\n")
		})
	}
}

func TestUsernsFixAppArmorText(t *testing.T) {
	// The fix is copied into a terminal, so pin the parts a user pastes.
	for _, want := range []string{
		"`userns,`",
		"`abi <abi/4.0>, include <tunables/global> profile jail /usr/local/bin/jail flags=(unconfined) { userns, }`",
		"/etc/apparmor.d/jail",
		"`apparmor_parser -r /etc/apparmor.d/jail`",
		"`sysctl kernel.apparmor_restrict_unprivileged_userns=0`",
	} {
		t.Run(want, func(t *testing.T) {
			assert.Contains(t, fixAppArmor, want)
		})
	}
}

func TestUsernsDetail(t *testing.T) {
	tests := []struct {
		name  string
		facts usernsFacts
		want  string
	}{
		{
			name:  "created with sysctls",
			facts: usernsFacts{MaxUserNamespaces: "96365", AppArmorRestrict: "0"},
			want:  "created one (max_user_namespaces=96365, apparmor_restrict_unprivileged_userns=0)",
		},
		{
			name:  "created without sysctls",
			facts: usernsFacts{},
			want:  "created one (no userns sysctls)",
		},
		{
			name:  "denied",
			facts: usernsFacts{ProbeErr: errors.New("fork/exec /bin/true: operation not permitted"), UnprivilegedClone: "0"},
			want:  "clone(CLONE_NEWUSER|CLONE_NEWNS): fork/exec /bin/true: operation not permitted (unprivileged_userns_clone=0)",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, usernsFeature(tt.facts).Detail)
		})
	}
}

// TestAppArmorProfileShipped: contrib/apparmor/jail is the profile the fix
// writes inline.
func TestAppArmorProfileShipped(t *testing.T) {
	b, err := os.ReadFile("../../contrib/apparmor/jail")
	require.NoError(t, err)
	for _, want := range []string{"abi <abi/4.0>,", "include <tunables/global>", "profile jail /usr/local/bin/jail flags=(unconfined) {", "  userns,"} {
		assert.Contains(t, string(b), want)
	}
	assert.Contains(t, fixAppArmor, "contrib/apparmor/jail")
}
