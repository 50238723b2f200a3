package client

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFollow: keepalives and a lost range are not events of the exec;
// a gap otherwise, or a stream without its end, is an error.
func TestFollow(t *testing.T) {
	stream := strings.Join([]string{
		`{"seq":1,"event":"start","exec":"x1"}`,
		`{"event":"keepalive"}`,
		`{"event":"lost","from":2,"to":3}`,
		`{"seq":4,"event":"stdout","data":"a"}`,
		`{"seq":5,"event":"stderr","data":"/w==","encoding":"base64"}`,
		`{"seq":6,"event":"exit","result":{"exit_code":3}}`,
	}, "\n") + "\n"
	var out, errs bytes.Buffer
	res, err := follow(strings.NewReader(stream), 1, &out, &errs)
	require.NoError(t, err)
	assert.Equal(t, 3, res.ExitCode)
	assert.Equal(t, "a", out.String())
	assert.Equal(t, "\xff", errs.String())

	_, err = follow(strings.NewReader(`{"seq":1,"event":"start"}`+"\n"+`{"seq":3,"event":"stdout","data":"a"}`+"\n"), 1, nil, nil)
	assert.ErrorContains(t, err, "event 2 came as 3")
	_, err = follow(strings.NewReader(`{"seq":1,"event":"start"}`+"\n"), 1, nil, nil)
	assert.ErrorContains(t, err, "without its exit event")
}
