package caches

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	fencingfake "github.com/kubefence/kubefence/pkg/generated/clientset/versioned/fake"
	"github.com/kubefence/kubefence/pkg/maintenance"
)

// syncTimeout bounds the start in these tests; testDeadline the test itself, so that a
// start that waits on unbounded fails the test rather than hang it.
const (
	syncTimeout  = 500 * time.Millisecond
	testDeadline = 5 * time.Second
)

// refuse makes every list of resource on c fail with err.
func refuse(c *k8stesting.Fake, resource string, err error) {
	c.PrependReactor("list", resource, func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, err })
}

// noDiscovery serves none of the optional kinds' groups: their CRDs are not installed.
type noDiscovery struct{}

func (noDiscovery) ServerResourcesForGroupVersion(gv string) (*metav1.APIResourceList, error) {
	gvk := schema.FromAPIVersionAndKind(gv, "")
	return nil, apierrors.NewNotFound(schema.GroupResource{Group: gvk.Group}, "")
}

func TestStartWithinReportsWhatDidNotSync(t *testing.T) {
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "",
		errors.New(`User "system:serviceaccount:kubefence-system:kubefence" cannot list resource "configmaps"`))
	notServed := apierrors.NewGenericServerResponse(404, "list", schema.GroupResource{Group: "fencing.kubefence.io", Resource: "nodefences"}, "", "", 0, false)
	for name, tc := range map[string]struct {
		refuse func(kube, fencing *k8stesting.Fake)
		// want are the strings the error holds; none: the start succeeds.
		want []string
	}{
		"all sync": {refuse: func(_, _ *k8stesting.Fake) {}},
		"pause ConfigMap forbidden": {
			refuse: func(kube, _ *k8stesting.Fake) { refuse(kube, "configmaps", forbidden) },
			want:   []string{"ConfigMap", "namespace kubefence-system", "metadata.name=kubefence-pause", "forbidden"},
		},
		"NodeFence CRD missing": {
			refuse: func(_, fencing *k8stesting.Fake) { refuse(fencing, "nodefences", notServed) },
			want:   []string{"NodeFence", "could not find the requested resource", "CustomResourceDefinition"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			kube, fencing := fake.NewClientset(), fencingfake.NewSimpleClientset()
			tc.refuse(&kube.Fake, &fencing.Fake)
			set, err := New(kube, fencing, dynamicfake.NewSimpleDynamicClient(runtime.NewScheme()), "kubefence-system", "kubefence-system", "kubefence-pause")
			if err != nil {
				t.Fatal(err)
			}
			// What the controllers ask for, including the optional kinds when their CRDs
			// are absent (pkg/maintenance watches only what discovery says is served).
			set.Kube.Core().V1().Nodes().Informer()
			set.Pauses.Core().V1().ConfigMaps().Informer()
			set.Fencing.Fencing().V1alpha1().NodeFences().Informer()
			if _, err := maintenance.New(noDiscovery{}, set.Dynamic); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
			defer cancel()
			began := time.Now()
			err = set.StartWithin(ctx, syncTimeout)
			took := time.Since(began)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("StartWithin = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatal("StartWithin = nil, want an error")
			}
			t.Logf("StartWithin after %v: %v", took.Round(time.Millisecond), err)
			if took > syncTimeout+2*time.Second {
				t.Errorf("StartWithin returned after %v, want about %v", took, syncTimeout)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("StartWithin = %q, want it to name %q", err, w)
				}
			}
			var se *SyncError
			if !errors.As(err, &se) || len(se.Unsynced) != 1 || se.Unsynced[0].LastError == nil {
				t.Errorf("StartWithin = %#v, want a *SyncError of one informer and its last error", err)
			}
		})
	}
}
