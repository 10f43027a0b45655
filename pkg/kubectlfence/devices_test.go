package kubectlfence

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// leaderUsage is what the leader's fence-controller -h writes, to stderr.
const leaderUsage = "usage:\n  fence-controller check [flags]    read every node's fence device once\n  fence-controller devices [flags]  the running leader's last read\n"

// leaderDevices is the leader's `fence-controller devices -o json`: node-1's device read a
// minute ago, node-2's another machine's.
const leaderDevices = `{"leader":"` + identity + `","lastRound":"2026-11-29T11:59:00Z","reads":[
 {"node":"node-1","agent":"ipmi","target":"10.0.0.1","state":"on","identity":"uuid-1 (matches the node's)","at":"2026-11-29T11:59:00Z","latency":"42ms"},
 {"node":"node-2","agent":"ipmi","target":"10.0.0.9","state":"error","identity":"MISMATCH: device uuid-9, node uuid-2","at":"2026-11-29T11:59:00Z","latency":"8ms","error":"device uuid-9 is not node uuid-2"}]}`

// answer is what the fake leader writes for one subcommand, and its exit code.
type answer struct {
	stdout, stderr string
	code           int
}

// mayExec has the API server answer the caller's SelfSubjectAccessReviews with allowed.
func mayExec(kube *kubefake.Clientset, allowed bool) {
	kube.PrependReactor("create", "selfsubjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		r := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview)
		if ra := r.Spec.ResourceAttributes; ra == nil || ra.Namespace != ns || ra.Verb != "create" || ra.Resource != "pods" || ra.Subresource != "exec" {
			return true, r, nil
		}
		r.Status.Allowed = allowed
		return true, r, nil
	})
}

// statusOf runs `kubectl fence status args...` on c, the leader answering each
// subcommand (the word after its binary) as by says, and returns its exit code, output
// and the commands it ran.
func statusOf(t *testing.T, c Clients, by map[string]answer, args ...string) (int, string, [][]string) {
	t.Helper()
	var cmds [][]string
	exec := func(_ context.Context, namespace, pod, container string, cmd []string, stdout, stderr io.Writer) error {
		if namespace != ns || pod != podName || container != "controller" {
			t.Errorf("exec in %s/%s %s", namespace, pod, container)
		}
		cmds = append(cmds, cmd)
		a := by[cmd[1]]
		io.WriteString(stdout, a.stdout)
		io.WriteString(stderr, a.stderr)
		if a.code != 0 {
			return ExitError{Code: a.code}
		}
		return nil
	}
	var out, errOut bytes.Buffer
	cli := CLI{Stdout: &out, Stderr: &errOut, Now: func() time.Time { return now },
		Connect: func(Globals) (Clients, Exec, error) { return c, exec, nil }}
	rc := cli.Run(context.Background(), append([]string{"status", "-n", ns}, args...))
	if rc != 0 {
		t.Errorf("status %v: exit %d: %s", args, rc, errOut.String())
	}
	return rc, out.String(), cmds
}

// TestStatusShowsTheLeadersDevices: status asks the leader for its devices' last reads
// (fence-controller devices -o json, once its usage lists it) and shows them as a table,
// or as the devices field. Without the exec grant, when the leader does not answer or is
// older than the plugin, status still answers (exit 0) and says why in one line.
func TestStatusShowsTheLeadersDevices(t *testing.T) {
	full := map[string]answer{"-h": {stderr: leaderUsage}, "devices": {stdout: leaderDevices}}
	for name, tc := range map[string]struct {
		grant    bool
		by       map[string]answer
		wantCmds int
		want     []string
	}{
		"the leader's reads": {grant: true, by: full, wantCmds: 2, want: []string{"DEVICES:",
			"answered:  by the leader " + identity + "; its last round of reads ended 60s ago (2026-11-29T11:59:00Z)",
			"NODE    AGENT  TARGET    STATE  IDENTITY", "node-1  ipmi   10.0.0.1  on     uuid-1 (matches the node's)", "60s ago  42ms",
			"MISMATCH: device uuid-9, node uuid-2", "device uuid-9 is not node uuid-2"}},
		"no exec grant": {by: full, want: []string{"DEVICES:  not shown: they are the leader's, asked by exec in its pod, and you may not exec in ops: get and create pods/exec, granted in " + ExecGrant}},
		"the leader refuses": {grant: true, wantCmds: 2, by: map[string]answer{"-h": {stderr: leaderUsage},
			"devices": {stderr: "devices: replica x does not lead: only the leader's view decides\n", code: 1}},
			want: []string{"DEVICES:  not shown: the leader did not answer (fence-controller devices in pod " + podName + "): exit code 1: devices: replica x does not lead"}},
		"a release older than the plugin": {grant: true, wantCmds: 1, by: map[string]answer{"-h": {stderr: "usage:\n  fence-controller check [flags]\n"}},
			want: []string{"has no devices subcommand: the release is older than this plugin"}},
	} {
		t.Run(name, func(t *testing.T) {
			c, kube, _ := fixture(t, "alice", release()...)
			mayExec(kube, tc.grant)
			_, out, cmds := statusOf(t, c, tc.by)
			mustContain(t, out, append([]string{"LEADER:", "pod " + podName}, tc.want...)...)
			if len(cmds) != tc.wantCmds {
				t.Fatalf("ran %q, want %d commands", cmds, tc.wantCmds)
			}
			want := []string{"/usr/local/bin/fence-controller", "devices", "-o", "json", "--config=/run/kubefence/config.yaml", "--pause-configmap=prod-kubefence-pause"}
			if len(cmds) == 2 && !slices.Equal(cmds[1], want) {
				t.Errorf("asked the leader %q, want %q", cmds[1], want)
			}
		})
	}
}

// TestStatusJSONCarriesTheDevices: -o json has the leader's reads as the devices field,
// or devicesError and no devices field without the grant.
func TestStatusJSONCarriesTheDevices(t *testing.T) {
	full := map[string]answer{"-h": {stderr: leaderUsage}, "devices": {stdout: leaderDevices}}
	c, kube, _ := fixture(t, "alice", release()...)
	mayExec(kube, true)
	_, out, _ := statusOf(t, c, full, "-o", "json")
	var s Status
	if err := json.Unmarshal([]byte(out), &s); err != nil || s.Devices == nil || s.DevicesError != "" || len(s.Devices.Reads) != 2 ||
		s.Devices.Reads[1].Target != "10.0.0.9" || s.Devices.Reads[0].Latency.Duration != 42*time.Millisecond {
		t.Fatalf("status -o json: %v: %s", err, out)
	}
	c, kube, _ = fixture(t, "alice", release()...)
	mayExec(kube, false)
	_, out, _ = statusOf(t, c, full, "-o", "json")
	if strings.Contains(out, `"devices"`) || !strings.Contains(out, `"devicesError": "they are the leader's`) {
		t.Fatalf("status -o json without the grant:\n%s", out)
	}
}
