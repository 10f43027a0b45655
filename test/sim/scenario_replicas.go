package sim

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kubefence/kubefence/pkg/testpoint"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// scenarioReplica is one fence-controller process and the identity it logged.
type scenarioReplica struct {
	name string
	r    *Replica
	id   string
}

func (s *scenarioReplica) alive() bool {
	select {
	case <-s.r.Done():
		return false
	default:
		return true
	}
}

var cachesSynced = regexp.MustCompile(`"Caches synced" identity="([^"]+)"`)

// startControllers starts the first replica, waits for it to lead, then the others, as
// a rolling deployment would; a supervisor restarts any replica that exits, as the
// Deployment's kubelet would.
func (r *runner) startControllers(ctx context.Context) error {
	for i := range r.sc.Controllers {
		if _, err := r.startReplica(ctx, fmt.Sprintf("controller-%c", 'a'+i)); err != nil {
			return err
		}
		if i == 0 {
			if _, err := r.h.WaitLeader(ctx); err != nil {
				return err
			}
		}
	}
	return nil
}

func (r *runner) startReplica(ctx context.Context, name string) (*scenarioReplica, error) {
	r.mu.Lock()
	if ctx.Err() != nil {
		r.mu.Unlock()
		return nil, ctx.Err()
	}
	var args []string
	if r.agents != nil && r.sc.NodeAgents.Heartbeats {
		var err error
		if args, err = r.agents.SeatArgs(name); err != nil {
			r.mu.Unlock()
			return nil, err
		}
	}
	var env []string
	if r.sc.PauseAt != "" && len(r.replicas) == 0 {
		env = append(env, testpoint.Env+"="+r.sc.PauseAt)
	}
	rp, err := r.h.StartControllerWithEnv(name, env, args...)
	r.mu.Unlock()
	if err != nil {
		return nil, err
	}
	s := &scenarioReplica{name: name, r: rp}
	err = pollUntil(ctx, 100*time.Millisecond, time.Minute, func(context.Context) (bool, error) {
		if m := cachesSynced.FindStringSubmatch(rp.Log()); m != nil {
			s.id = m[1]
			return true, nil
		}
		return !s.alive(), nil
	})
	if err != nil {
		return nil, fmt.Errorf("replica %s never synced: %w", name, err)
	}
	r.mu.Lock()
	r.replicas = append(r.replicas, s)
	r.mu.Unlock()
	go r.supervise(ctx, s)
	return s, nil
}

// supervise restarts a replica that exited, a second later, until the run ends.
func (r *runner) supervise(ctx context.Context, s *scenarioReplica) {
	select {
	case <-ctx.Done():
		return
	case <-s.r.Done():
	}
	r.logf("replica %s exited with code %d", s.name, s.r.ExitCode())
	select {
	case <-ctx.Done():
		return
	case <-time.After(time.Second):
	}
	next := s.name + "+"
	if _, err := r.startReplica(ctx, next); err != nil && ctx.Err() == nil {
		r.logf("restart of %s failed: %v", s.name, err)
	}
}

// leader returns the live replica that holds the controller Lease.
func (r *runner) leader(ctx context.Context) (*scenarioReplica, error) {
	var found *scenarioReplica
	le := r.h.Config.LeaderElection
	err := pollUntil(ctx, 100*time.Millisecond, time.Minute, func(ctx context.Context) (bool, error) {
		l, err := r.h.Cluster.Client.CoordinationV1().Leases(le.Namespace).Get(ctx, le.Name, metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return false, nil
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, s := range r.replicas {
			if s.id == *l.Spec.HolderIdentity && s.alive() && s != r.paused {
				found = s
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return nil, fmt.Errorf("no live leader: %w", err)
	}
	return found, nil
}

// restartControllers sends SIGTERM to every live replica; their supervisors start new
// ones a second after each exits.
func (r *runner) restartControllers() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.replicas {
		if s.alive() && s != r.paused {
			if err := s.r.Terminate(); err != nil {
				return err
			}
		}
	}
	return nil
}

func (r *runner) signalLeader(ctx context.Context, action string) error {
	l, err := r.leader(ctx)
	if err != nil {
		return err
	}
	if action == ActPauseLeader {
		r.mu.Lock()
		r.paused = l
		r.mu.Unlock()
		r.logf("pausing leader %s (%s)", l.name, l.id)
		return l.r.Signal(syscall.SIGSTOP)
	}
	sig := syscall.SIGKILL
	if action == ActStopLeader {
		sig = syscall.SIGTERM
	}
	r.logf("%s: leader %s (%s)", action, l.name, l.id)
	if err := l.r.Signal(sig); err != nil {
		return err
	}
	select {
	case <-l.r.Done():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// killAgent SIGKILLs the IPMI agent process the leader launched: a child of the
// leader's process whose executable is the plugin directory's "ipmi".
func (r *runner) killAgent(ctx context.Context) error {
	l, err := r.leader(ctx)
	if err != nil {
		return err
	}
	want := filepath.Join(r.h.Config.PluginDir, ipmiAgent)
	var pid int
	err = pollUntil(ctx, 20*time.Millisecond, 30*time.Second, func(context.Context) (bool, error) {
		for _, child := range childPIDs(l.r.p.pid()) {
			if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", child)); err == nil && exe == want {
				pid = child
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("no %s child of leader %s: %w", want, l.name, err)
	}
	r.logf("killing agent pid %d of leader %s", pid, l.name)
	return syscall.Kill(pid, syscall.SIGKILL)
}

// childPIDs lists the children of pid from /proc/<pid>/task/*/children.
func childPIDs(pid int) []int {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	var out []int
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}
