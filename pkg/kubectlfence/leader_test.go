package kubectlfence

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/kubefence/kubefence/pkg/leader"
)

var prod = Release{Namespace: ns, Fullname: "prod-kubefence", Lease: "prod-kubefence-controller", PauseConfigMap: "prod-kubefence-pause"}

// without is objs less the object named name.
func without(objs []runtime.Object, name string) []runtime.Object {
	return slices.DeleteFunc(objs, func(o runtime.Object) bool { return o.(metav1.Object).GetName() == name })
}

func TestFindLeader(t *testing.T) {
	for name, tc := range map[string]struct {
		objs []runtime.Object
		at   time.Time
		want Leader
		err  error
	}{
		"the pod that owns the identity Lease": {objs: release(), at: now,
			want: Leader{Identity: identity, Pod: podName, Node: "node-9", Epoch: 3}},
		"no identity Lease: the identity's host name": {objs: without(release(), leader.LeaseName("controller", identity)), at: now,
			want: Leader{Identity: identity, Pod: podName, Node: "node-9", Epoch: 3}},
		"no pod: a replica outside the cluster": {objs: without(without(release(), podName), leader.LeaseName("controller", identity)), at: now,
			want: Leader{Identity: identity, Epoch: 3}},
		"expired": {objs: release(), at: now.Add(time.Minute),
			want: Leader{Identity: identity, Pod: podName, Node: "node-9", Epoch: 3, Expired: true}},
		"no holder": {objs: []runtime.Object{&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: prod.Lease, Namespace: ns}}},
			err: ErrNoLeader},
	} {
		t.Run(name, func(t *testing.T) {
			c, _, _ := fixture(t, "alice", tc.objs...)
			got, err := FindLeader(context.Background(), c.Kube, prod, tc.at)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("err %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got.RenewTime = nil
			if *got != tc.want {
				t.Fatalf("FindLeader = %+v, want %+v", *got, tc.want)
			}
		})
	}
}

func TestLeaderPodRefusesAnExpiredLease(t *testing.T) {
	c, _, _ := fixture(t, "alice", release()...)
	if _, err := LeaderPod(context.Background(), c.Kube, prod, now.Add(time.Minute)); !errors.Is(err, ErrNoLeader) {
		t.Fatalf("err %v, want ErrNoLeader", err)
	}
	pod, err := LeaderPod(context.Background(), c.Kube, prod, now)
	if err != nil || pod.Name != podName {
		t.Fatalf("LeaderPod = %v, %v", pod, err)
	}
}

func TestControllerCommand(t *testing.T) {
	for name, tc := range map[string]struct {
		spec          corev1.PodSpec
		sub           string
		args          []string
		wantContainer string
		want          []string
	}{
		"explain, as the chart's container runs": {spec: controllerPodSpec(), sub: "explain", args: []string{"node-1"},
			wantContainer: "controller", want: []string{"/usr/local/bin/fence-controller", "explain", "node-1",
				"--config=/run/kubefence/config.yaml", "--pause-configmap=prod-kubefence-pause"}},
		"check": {spec: controllerPodSpec(), sub: "check", wantContainer: "controller",
			want: []string{"/usr/local/bin/fence-controller", "check", "--config=/run/kubefence/config.yaml", "--pause-configmap=prod-kubefence-pause"}},
		"flags in the command": {spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "controller",
			Command: []string{"/bin/fc", "-config=/etc/c.yaml"}}}}, sub: "check", wantContainer: "controller",
			want: []string{"/bin/fc", "check", "--config=/etc/c.yaml"}},
		"no command: the image's binary": {spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "controller"}}},
			sub: "check", wantContainer: "controller", want: []string{"/usr/local/bin/fence-controller", "check"}},
	} {
		t.Run(name, func(t *testing.T) {
			container, cmd := ControllerCommand(&corev1.Pod{Spec: tc.spec}, tc.sub, tc.args...)
			if container != tc.wantContainer || !slices.Equal(cmd, tc.want) {
				t.Fatalf("ControllerCommand = %s %q, want %s %q", container, cmd, tc.wantContainer, tc.want)
			}
		})
	}
}

func TestAskLeaderExecsInTheLeadersController(t *testing.T) {
	c, _, _ := fixture(t, "alice", release()...)
	var calls []execCall
	rc, out, errOut := run(t, c, "incident:  node-1-c\n", 0, &calls, "explain", "node-1", "-n", ns)
	if rc != 0 {
		t.Fatalf("exit %d: %s", rc, errOut)
	}
	want := execCall{ns, podName, "controller", []string{"/usr/local/bin/fence-controller", "explain", "node-1",
		"--config=/run/kubefence/config.yaml", "--pause-configmap=prod-kubefence-pause"}}
	if len(calls) != 1 || calls[0].pod != want.pod || calls[0].container != want.container || !slices.Equal(calls[0].cmd, want.cmd) {
		t.Fatalf("exec calls %+v, want %+v", calls, want)
	}
	mustContain(t, out, "incident:  node-1-c")
}

func TestCheckOfOneNodeKeepsItsRowsAndTheLeadersExitCode(t *testing.T) {
	c, _, _ := fixture(t, "alice", release()...)
	var calls []execCall
	table := "NODE    AGENT  STATE\nnode-1  ipmi   on\nnode-10 ipmi   error\nnode-2  ipmi   on"
	rc, out, _ := run(t, c, table, 1, &calls, "check", "node-1", "-n", ns)
	if rc != 1 {
		t.Errorf("exit %d, want the leader's 1", rc)
	}
	if want := "NODE    AGENT  STATE\nnode-1  ipmi   on\n"; out != want {
		t.Errorf("check node-1 printed %q, want %q", out, want)
	}
	if len(calls) != 1 || slices.Contains(calls[0].cmd, "node-1") {
		t.Errorf("exec calls %+v: fence-controller check takes no node", calls)
	}
}

func TestAskLeaderWithoutALeader(t *testing.T) {
	objs := release()
	for _, o := range objs {
		if l, ok := o.(*coordinationv1.Lease); ok && l.Name == prod.Lease {
			l.Spec.HolderIdentity = ptr.To("")
		}
	}
	c, _, _ := fixture(t, "alice", objs...)
	var calls []execCall
	rc, _, errOut := run(t, c, "", 0, &calls, "check", "-n", ns)
	if rc != 1 || len(calls) != 0 {
		t.Fatalf("exit %d, calls %v; want 1 and none", rc, calls)
	}
	mustContain(t, errOut, "no leader")
}
