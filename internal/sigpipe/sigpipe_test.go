package sigpipe

import (
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// TestCatch sends the process signals whose default action would end it:
// it lives, and they arrive on the channel in order.
func TestCatch(t *testing.T) {
	ch, err := Catch(syscall.SIGHUP, syscall.SIGUSR2)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []syscall.Signal{syscall.SIGHUP, syscall.SIGUSR2, syscall.SIGHUP} {
		if err := syscall.Kill(os.Getpid(), s); err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-ch:
			if got != s {
				t.Fatalf("got %v, want %v", got, s)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%v did not arrive", s)
		}
	}
}

// TestFlood sends far more signals than the pipe and channel hold while
// goroutines run on every thread (the handler runs on whichever thread the
// kernel picks, on its signal stack): nothing blocks, the process lives,
// and the channel still works after.
func TestFlood(t *testing.T) {
	ch, err := Catch(syscall.SIGUSR1)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	for range runtime.GOMAXPROCS(0) {
		go func() {
			x := 0
			for {
				select {
				case <-stop:
					return
				default:
					x++
				}
			}
		}()
	}
	for range 20000 {
		if err := syscall.Kill(os.Getpid(), syscall.SIGUSR1); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	n := 0
	for drained := false; !drained; {
		select {
		case <-ch:
			n++
		case <-time.After(200 * time.Millisecond):
			drained = true
		}
	}
	if n == 0 {
		t.Fatal("no signal arrived")
	}
	syscall.Kill(os.Getpid(), syscall.SIGUSR1)
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("the channel stopped after a flood")
	}
	t.Logf("%d of 20000 arrived (the rest coalesced or dropped)", n)
}

func TestRefused(t *testing.T) {
	for _, s := range []syscall.Signal{syscall.SIGKILL, syscall.SIGSTOP, 0, 300} {
		if _, err := Catch(s); err == nil {
			t.Errorf("Catch(%d): no error", s)
		}
	}
}
