package sim

import (
	"fmt"
	"os"
	"sync"
	"testing"
	"time"
)

// A control-plane component that exits is restarted at once with the same arguments and a
// log of its own, as the kubelet restarts a static pod; once Stop begins nothing restarts.
// No control plane needed: the component is a shell that fails its first run.
func TestSuperviseComponentRestartsUntilStop(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var heard []string
	c := &Cluster{logDir: t.TempDir(), logf: t.Logf, stopping: make(chan struct{}),
		opts: Options{Restarted: func(name string, exit error) {
			mu.Lock()
			defer mu.Unlock()
			heard = append(heard, fmt.Sprintf("%s: %v", name, exit))
		}}}
	// The first run exits 1, as kube-scheduler does on a corrupted cache; later runs stay up.
	script := `if [ -e ran ]; then exec sleep 600; fi; touch ran; echo corrupted; exit 1`
	p, err := c.launch("comp", "/bin/sh", []string{"-c", script})
	if err != nil {
		t.Fatalf("launch: %v", err)
	}
	go c.superviseComponent("comp", p)
	var got []string
	eventually(t, 10*time.Second, "comp restarted and reported", func() (bool, error) {
		mu.Lock()
		got = append([]string(nil), heard...)
		mu.Unlock()
		_, ok := c.PIDs()["comp-run2"]
		return ok && len(got) > 0, nil
	})
	if len(got) != 1 || got[0] != "comp: exit status 1" {
		t.Errorf("Restarted heard %q, want one %q", got, "comp: exit status 1")
	}
	if b, err := os.ReadFile(p.logPath); err != nil || string(b) != "corrupted\n" {
		t.Errorf("first run's log %s = %q, %v; want it kept", p.logPath, b, err)
	}
	pids := c.PIDs()
	if err := c.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	for name, pid := range pids {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); !os.IsNotExist(err) {
			t.Errorf("%s (pid %d) still present after Stop: %v", name, pid, err)
		}
	}
	if after := c.PIDs(); len(after) != 2 {
		t.Errorf("processes after Stop: %v, want comp and comp-run2 only", after)
	}
	if _, err := c.launch("late", "/bin/true", nil); err == nil {
		t.Errorf("launch after Stop succeeded")
	}
}
