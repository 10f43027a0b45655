package controller

import (
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/record"
)

// confirmedSink sends an Event only while a leader Lease check passed within the renew
// deadline (safety invariant 2: every mutation follows a Lease check). The broadcaster
// sends Events from a queue of its own: a leader paused after it queued one (SIGSTOP, a
// frozen VM) would otherwise send it on waking, after a standby took over. Such an
// Event is dropped; the refusal is a StatusError, which the broadcaster does not retry.
type confirmedSink struct {
	record.EventSink
	confirmed func() bool
}

func (s confirmedSink) Create(e *corev1.Event) (*corev1.Event, error) {
	if !s.confirmed() {
		return nil, errUnconfirmed()
	}
	return s.EventSink.Create(e)
}

func (s confirmedSink) Update(e *corev1.Event) (*corev1.Event, error) {
	if !s.confirmed() {
		return nil, errUnconfirmed()
	}
	return s.EventSink.Update(e)
}

func (s confirmedSink) Patch(old *corev1.Event, data []byte) (*corev1.Event, error) {
	if !s.confirmed() {
		return nil, errUnconfirmed()
	}
	return s.EventSink.Patch(old, data)
}

func errUnconfirmed() error {
	return apierrors.NewServiceUnavailable("event dropped: this replica's leader Lease was not confirmed within the renew deadline")
}
