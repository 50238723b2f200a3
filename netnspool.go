package jail

import (
	"os"
	"sync"
)

// NetnsPool keeps network namespaces made ahead, each with only lo, up,
// for the jails of a long-lived program ([Cmd.NetnsPool]): a jail whose
// network is its own with nothing but lo (mode none, the default) joins
// one at its clone instead of having the kernel make one then, which is
// most of the clone's cost (bench/README.md: about 0.3 ms of a run on the
// 2-core VMs jail is measured on). A background goroutine keeps Size of
// them ready; each serves one jail, which holds it from its clone on.
//
// Such a namespace belongs to the host's user namespace, not the jail's,
// so nothing in the jail holds a capability over it (the workload never
// does; the jail's PID 1 does not need one: lo is up already). Requires
// root: NewNetnsPool returns an error wrapping ErrNotSupported otherwise.
type NetnsPool struct {
	size int
	wake chan struct{}
	done chan struct{}

	mu     sync.Mutex
	ready  []*os.File
	closed bool
	made   int64
	taken  int64
	misses int64
	err    error // the filler's last error, while it backs off
}

// DefaultNetnsPoolSize is the size NewNetnsPool takes for 0.
const DefaultNetnsPoolSize = 4

// NetnsPoolStats says what a pool did.
type NetnsPoolStats struct {
	// Ready is how many namespaces wait now.
	Ready int
	// Made, Taken and Misses count the namespaces made, those jails
	// joined, and the jails that found none ready (and made their own).
	Made, Taken, Misses int64
	// Err is why the last namespace could not be made, if it could not.
	Err error
}

// Stats returns the pool's figures.
func (p *NetnsPool) Stats() NetnsPoolStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return NetnsPoolStats{Ready: len(p.ready), Made: p.made, Taken: p.taken, Misses: p.misses, Err: p.err}
}

// take returns a ready namespace, which the caller closes, or nil.
func (p *NetnsPool) take() *os.File {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.ready) == 0 || p.closed {
		p.misses++
		return nil
	}
	f := p.ready[len(p.ready)-1]
	p.ready = p.ready[:len(p.ready)-1]
	p.taken++
	select {
	case p.wake <- struct{}{}:
	default:
	}
	return f
}

// Close stops the pool and closes the namespaces still ready (the kernel
// frees each once no jail holds it). Jails that took one are not
// affected.
func (p *NetnsPool) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	ready := p.ready
	p.ready = nil
	p.mu.Unlock()
	close(p.wake)
	<-p.done
	for _, f := range ready {
		f.Close()
	}
	return nil
}
