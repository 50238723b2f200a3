package main

import (
	"os"

	"golang.org/x/sys/unix"

	"github.com/jailrt/jail"
)

// terminal is the caller's terminal for `jail run --tty`.
type terminal struct {
	fd    int
	saved *unix.Termios
}

// openTerminal returns the caller's terminal on fd, or nil when fd is not
// one.
func openTerminal(fd int) *terminal {
	t, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return nil
	}
	return &terminal{fd: fd, saved: t}
}

// size returns the terminal's window size, or 24x80 when it has none.
func (t *terminal) size() jail.WindowSize {
	if t != nil {
		if ws, err := unix.IoctlGetWinsize(t.fd, unix.TIOCGWINSZ); err == nil && ws.Row > 0 && ws.Col > 0 {
			return jail.WindowSize{Rows: ws.Row, Cols: ws.Col}
		}
	}
	return jail.WindowSize{Rows: 24, Cols: 80}
}

// makeRaw puts the terminal into raw mode, as cfmakeraw(3) does: every key
// goes to the jail's terminal, whose own line discipline echoes, edits and
// turns ^C into SIGINT for the workload.
func (t *terminal) makeRaw() error {
	raw := *t.saved
	raw.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	raw.Oflag &^= unix.OPOST
	raw.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	raw.Cflag &^= unix.CSIZE | unix.PARENB
	raw.Cflag |= unix.CS8
	raw.Cc[unix.VMIN], raw.Cc[unix.VTIME] = 1, 0
	return unix.IoctlSetTermios(t.fd, unix.TCSETS, &raw)
}

// restore puts back the terminal's mode as it was.
func (t *terminal) restore() {
	_ = unix.IoctlSetTermios(t.fd, unix.TCSETS, t.saved)
}

// winch is the signal a terminal sends when it changes size.
var winch os.Signal = unix.SIGWINCH
