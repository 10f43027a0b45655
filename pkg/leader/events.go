package leader

import (
	"context"
	"time"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
)

// confirmedSink sends an Event only while a leader Lease check passed within the renew
// deadline (safety invariant 2: every mutation follows a Lease check). The broadcaster
// sends Events from a queue of its own: a leader paused after it queued one (SIGSTOP, a
// frozen VM) would otherwise send it on waking, after a standby took over. An Event whose
// confirmation ran out waits for a check of its own (reconfirm): a queue a thousand
// incidents deep can take longer to send than a renew deadline, and its Events are no
// less legitimate. When that check fails, the
// Event is dropped; the refusal is a StatusError, which the broadcaster does not retry.
// Each request carries the confirmation's end as its deadline, so a replica paused
// between the check and the send mostly abandons the request on waking. It cannot rule
// it out: a process stopped between its last look at the deadline and the socket write
// sends on waking, and an Event has no precondition the API server could check
// (docs/safety-model.md, "What a client cannot rule out").
type confirmedSink struct {
	events typedcorev1.EventInterface
	// until is when the last Lease check stops vouching for this replica.
	until func() time.Time
	// reconfirm checks the Lease again; nil: an unconfirmed Event is dropped.
	reconfirm func(ctx context.Context) error
}

// reconfirmTimeout bounds the Lease check an Event waits for.
const reconfirmTimeout = 10 * time.Second

// send runs one request under the confirmation's deadline, or refuses it.
func (s confirmedSink) send(do func(ctx context.Context) (*corev1.Event, error)) (*corev1.Event, error) {
	until := s.until()
	if !time.Now().Before(until) && s.reconfirm != nil {
		ctx, cancel := context.WithTimeout(context.Background(), reconfirmTimeout)
		err := s.reconfirm(ctx)
		cancel()
		if err != nil {
			return nil, errUnconfirmed()
		}
		until = s.until()
	}
	if !time.Now().Before(until) {
		return nil, errUnconfirmed()
	}
	ctx, cancel := context.WithDeadline(context.Background(), until)
	defer cancel()
	e, err := do(ctx)
	if err != nil && ctx.Err() != nil {
		return nil, errUnconfirmed()
	}
	return e, err
}

func (s confirmedSink) Create(e *corev1.Event) (*corev1.Event, error) {
	return s.send(func(ctx context.Context) (*corev1.Event, error) {
		return s.events.CreateWithEventNamespaceWithContext(ctx, e)
	})
}

func (s confirmedSink) Update(e *corev1.Event) (*corev1.Event, error) {
	return s.send(func(ctx context.Context) (*corev1.Event, error) {
		return s.events.UpdateWithEventNamespaceWithContext(ctx, e)
	})
}

func (s confirmedSink) Patch(old *corev1.Event, data []byte) (*corev1.Event, error) {
	return s.send(func(ctx context.Context) (*corev1.Event, error) {
		return s.events.PatchWithEventNamespaceWithContext(ctx, old, data)
	})
}

func errUnconfirmed() error {
	return apierrors.NewServiceUnavailable("event dropped: this replica's leader Lease was not confirmed within the renew deadline")
}

// NewEventRecorder returns the recorder of the controller's Events and the function that
// stops it. With leader election (guard set), an Event goes out only while a Lease check
// vouches for this replica (confirmedSink).
func NewEventRecorder(ctx context.Context, client kubernetes.Interface, guard *LeaseGuard, identity string) (record.EventRecorder, func()) {
	scheme := runtime.NewScheme()
	// Adding types to a fresh scheme fails only when two registrations conflict, which
	// these two do not; the scheme only names the objects Events are about.
	_ = clientgoscheme.AddToScheme(scheme)
	_ = v1alpha1.AddToScheme(scheme)
	var sink record.EventSink = &typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")}
	if guard != nil {
		sink = confirmedSink{events: client.CoreV1().Events(""), until: guard.ConfirmedUntil, reconfirm: guard.Reconfirm}
	}
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(sink)
	return broadcaster.NewRecorder(scheme, corev1.EventSource{Component: "kubefence", Host: identity}), broadcaster.Shutdown
}
