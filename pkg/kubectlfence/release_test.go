package kubectlfence

import (
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"
)

func TestFind(t *testing.T) {
	other := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "kubefence-controller", Namespace: ns,
		Labels: map[string]string{componentLabel: "controller", instanceLabel: "kubefence"}}}
	for name, tc := range map[string]struct {
		objs           []runtime.Object
		release, lease string
		want           Release
		err            string
		forbidden      bool
	}{
		"the Deployment, its pause ConfigMap from its container's flag": {objs: release(),
			want: Release{Namespace: ns, Fullname: "prod-kubefence", Deployment: "prod-kubefence-controller",
				Lease: "prod-kubefence-controller", PauseConfigMap: "prod-kubefence-pause"}},
		"a renamed Lease": {objs: release(), lease: "elect",
			want: Release{Namespace: ns, Fullname: "prod-kubefence", Deployment: "prod-kubefence-controller",
				Lease: "elect", PauseConfigMap: "prod-kubefence-pause"}},
		"two releases, one named": {objs: append(release(), other), release: "kubefence",
			want: Release{Namespace: ns, Fullname: "kubefence", Deployment: "kubefence-controller",
				Lease: "kubefence-controller", PauseConfigMap: "kubefence-pause"}},
		"two releases, none named": {objs: append(release(), other), err: "name one with --release"},
		"no Deployment, the default release's Lease": {
			objs: []runtime.Object{&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "kubefence-controller", Namespace: ns}}},
			want: Release{Namespace: ns, Fullname: "kubefence", Lease: "kubefence-controller", PauseConfigMap: "kubefence-pause"}},
		"nothing": {err: "no kubefence release in ops"},
		"forbidden to read Deployments and Leases": {forbidden: true, release: "prod-kubefence",
			want: Release{Namespace: ns, Fullname: "prod-kubefence", Lease: "prod-kubefence-controller", PauseConfigMap: "prod-kubefence-pause"}},
	} {
		t.Run(name, func(t *testing.T) {
			c, kube, _ := fixture(t, "alice", tc.objs...)
			if tc.forbidden {
				kube.PrependReactor("*", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
					return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: a.GetResource().Resource}, "", nil)
				})
			}
			got, err := Find(context.Background(), c.Kube, ns, tc.release, tc.lease)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Find = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}
