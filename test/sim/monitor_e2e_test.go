package sim

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kubefence/kubefence/test/sim/bmc"
)

// TestFenceDeviceCheck: every node's fence device is read as Pacemaker's
// monitor reads stonith devices. `fence-controller check` prints each node's target as on,
// and the node whose BMC has another password as an error (exit code 1); the leader
// exports kubefence_target_up as 1 and 0 for them.
func TestFenceDeviceCheck(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const broken = "node-2"
	h := fastHarnessWith(t, ctx, HarnessOptions{BMC: func(name string, o *bmc.IPMIOptions) {
		if name == broken {
			o.Password = "another-password"
		}
	}})
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(ctx, filepath.Join(h.bin, "fence-controller"), "check", "--config", h.ConfigPath, "--kubeconfig", h.Cluster.Kubeconfig)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 1 {
		t.Errorf("check exited with %v, want 1 (one device down); stderr %s", err, errOut.String())
	}
	t.Logf("fence-controller check:\n%s", out.String())
	for _, n := range []string{"node-1", "node-2", "node-3"} {
		want := regexp.MustCompile(`(?m)^` + n + `\s+ipmi\s+127\.0\.0\.1:\d+\s+on\s`)
		if n == broken {
			want = regexp.MustCompile(`(?m)^` + n + `\s+ipmi\s+127\.0\.0\.1:\d+\s+error\s+\S+\s+\S`)
		}
		if !want.MatchString(out.String()) {
			t.Errorf("check output lacks %s as %s", n, want)
		}
	}

	leader := startLeader(t, ctx, h, "controller")
	metrics := metricsURL(t, ctx, leader)
	for node, up := range map[string]string{"node-1": "1", "node-2": "0", "node-3": "1"} {
		line := fmt.Sprintf(`kubefence_target_up{agent="ipmi",node="%s"} %s`, node, up)
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			return strings.Contains(scrape(ctx, metrics), line), nil
		})
		if err != nil {
			t.Errorf("/metrics never showed %s", line)
		}
	}
}

var (
	metricsAt = regexp.MustCompile(`"Serving metrics" address="([^"]+)"`)
	healthAt  = regexp.MustCompile(`"Serving health probes" address="([^"]+)"`)
)

// metricsURL is the /metrics address the replica logged, over plain HTTP (the harness's
// --metrics-secure=false).
func metricsURL(t testing.TB, ctx context.Context, r *Replica) string {
	t.Helper()
	return "http://" + servingAddress(t, ctx, r, metricsAt) + "/metrics"
}

// servingAddress is the address the replica logged as re's first group.
func servingAddress(t testing.TB, ctx context.Context, r *Replica, re *regexp.Regexp) string {
	t.Helper()
	var m []string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		m = re.FindStringSubmatch(r.Log())
		return m != nil, nil
	})
	if err != nil {
		t.Fatalf("replica log never matched %s: %v", re, err)
	}
	return m[1]
}

func scrape(ctx context.Context, url string) string {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return ""
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}
