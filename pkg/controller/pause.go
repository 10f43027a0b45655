package controller

import (
	"os"
	"os/signal"
	"sync"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/kubefence/kubefence/pkg/remediate"
)

// PauseAtEnv, set in a replica's environment, names a point where the replica stops
// itself with SIGSTOP the first time it gets there: the end-to-end tests of leader
// changes freeze a leader at an exact step of an incident and resume it after a standby
// took over. Unset, nothing pauses.
const PauseAtEnv = "KUBEFENCE_TEST_PAUSE_AT"

// Pause points.
const (
	// PauseAfterCreate: the NodeFence was just created, nothing else written.
	PauseAfterCreate = "after-create"
	// PauseBeforeFenceCall: the attempt is written ahead, the Fence call not sent.
	PauseBeforeFenceCall = "before-fence-call"
	// PauseAfterFenceCall: the Fence call returned; its answer is not saved.
	PauseAfterFenceCall = "after-fence-call"
	// PauseAfterFenced: the fence is verified (saved with the release's end, so the record
	// still says Fencing); nothing released yet.
	PauseAfterFenced = "after-fenced"
	// PauseBeforeRecord: the release is done (taints, pods, attachments) and not yet
	// recorded: where a storm's release gate holds the record back.
	PauseBeforeRecord = "before-record"
	// PauseBeforeUnfence: recovery's Unfence is on record and the Lease was read; the
	// call is not sent.
	PauseBeforeUnfence = "before-unfence"
	// PauseBeforePowerOn: the Reboot action's power on is on record and the Lease was
	// read; the call is not sent.
	PauseBeforePowerOn = "before-power-on"
	// PauseDeletePod, PauseDeleteVolumeAttachment: the release is about to delete a pod,
	// a VolumeAttachment (the remediate package's actions).
	PauseDeletePod              = remediate.ActionDeletePod
	PauseDeleteVolumeAttachment = remediate.ActionDeleteVolumeAttachment
)

// pauser stops the process once at its point.
type pauser struct {
	point string
	once  sync.Once
}

func (p *pauser) at(point string) {
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
