package jail

import (
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jailrt/jail/netns"
)

// netnsRetry is how long the filler waits after it could not make a
// namespace (too many, out of memory) before it tries again.
const netnsRetry = time.Second

// NewNetnsPool makes a pool of size namespaces (DefaultNetnsPoolSize for
// 0), the first one now: an error from it (not root: wrapping
// ErrNotSupported) means there is no pool. The rest are made by a
// goroutine, which also replaces each one taken, until Close.
func NewNetnsPool(size int) (*NetnsPool, error) {
	if size < 0 {
		return nil, fmt.Errorf("netns pool size %d: negative", size)
	}
	if size == 0 {
		size = DefaultNetnsPoolSize
	}
	first, err := netns.NewEmpty()
	if err != nil {
		if errors.Is(err, unix.EPERM) {
			return nil, &FeatureError{Feature: "netns pool", Reason: "making a network namespace outside a user namespace needs root: " + err.Error()}
		}
		return nil, err
	}
	p := &NetnsPool{size: size, wake: make(chan struct{}, 1), done: make(chan struct{}), ready: []*os.File{first}, made: 1}
	go p.fill()
	return p, nil
}

// fill keeps the pool full until Close.
func (p *NetnsPool) fill() {
	defer close(p.done)
	for {
		p.mu.Lock()
		need := !p.closed && len(p.ready) < p.size
		p.mu.Unlock()
		if !need {
			if _, ok := <-p.wake; !ok {
				return
			}
			continue
		}
		f, err := netns.NewEmpty()
		p.mu.Lock()
		p.err = err
		if err == nil {
			if p.closed {
				f.Close()
			} else {
				p.ready = append(p.ready, f)
				p.made++
			}
		}
		p.mu.Unlock()
		if err != nil {
			select {
			case _, ok := <-p.wake:
				if !ok {
					return
				}
			case <-time.After(netnsRetry):
			}
		}
	}
}
