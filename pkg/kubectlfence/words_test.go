package kubectlfence

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
)

func TestPauseAndResumeInTheCallersName(t *testing.T) {
	c, kube, _ := fixture(t, "alice@example.com", release()...)
	var calls []execCall
	rc, out, errOut := run(t, c, "", 0, &calls, "pause", "-n", ns, "--reason", "firmware on rack 3", "--name", "patch-night")
	if rc != 0 {
		t.Fatalf("pause: exit %d: %s", rc, errOut)
	}
	mustContain(t, out, `"patch-night"`, "alice@example.com")
	data := pauseData(t, c)
	want := map[string]string{"storm": "bob: partition", "patch-night": "alice@example.com: firmware on rack 3"}
	if !maps.Equal(data, want) {
		t.Fatalf("pause ConfigMap %v, want %v", data, want)
	}
	for _, a := range kube.Actions() {
		if a.GetVerb() == "update" {
			t.Errorf("pause updated the ConfigMap (%v): only a merge patch leaves the others' requests alone", a)
		}
	}
	if rc, _, errOut := run(t, c, "", 0, &calls, "pause", "-n", ns); rc != 2 && rc != 1 || !strings.Contains(errOut, "reason") {
		t.Errorf("pause with no reason: exit %d, %q", rc, errOut)
	}
	if rc, _, errOut := run(t, c, "", 0, &calls, "resume", "-n", ns, "--name", "patch-night"); rc != 0 {
		t.Fatalf("resume: exit %d: %s", rc, errOut)
	}
	if data := pauseData(t, c); !maps.Equal(data, map[string]string{"storm": "bob: partition"}) {
		t.Fatalf("after resume: %v", data)
	}
	if rc, _, errOut := run(t, c, "", 0, &calls, "resume", "-n", ns); rc != 1 || !strings.Contains(errOut, `standing: ["storm"]`) {
		t.Errorf("resume of no request: exit %d, %q", rc, errOut)
	}
	if rc, out, _ := run(t, c, "", 0, &calls, "resume", "-n", ns, "--all"); rc != 0 || !strings.Contains(out, "lifted storm; 0 pause") {
		t.Errorf("resume --all: exit %d, %q", rc, out)
	}
	if data := pauseData(t, c); len(data) != 0 {
		t.Fatalf("after resume --all: %v", data)
	}
}

func pauseData(t *testing.T, c Clients) map[string]string {
	t.Helper()
	cm, err := c.Kube.CoreV1().ConfigMaps(ns).Get(context.Background(), "prod-kubefence-pause", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cm.Data
}

func TestWordsCarryTheCallersName(t *testing.T) {
	for name, tc := range map[string]struct {
		args  []string
		nf    string
		want  map[string]string
		fails string
	}{
		"confirm-off, on the node's newest incident": {args: []string{"confirm-off", "node-1", "--reason", "chassis lost power"}, nf: "node-1-c",
			want: map[string]string{v1alpha1.ConfirmOffAnnotation: "chassis lost power", v1alpha1.ConfirmOffByAnnotation: "alice"}},
		"confirm-off, on the incident named": {args: []string{"confirm-off", "node-1", "--incident", "node-1-c", "--reason", "off"}, nf: "node-1-c",
			want: map[string]string{v1alpha1.ConfirmOffAnnotation: "off", v1alpha1.ConfirmOffByAnnotation: "alice"}},
		"confirm-off, on an ended incident named": {args: []string{"confirm-off", "node-1", "--incident", "node-1-a", "--reason", "off"},
			fails: "ended Recovered"},
		"confirm-off, on another node's incident": {args: []string{"confirm-off", "node-1", "--incident", "node-2-a", "--reason", "off"},
			fails: "is of node node-2, not node-1"},
		"confirm-off with no reason":      {args: []string{"confirm-off", "node-1"}, fails: "say why"},
		"confirm-off of a node with none": {args: []string{"confirm-off", "node-7", "--reason", "x"}, fails: "no incident"},
		"cancel": {args: []string{"cancel", "node-2-a", "--reason", "coming back"}, nf: "node-2-a",
			want: map[string]string{v1alpha1.CancelAnnotation: "coming back", v1alpha1.CancelByAnnotation: "alice"}},
		"force":                 {args: []string{"force", "node-1-c"}, nf: "node-1-c", want: map[string]string{v1alpha1.ForceAnnotation: "true"}},
		"cancel of no incident": {args: []string{"cancel", "nope", "--reason", "x"}, fails: "not found"},
	} {
		t.Run(name, func(t *testing.T) {
			c, _, _ := fixture(t, "alice", incidents()...)
			var calls []execCall
			rc, _, errOut := run(t, c, "", 0, &calls, tc.args...)
			if tc.fails != "" {
				if rc != 1 || !strings.Contains(errOut, tc.fails) {
					t.Fatalf("exit %d, %q; want 1 and %q", rc, errOut, tc.fails)
				}
				return
			}
			if rc != 0 {
				t.Fatalf("exit %d: %s", rc, errOut)
			}
			nf, err := c.Fencing.FencingV1alpha1().NodeFences().Get(context.Background(), tc.nf, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(nf.Annotations, tc.want) {
				t.Fatalf("annotations %v, want %v", nf.Annotations, tc.want)
			}
		})
	}
}

func TestConfirmOffOfAnEndedIncident(t *testing.T) {
	c, _, _ := fixture(t, "alice", incidents()[:2]...)
	_, err := c.ConfirmOff(context.Background(), "node-1", "", "alice", "off")
	if err == nil || !strings.Contains(err.Error(), "node-1-b of node-1 ended Cancelled") {
		t.Fatalf("err %v, want the newest incident ended", err)
	}
}

func TestFenceRequestInTheCallersName(t *testing.T) {
	c, _, _ := fixture(t, "system:serviceaccount:ops:oncall", incidents()...)
	var calls []execCall
	rc, out, errOut := run(t, c, "", 0, &calls, "fence", "node-5", "--reason", "BMC path repaired")
	if rc != 0 {
		t.Fatalf("exit %d: %s", rc, errOut)
	}
	mustContain(t, out, "node-5-x1", "system:serviceaccount:ops:oncall")
	nf, err := c.Fencing.FencingV1alpha1().NodeFences().Get(context.Background(), "node-5-x1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := v1alpha1.NodeFenceSpec{NodeName: "node-5", RequestedBy: "system:serviceaccount:ops:oncall", Reason: "BMC path repaired"}
	if nf.Spec != want || nf.GenerateName != "node-5-" {
		t.Fatalf("request %+v (generateName %q), want %+v", nf.Spec, nf.GenerateName, want)
	}
}

func TestWhoAmIRefusesNoName(t *testing.T) {
	c, _, _ := fixture(t, "")
	if _, err := c.WhoAmI(context.Background()); err == nil {
		t.Fatal("WhoAmI took an empty user name")
	}
	_, err := c.Fence(context.Background(), "node-1", "alice", " ")
	if !errors.Is(err, ErrNoReason) {
		t.Fatalf("Fence with a blank reason: %v", err)
	}
}
