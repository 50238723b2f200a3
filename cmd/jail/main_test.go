package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestRunFastPath: `jail run` builds only the run command; what it prints
// and returns must be what the whole tree gives. None of these runs a jail.
func TestRunFastPath(t *testing.T) {
	execute := func(args []string, full bool) (stdout, stderr, err string) {
		var out, errOut bytes.Buffer
		treeArgs := args
		if full {
			treeArgs = nil
		}
		root := newRoot(&out, &errOut, treeArgs)
		root.SetArgs(args)
		if e := root.Execute(); e != nil {
			err = e.Error()
		}
		return out.String(), errOut.String(), err
	}
	for _, args := range [][]string{
		{"run", "--help"},
		{"run", "-h"},
		{"run"},
		{"run", "--bogus"},
		{"run", "--timeout", "soon", "--", "true"},
		{"run", "--profile", "nonexistent", "--", "true"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			fastOut, fastErr, fastRet := execute(args, false)
			fullOut, fullErr, fullRet := execute(args, true)
			assert.NotEmpty(t, fullOut+fullErr+fullRet)
			assert.Equal(t, fullOut, fastOut)
			assert.Equal(t, fullErr, fastErr)
			assert.Equal(t, fullRet, fastRet)
		})
	}
	assert.Len(t, newRoot(nil, nil, []string{"run"}).Commands(), 1, "only run is built")
}
