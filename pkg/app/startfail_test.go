package app

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kubefence/kubefence/pkg/caches"
	fencingfake "github.com/kubefence/kubefence/pkg/generated/clientset/versioned/fake"
)

// TestStartCachesFailsLoudly: a cache that cannot sync (the pause ConfigMap's list is
// forbidden, as when its name does not match the Role's resourceNames) fails the start
// within the timeout, naming the informer and its error in the returned error, an Event
// on the replica's pod and the termination message.
func TestStartCachesFailsLoudly(t *testing.T) {
	const ns, podName, podUID = "kubefence-system", "kubefence-controller-7d9f-abcde", "0b1c2d3e"
	for name, tc := range map[string]struct {
		pod bool // the replica knows its pod (POD_NAME, POD_NAMESPACE)
		// messageFile: the termination message's file exists (the kubelet makes it).
		messageFile bool
	}{
		"in a pod":                 {pod: true, messageFile: true},
		"no pod known":             {messageFile: true},
		"no termination-log mount": {pod: true},
	} {
		t.Run(name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: podName, Namespace: ns, UID: podUID}}
			kube, fencing := fake.NewClientset(pod), fencingfake.NewSimpleClientset()
			kube.PrependReactor("list", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
				return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "",
					errors.New(`User "system:serviceaccount:kubefence-system:kubefence" cannot list resource "configmaps"`))
			})
			set, err := caches.New(kube, fencing, nil, ns, ns, "kubefence-pause")
			if err != nil {
				t.Fatal(err)
			}
			set.Kube.Core().V1().Nodes().Informer()
			set.Pauses.Core().V1().ConfigMaps().Informer()
			msgPath := filepath.Join(t.TempDir(), "termination-log")
			if tc.messageFile {
				if err := os.WriteFile(msgPath, nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			o := AppOptions{Start: StartOptions{CacheSyncTimeout: 300 * time.Millisecond, TerminationMessagePath: msgPath}}
			if tc.pod {
				o.Pod.Namespace, o.Pod.Name = ns, podName
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			began := time.Now()
			err = startCaches(ctx, o, kube, "replica-1", set)
			if err == nil {
				t.Fatal("startCaches = nil, want an error")
			}
			if took := time.Since(began); took > 3*time.Second {
				t.Errorf("startCaches returned after %v, want about 300ms", took)
			}
			for _, w := range []string{"ConfigMap", "forbidden"} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("startCaches = %q, want it to name %q", err, w)
				}
			}
			msg, readErr := os.ReadFile(msgPath)
			switch {
			case !tc.messageFile && !os.IsNotExist(readErr):
				t.Errorf("termination message written to %s, which did not exist (read: %v)", msgPath, readErr)
			case tc.messageFile && (!strings.Contains(string(msg), "ConfigMap") || !strings.Contains(string(msg), "forbidden")):
				t.Errorf("termination message = %q (%v), want the informer and its error", msg, readErr)
			}
			checkStartEvent(t, kube, tc.pod, podName, podUID)
		})
	}
}

// checkStartEvent checks the CacheSyncFailed Event on the replica's pod: one when the
// replica knows its pod, none otherwise.
func checkStartEvent(t *testing.T, kube *fake.Clientset, pod bool, podName, podUID string) {
	t.Helper()
	events, err := kube.CoreV1().Events("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !pod {
		if len(events.Items) != 0 {
			t.Errorf("events = %v, want none without the pod's name", events.Items)
		}
		return
	}
	if len(events.Items) != 1 {
		t.Fatalf("events = %v, want one", events.Items)
	}
	e := events.Items[0]
	if e.Reason != ReasonCacheSyncFailed || e.Type != corev1.EventTypeWarning || e.InvolvedObject.Kind != "Pod" ||
		e.InvolvedObject.Name != podName || string(e.InvolvedObject.UID) != podUID || !strings.Contains(e.Message, "forbidden") {
		t.Errorf("event = %+v, want a Warning %s on pod %s (uid %s) naming the error", e, ReasonCacheSyncFailed, podName, podUID)
	}
}
