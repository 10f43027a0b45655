// Package testpoint stops a process at a named point of an incident, once, for the
// end-to-end tests of leader changes: they freeze a leader at an exact step and resume it
// after a standby took over. Unset, nothing pauses.
package testpoint

import (
	"os"
	"os/signal"
	"sync"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/kubefence/kubefence/pkg/remediate"
)

// Env, set in a replica's environment, names a point where the replica stops itself with
// SIGSTOP the first time it gets there.
const Env = "KUBEFENCE_TEST_PAUSE_AT"

// The points.
const (
	// AfterCreate: the NodeFence was just created, nothing else written.
	AfterCreate = "after-create"
	// BeforeFenceCall: the attempt is written ahead, the Fence call not sent.
	BeforeFenceCall = "before-fence-call"
	// AfterFenceCall: the Fence call returned; its answer is not saved.
	AfterFenceCall = "after-fence-call"
	// AfterFenced: the fence is verified (saved with the release's end, so the record
	// still says Fencing); nothing released yet.
	AfterFenced = "after-fenced"
	// BeforeRecord: the release is done (taints, pods, attachments) and not yet
	// recorded: where a storm's release gate holds the record back.
	BeforeRecord = "before-record"
	// BeforeUnfence: recovery's Unfence is on record and the Lease was read; the
	// call is not sent.
	BeforeUnfence = "before-unfence"
	// BeforePowerOn: the Reboot action's power on is on record and the Lease was
	// read; the call is not sent.
	BeforePowerOn = "before-power-on"
	// DeletePod, DeleteVolumeAttachment: the release is about to delete a pod,
	// a VolumeAttachment (the remediate package's actions).
	DeletePod              = remediate.ActionDeletePod
	DeleteVolumeAttachment = remediate.ActionDeleteVolumeAttachment
)

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
