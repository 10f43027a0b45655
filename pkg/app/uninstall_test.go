package app

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	fencingfake "github.com/kubefence/kubefence/pkg/generated/clientset/versioned/fake"
	"github.com/kubefence/kubefence/pkg/netfence"
	"github.com/kubefence/kubefence/pkg/podrelease"
)

func node(name string, annotations map[string]string, taints ...corev1.Taint) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations}, Spec: corev1.NodeSpec{Taints: taints}}
}

func incident(name, node string, phase v1alpha1.Phase, mutate ...func(*v1alpha1.NodeFenceStatus)) *v1alpha1.NodeFence {
	nf := &v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.NodeFenceSpec{NodeName: node}}
	nf.Status.Phase = phase
	for _, m := range mutate {
		m(&nf.Status)
	}
	return nf
}

func verifiedOff(st *v1alpha1.NodeFenceStatus) {
	st.VerifiedLevel = 1
	st.Attempts = []v1alpha1.Attempt{
		{Level: 1, Agent: "ipmi", State: v1alpha1.AttemptVerified, Target: "10.0.0.11", PowerState: "off"},
		{Level: 1, Agent: "iscsi", State: v1alpha1.AttemptVerified, Target: "iqn.2026-01.io.node-1",
			FenceEvidence: "cut 1 rule\nremoved: target=iqn.2026-01.io.san:vol1 tpg=1 iqn=iqn.2026-01.io.node-1 luns=0-0"},
	}
}

func ourNetworkFence(name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"fenceState": "Fenced", "cidrs": []any{"10.0.0.1/32"}}}}
	u.SetAPIVersion(netfence.Resource.GroupVersion().String())
	u.SetKind("NetworkFence")
	u.SetName(name)
	u.SetLabels(map[string]string{netfence.ManagedByLabel: netfence.ManagedBy, netfence.NodeLabel: "node-1", netfence.IncidentLabel: "node-1-a"})
	return u
}

// checkWith is the check over fake clients holding objs; noNetworkFences makes the
// NetworkFence list answer NotFound, as an API server without csi-addons' CRD does.
func checkWith(noNetworkFences bool, objs ...runtime.Object) UninstallCheck {
	return checkListing(func() error {
		if noNetworkFences {
			return apierrors.NewNotFound(netfence.Resource.GroupResource(), "")
		}
		return nil
	}, objs...)
}

// checkListing is checkWith whose NetworkFence list fails with listErr() when not nil.
func checkListing(listErr func() error, objs ...runtime.Object) UninstallCheck {
	var kube, fencing, dyn []runtime.Object
	for _, o := range objs {
		switch o.(type) {
		case *corev1.Node:
			kube = append(kube, o)
		case *v1alpha1.NodeFence:
			fencing = append(fencing, o)
		default:
			dyn = append(dyn, o)
		}
	}
	d := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{netfence.Resource: "NetworkFenceList"}, dyn...)
	if err := listErr(); err != nil {
		d.PrependReactor("list", "networkfences", func(clienttesting.Action) (bool, runtime.Object, error) {
			return true, nil, err
		})
	}
	return UninstallCheck{Kube: kubefake.NewSimpleClientset(kube...), Fencing: fencingfake.NewSimpleClientset(fencing...), Dynamic: d}
}

func TestUninstallCheck(t *testing.T) {
	fenced := podrelease.FencedTaint
	oos := podrelease.OutOfServiceTaint
	for name, tc := range map[string]struct {
		objs            []runtime.Object
		noNetworkFences bool
		force           bool
		wantOK          bool
		want, wantNot   []string
	}{
		"nothing open": {
			objs: []runtime.Object{node("node-1", nil), incident("node-1-old", "node-1", v1alpha1.PhaseRecovered),
				incident("node-1-failed", "node-1", v1alpha1.PhaseFailed)},
			wantOK: true, want: []string{"kubefence holds nothing in place"}, wantNot: []string{"node-1-old", "node-1-failed"},
		},
		"nothing open, csi-addons not installed": {
			objs: []runtime.Object{node("node-1", nil)}, noNetworkFences: true,
			wantOK: true, want: []string{"kubefence holds nothing in place"}, wantNot: []string{"note:"},
		},
		"a held incident": {
			objs:    []runtime.Object{node("node-1", nil), incident("node-1-a", "node-1", v1alpha1.PhaseHeld)},
			want:    []string{"NodeFence node-1-a (node node-1, phase Held)", "kubectl annotate --overwrite nodefence node-1-a fencing.kubefence.io/cancel=", "fencing.kubefence.io/cancel-by=", "The uninstall is refused", "--no-hooks"},
			wantNot: []string{"Node node-1\n"},
		},
		"a remediated incident and its taints": {
			objs: []runtime.Object{
				node("node-1", map[string]string{podrelease.OwnerAnnotation: "node-1-a=" + oos.Key}, fenced, oos),
				incident("node-1-a", "node-1", v1alpha1.PhaseRemediated, verifiedOff, func(st *v1alpha1.NodeFenceStatus) {
					st.Remediation.TaintsAdded = []string{fenced.Key}
				}),
			},
			want: []string{"NodeFence node-1-a (node node-1, phase Remediated)", "fenced at level 1 by agent ipmi (device 10.0.0.11)",
				"power node-1 on at its fence device 10.0.0.11 (agent ipmi)", "kubectl delete node node-1",
				"removed (device iqn.2026-01.io.node-1): target=iqn.2026-01.io.san:vol1 tpg=1 iqn=iqn.2026-01.io.node-1 luns=0-0",
				"Node node-1", "kubectl taint node node-1 fencing.kubefence.io/fenced-", "kubectl taint node node-1 node.kubernetes.io/out-of-service-",
				"kubectl annotate node node-1 fencing.kubefence.io/taints-", "added by incident node-1-a"},
		},
		"a storage fence, nothing powered off": {
			objs: []runtime.Object{node("node-1", nil), incident("node-1-a", "node-1", v1alpha1.PhaseFenced, func(st *v1alpha1.NodeFenceStatus) {
				verifiedOff(st)
				st.Attempts = st.Attempts[1:]
			})},
			want:    []string{"power node-1 on, or reboot it, at its BMC or cloud console", "iSCSI ACL rules agent iscsi removed"},
			wantNot: []string{"fence device"},
		},
		"kubefence's taint with no incident": {
			objs: []runtime.Object{node("node-2", nil, fenced)},
			want: []string{"Node node-2", "no incident records adding them", "kubectl taint node node-2 fencing.kubefence.io/fenced-"},
		},
		"an out-of-service taint a person added is theirs": {
			objs:   []runtime.Object{node("node-2", nil, oos), incident("node-2-old", "node-2", v1alpha1.PhaseRecovered)},
			wantOK: true, wantNot: []string{"out-of-service-"},
		},
		"a failed incident whose taint stayed": {
			objs: []runtime.Object{node("node-3", map[string]string{podrelease.OwnerAnnotation: "node-3-a=" + fenced.Key}, fenced),
				incident("node-3-a", "node-3", v1alpha1.PhaseFailed)},
			want: []string{"NodeFence node-3-a (node node-3, phase Failed)", "ended Failed, but node node-3 still carries its taints fencing.kubefence.io/fenced",
				"kubectl taint node node-3 fencing.kubefence.io/fenced-"},
		},
		"an incident the controller has not taken up": {
			objs: []runtime.Object{node("node-1", nil), incident("node-1-a", "node-1", "")},
			want: []string{"NodeFence node-1-a (node node-1, phase new)", "nothing was fenced yet", "fencing.kubefence.io/cancel="},
		},
		"a fence in flight": {
			objs: []runtime.Object{node("node-1", nil), incident("node-1-a", "node-1", v1alpha1.PhaseFencing, func(st *v1alpha1.NodeFenceStatus) {
				st.Attempts = []v1alpha1.Attempt{{Level: 1, Agent: "ipmi", State: v1alpha1.AttemptFencing}}
			})},
			want: []string{"a fence was sent (agent ipmi, level 1)", "kubectl get nodefence node-1-a -w"},
		},
		"a NetworkFence": {
			objs: []runtime.Object{node("node-1", nil), ourNetworkFence("kubefence-node-1-a-0123abcd")},
			want: []string{"NetworkFence kubefence-node-1-a-0123abcd", "Fenced for 10.0.0.1/32 (node node-1, incident node-1-a)",
				`kubectl patch networkfence kubefence-node-1-a-0123abcd --type merge -p '{"spec":{"fenceState":"Unfenced"}}'`,
				"kubectl delete networkfence kubefence-node-1-a-0123abcd"},
		},
		"--force": {
			objs: []runtime.Object{node("node-1", nil, fenced), incident("node-1-a", "node-1", v1alpha1.PhasePending)}, force: true,
			wantOK: true, want: []string{"NodeFence node-1-a", "kubectl taint node node-1 fencing.kubefence.io/fenced-",
				"Uninstalling it now leaves them in place", "--force: the uninstall goes on, and every fence listed above stays in place"},
			wantNot: []string{"The uninstall is refused"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			ok, err := RunUninstallCheck(context.Background(), checkWith(tc.noNetworkFences, tc.objs...), tc.force, &out)
			if err != nil {
				t.Fatal(err)
			}
			if ok != tc.wantOK {
				t.Errorf("may go on = %v, want %v", ok, tc.wantOK)
			}
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q", w)
				}
			}
			for _, w := range tc.wantNot {
				if strings.Contains(out.String(), w) {
					t.Errorf("output has %q", w)
				}
			}
			if t.Failed() {
				t.Logf("output:\n%s", out.String())
			}
		})
	}
}

// TestUninstallCheckExitCodes: the subcommand's exit code is 1 while anything is held in
// place, 0 with --force, and 2 for a stray argument.
func TestUninstallCheckExitCodes(t *testing.T) {
	var out, errs bytes.Buffer
	if code := Subcommand(context.Background(), "uninstall-check", []string{"--force", "extra"}, &out, &errs); code != 2 {
		t.Errorf("stray argument: exit %d, want 2 (stderr %q)", code, errs.String())
	}
	held := checkWith(false, node("node-1", nil), incident("node-1-a", "node-1", v1alpha1.PhaseFenced, verifiedOff))
	for force, want := range map[bool]int{false: 1, true: 0} {
		out.Reset()
		ok, err := RunUninstallCheck(context.Background(), held, force, &out)
		if code := exitCode(ok, err, &errs); code != want {
			t.Errorf("an open incident, force=%v: exit %d, want %d (err %v)", force, code, want, err)
		}
	}
	ok, err := RunUninstallCheck(context.Background(), checkWith(true, node("node-1", nil)), false, &out)
	if code := exitCode(ok, err, &errs); code != 0 {
		t.Errorf("nothing open: exit %d, want 0 (err %v)", code, err)
	}
}

// TestUninstallCheckNetworkFencesForbidden: a role that may not list NetworkFences (the
// chart grants it only with networkFenceAgents) leaves a note with the command to look,
// and holds nothing up; any other error fails the check.
func TestUninstallCheckNetworkFencesForbidden(t *testing.T) {
	forbidden := func() error {
		return apierrors.NewForbidden(netfence.Resource.GroupResource(), "", errors.New("no rule"))
	}
	var out bytes.Buffer
	ok, err := RunUninstallCheck(context.Background(), checkListing(forbidden, node("node-1", nil)), false, &out)
	if err != nil || !ok {
		t.Fatalf("ok=%v err=%v, want ok", ok, err)
	}
	if want := "note: NetworkFences not read"; !strings.Contains(out.String(), want) || !strings.Contains(out.String(), "kubectl get networkfences -l app.kubernetes.io/managed-by=kubefence") {
		t.Errorf("output lacks %q and the command to look:\n%s", want, out.String())
	}
	broken := func() error { return apierrors.NewInternalError(errors.New("etcd down")) }
	if ok, err := RunUninstallCheck(context.Background(), checkListing(broken, node("node-1", nil)), false, &out); err == nil || ok {
		t.Errorf("a failed list: ok=%v err=%v, want an error", ok, err)
	}
}
