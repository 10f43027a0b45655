package realnode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// cgroupRoot is where the v1 hierarchies are mounted on these machines.
const cgroupRoot = "/sys/fs/cgroup"

// removeCgroups removes the node's cgroups from every hierarchy.
func (n *Node) removeCgroups() {
	hier, err := os.ReadDir(cgroupRoot)
	if err != nil {
		return
	}
	for _, h := range hier {
		removeCgroupTree(filepath.Join(cgroupRoot, h.Name(), n.cgroup()))
	}
}

// Freeze stops every process of the node where it stands, a hung machine, and returns once
// the kernel reports the whole cgroup FROZEN. Thaw resumes it.
func (n *Node) Freeze(ctx context.Context) error {
	if err := n.setFreezer("FROZEN"); err != nil {
		return err
	}
	p := filepath.Join(cgroupRoot, "freezer", n.cgroup(), "freezer.state")
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		b, err := os.ReadFile(p)
		if err == nil && strings.TrimSpace(string(b)) == "FROZEN" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: freezer state %q: %w", n.Name, b, ctx.Err())
		case <-tick.C:
		}
	}
}

// thawAll thaws every cgroup of the node's freezer subtree (a pod frozen on its own too).
func (n *Node) thawAll() {
	_ = filepath.WalkDir(filepath.Join(cgroupRoot, "freezer", n.cgroup()), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() == "freezer.state" {
			_ = os.WriteFile(p, []byte("THAWED"), 0o644)
		}
		return nil
	})
}

// inCgroup reports whether pid is in the node's freezer cgroup.
func (n *Node) inCgroup(pid int) error {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return err
	}
	if !strings.Contains(string(b), ":freezer:/"+n.cgroup()+"\n") {
		return fmt.Errorf("pid %d is not yet in freezer:/%s", pid, n.cgroup())
	}
	return nil
}

// Thaw resumes a frozen node.
func (n *Node) Thaw() error { return n.setFreezer("THAWED") }

func (n *Node) setFreezer(state string) error {
	p := filepath.Join(cgroupRoot, "freezer", n.cgroup(), "freezer.state")
	if err := os.WriteFile(p, []byte(state), 0o644); err != nil {
		return fmt.Errorf("%s: set freezer %s: %w", n.Name, state, err)
	}
	return nil
}

// setupCgroups gives the node a fresh cgroup in every v1 hierarchy (kubelet's
// cgroupRoot), removing what a previous boot left; the node's init joins the freezer one.
func (n *Node) setupCgroups() error {
	hier, err := os.ReadDir(cgroupRoot)
	if err != nil {
		return err
	}
	for _, h := range hier {
		base := filepath.Join(cgroupRoot, h.Name())
		if h.Name() == "unified" || !isDir(base) {
			continue
		}
		dir := filepath.Join(base, n.cgroup())
		removeCgroupTree(dir)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("create cgroup %s: %w", dir, err)
		}
		if h.Name() == "cpuset" {
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				v, err := os.ReadFile(filepath.Join(base, f))
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil {
					return fmt.Errorf("%s: %w", filepath.Join(dir, f), err)
				}
			}
		}
	}
	return nil
}

// removeCgroupTree removes a cgroup directory and its children, deepest first; a cgroup
// that still holds a process stays.
func removeCgroupTree(dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if e.IsDir() {
			removeCgroupTree(filepath.Join(dir, e.Name()))
		}
	}
	_ = os.Remove(dir)
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}
