package tgt_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kubefence/kubefence/test/sim/tgt"
)

const (
	targetIQN = "iqn.2024-01.io.kubefence.test:disk1"
	nodeA     = "iqn.2024-01.io.kubefence.test:node-a"
	nodeB     = "iqn.2024-01.io.kubefence.test:node-b"
)

// TestServerACLAndSessions checks the harness against tgtd itself: an empty ACL refuses,
// a bound IQN logs in, an I/O loop shows up as an I_T nexus, and Stop leaves nothing.
func TestServerACLAndSessions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := tgt.Start(ctx, tgt.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	tid, err := s.AddTarget(ctx, targetIQN, 16<<20)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Login(ctx, nodeA, targetIQN); err == nil || !strings.Contains(err.Error(), "Target not found") {
		t.Fatalf("login with an empty acl: got %v, want a refusal", err)
	}
	if err := s.BindIQN(ctx, tid, nodeA); err != nil {
		t.Fatal(err)
	}
	if err := s.Login(ctx, nodeA, targetIQN); err != nil {
		t.Fatalf("login after bind: %v", err)
	}
	if err := s.Login(ctx, nodeB, targetIQN); err == nil {
		t.Fatal("node-b logged in without a rule")
	}
	loop, err := s.StartIO(nodeA, targetIQN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = loop.Stop() })
	if err := loop.WaitConnected(ctx); err != nil {
		t.Fatal(err)
	}
	ini, err := s.Initiators(ctx, tid)
	if err != nil || !slices.Contains(ini, nodeA) {
		t.Fatalf("initiators = %v, %v; want %s", ini, err, nodeA)
	}
	acl, err := s.ACL(ctx, tid)
	if err != nil || !slices.Equal(acl, []string{nodeA}) {
		t.Fatalf("acl = %v, %v; want [%s]", acl, err, nodeA)
	}
	if err := loop.Stop(); err != nil {
		t.Error(err)
	}
	pid := s.PID()
	if err := s.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if _, err := s.Tgtadm(ctx, "--op", "show", "--mode", "system"); err == nil {
		t.Errorf("tgtd %d still answers after Stop", pid)
	}
}

// TestServersAreIndependent runs two tgtds at once: each has its own portal and control
// port, and stopping one leaves the other serving.
func TestServersAreIndependent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var servers []*tgt.Server
	for range 2 {
		s, err := tgt.Start(ctx, tgt.Options{Dir: t.TempDir()})
		if err != nil {
			t.Fatalf("start: %v", err)
		}
		t.Cleanup(func() { _ = s.Stop() })
		servers = append(servers, s)
	}
	a, b := servers[0], servers[1]
	if a.Port() == b.Port() || a.ControlPort() == b.ControlPort() {
		t.Fatalf("servers share a port: %s/%d and %s/%d", a.Portal(), a.ControlPort(), b.Portal(), b.ControlPort())
	}
	if err := a.Stop(); err != nil {
		t.Fatalf("stop a: %v", err)
	}
	if err := a.Stop(); err != nil {
		t.Errorf("second stop of a: %v", err)
	}
	if _, err := b.Tgtadm(ctx, "--op", "show", "--mode", "system"); err != nil {
		t.Errorf("b stopped answering after a stopped: %v", err)
	}
}
