package testpoint

import "github.com/kubefence/kubefence/pkg/podrelease"

// Env, set in a replica's environment, names a point where the replica stops itself with
// SIGSTOP the first time it gets there; only in a binary built with BuildTag.
const Env = "KUBEFENCE_TEST_PAUSE_AT"

// BuildTag is the build tag that compiles the pause points in (go build -tags BuildTag);
// Enabled says whether this binary was built with it.
const BuildTag = "kubefence_testpoints"

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
	// a VolumeAttachment (the podrelease package's actions).
	DeletePod              = podrelease.ActionDeletePod
	DeleteVolumeAttachment = podrelease.ActionDeleteVolumeAttachment
)
