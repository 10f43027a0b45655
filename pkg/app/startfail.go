package app

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/kubefence/kubefence/pkg/caches"
)

// ReasonCacheSyncFailed is the reason of the Event on a replica's pod whose caches did not
// sync in time.
const ReasonCacheSyncFailed = "CacheSyncFailed"

// DefaultCacheSyncTimeout is how long the caches have to sync at start. A list of 5,000
// nodes and their pods takes seconds; minutes mean the lists fail (RBAC, a missing
// CustomResourceDefinition) and would fail forever.
const DefaultCacheSyncTimeout = 2 * time.Minute

// DefaultTerminationMessagePath is where the kubelet reads a container's last words unless
// its terminationMessagePath says otherwise.
const DefaultTerminationMessagePath = "/dev/termination-log"

// The kubelet keeps at most 4096 bytes of a termination message; the API server keeps an
// Event's message whole, but a screenful is what people read.
const (
	maxTerminationMessage = 4096
	maxEventMessage       = 1024
)

// StartOptions bound the process's start and say where a failed one is reported.
type StartOptions struct {
	// CacheSyncTimeout is how long the informer caches have to sync before the start
	// fails; zero waits until the process is stopped.
	CacheSyncTimeout time.Duration
	// TerminationMessagePath is the file the kubelet reads the container's termination
	// message from (kubectl describe pod: Last State, Message). A failed start writes its
	// reason there if the file exists (the kubelet makes it); none is created.
	TerminationMessagePath string
}

// startCaches starts set's caches within o.Start.CacheSyncTimeout. A start that fails
// there is reported where people look for it, each informer that did not sync with the
// last error it met: the log, a Warning Event on the replica's pod, and the container's
// termination message. The process then exits (non-zero) and the kubelet restarts it,
// rather than sit not ready, never elected, with no word said.
func startCaches(ctx context.Context, o AppOptions, client kubernetes.Interface, identity string, set *caches.Set) error {
	err := set.StartWithin(ctx, o.Start.CacheSyncTimeout)
	var se *caches.SyncError
	if err == nil || !errors.As(err, &se) || ctx.Err() != nil {
		return err // a stop during the start is not a failure to report
	}
	log := klog.FromContext(ctx)
	for _, u := range se.Unsynced {
		log.Error(u.LastError, "Informer cache did not sync", "informer", u.Informer, "timeout", o.Start.CacheSyncTimeout)
	}
	msg := err.Error()
	if werr := writeTerminationMessage(o.Start.TerminationMessagePath, msg); werr != nil {
		log.Error(werr, "Writing the termination message", "path", o.Start.TerminationMessagePath)
	}
	if o.Pod.Name != "" && o.Pod.Namespace != "" {
		if eerr := recordOnPod(ctx, client, o, identity, msg); eerr != nil {
			log.Error(eerr, "Recording the failed start on the replica's pod", "pod", o.Pod.Namespace+"/"+o.Pod.Name)
		}
	}
	return err
}

// writeTerminationMessage writes msg, cut to what the kubelet keeps, into the file at
// path if there is one: outside a pod there is none, and none is made.
func writeTerminationMessage(path, msg string) error {
	if path == "" {
		return nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	_, err = f.WriteString(truncate(msg, maxTerminationMessage))
	return errors.Join(err, f.Close())
}

// recordOnPod records a Warning Event on the replica's own pod, at once rather than through
// the broadcaster, which would still hold it when the process exits. Unlike the
// controller's other Events it follows no Lease check (invariant 2): the replica never ran
// for leader (the caches sync before the campaign), and the Event is about its own pod.
func recordOnPod(ctx context.Context, client kubernetes.Interface, o AppOptions, identity, msg string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	uid := types.UID(o.Pod.UID)
	if uid == "" {
		// kubectl describe pod finds a pod's Events by its UID.
		if pod, err := client.CoreV1().Pods(o.Pod.Namespace).Get(ctx, o.Pod.Name, metav1.GetOptions{}); err == nil {
			uid = pod.UID
		}
	}
	now := metav1.Now()
	e := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", o.Pod.Name, now.UnixNano()), Namespace: o.Pod.Namespace},
		InvolvedObject: corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: o.Pod.Namespace, Name: o.Pod.Name, UID: uid},
		Reason:         ReasonCacheSyncFailed,
		Message:        truncate(msg, maxEventMessage),
		Type:           corev1.EventTypeWarning,
		Source:         corev1.EventSource{Component: "kubefence", Host: identity},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}
	if _, err := client.CoreV1().Events(o.Pod.Namespace).Create(ctx, e, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create event: %w", err)
	}
	return nil
}

// truncate cuts s to at most n bytes, marking the cut.
func truncate(s string, n int) string {
	const mark = " ..."
	if len(s) <= n {
		return s
	}
	return s[:n-len(mark)] + mark
}
