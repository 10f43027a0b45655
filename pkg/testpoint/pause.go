//go:build kubefence_testpoints

package testpoint

import (
	"os"
	"os/signal"
	"sync"
	"syscall"

	"k8s.io/klog/v2"
)

// Enabled: this binary was built with BuildTag, and Env pauses it.
const Enabled = true

// Pauser stops the process once at its point.
type Pauser struct {
	point string
	once  sync.Once
}

// New is the pauser of point (Env's value); empty: it never pauses.
func New(point string) *Pauser { return &Pauser{point: point} }

// At stops the process if point is its point, the first time only, until SIGCONT.
func (p *Pauser) At(point string) {
	if p == nil || p.point == "" || point != p.point {
		return
	}
	p.once.Do(func() {
		klog.InfoS("Pausing at test point", "point", point)
		klog.Flush()
		// A stop takes effect a moment after kill returns, and this goroutine would run
		// on meanwhile, past the point (a Lease check passed before the stop, and a call
		// sent after it). So it waits to be continued.
		cont := make(chan os.Signal, 1)
		signal.Notify(cont, syscall.SIGCONT)
		defer signal.Stop(cont)
		// A test point only: if the stop fails, the test waiting for it sees no pause.
		if err := syscall.Kill(os.Getpid(), syscall.SIGSTOP); err == nil {
			<-cont
		}
	})
}
