package sim

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
)

// slowScript is a fence script whose power-off hangs; before that its child leaves the
// session (setsid) to power the node off 3 s later anyway, an action landing after its
// caller is gone.
const slowScript = `#!/bin/sh
dir=$(dirname "$0")
action=$(sed -n 's/^action=//p')
[ "$action" = status ] && exit 0
[ "$action" = metadata ] && exit 1
touch "$dir/started"
setsid sh -c 'sleep 3; touch "$0/escaped"' "$dir" &
sleep 60
`

// TestNothingOutlivesTheController: the real controller calls the real exec
// agent, whose script hangs mid power-off with a setsid child; the controller is
// SIGKILLed alone. Within 2 s no process of the call is left (agent, reaper, script,
// child), and the child's late action never lands.
func TestNothingOutlivesTheController(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	scripts := t.TempDir()
	script := filepath.Join(scripts, "fence_slow")
	if err := os.WriteFile(script, []byte(slowScript), 0o755); err != nil {
		t.Fatal(err)
	}
	var cfgErr error
	h := fastHarnessWith(t, ctx, HarnessOptions{Config: func(c *v1alpha1.Config) {
		var sum string
		if sum, cfgErr = installExecAgent(ctx, c.PluginDir, "slow"); cfgErr != nil {
			return
		}
		c.Agents = append(c.Agents, v1alpha1.Agent{Name: "slow", SHA256: sum,
			Params: map[string]string{"script": script, "target_key": "ip"},
			Target: v1alpha1.TargetSource{Annotation: IPMIAddressKey}})
		c.Policies[0].Levels = []v1alpha1.Level{{Agents: []string{"slow"}}}
	}})
	if cfgErr != nil {
		t.Fatalf("install the exec agent: %v", cfgErr)
	}
	victim := deployWeb(t, ctx, h.Cluster)
	leader := startLeader(t, ctx, h, "controller")
	h.Cluster.Node(victim).Crash()
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		_, err := os.Stat(filepath.Join(scripts, "started"))
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("the fence script never started")
	}
	if left := scriptProcesses(scripts, h.Config.PluginDir); len(left) < 3 {
		t.Fatalf("want the script and its escaped child running before the kill, have %v", left)
	}
	// The controller process alone, as the kernel's OOM killer or a node crash would.
	if err := syscall.Kill(leader.p.pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-leader.Done()
	killed := time.Now()
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 2*time.Second, true, func(context.Context) (bool, error) {
		return len(scriptProcesses(scripts, h.Config.PluginDir)) == 0, nil
	})
	if err != nil {
		t.Fatalf("%s after the controller died, processes of its call still run: %v", time.Since(killed).Round(time.Millisecond), scriptProcesses(scripts, h.Config.PluginDir))
	}
	t.Logf("every process of the call gone %s after the controller died", time.Since(killed).Round(time.Millisecond))
	// Nothing of the call runs, so nothing can land; look once the child's 3 s passed.
	<-time.After(time.Until(killed.Add(3500 * time.Millisecond)))
	if _, err := os.Stat(filepath.Join(scripts, "escaped")); err == nil {
		t.Errorf("the escaped child acted after the controller died")
	}
}

// scriptProcesses lists live processes whose command line names one of dirs (the
// script's directory, the plugin directory): the call's whole tree, agent included.
func scriptProcesses(dirs ...string) []string {
	return liveProcesses(func(argv []string) bool {
		all := strings.Join(argv, " ")
		for _, d := range dirs {
			if strings.Contains(all, d) {
				return true
			}
		}
		return false
	})
}

// installExecAgent builds fence-agent-exec into pluginDir under name and returns its
// SHA-256, for a configuration's agents.
func installExecAgent(ctx context.Context, pluginDir, name string) (string, error) {
	bin := filepath.Join(filepath.Dir(pluginDir), "bin", "fence-agent-exec")
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/fence-agent-exec")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build fence-agent-exec: %w\n%s", err, out)
	}
	return copyFile(bin, filepath.Join(pluginDir, name))
}
