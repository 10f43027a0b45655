package iscsi_test

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kubefence/kubefence/pkg/fenceagent/iscsi"
	"github.com/kubefence/kubefence/pkg/internal/fixture"
	"github.com/kubefence/kubefence/pkg/plugin"
	"github.com/kubefence/kubefence/test/sim/tgt"
)

// These tests run against a real tgtd and check access from the initiator's side with
// libiscsi (logins and a running I/O loop) and tgtd's own ACL listing, never only what
// the agent reports.

const (
	disk1 = "iqn.2024-01.io.kubefence.test:disk1"
	disk2 = "iqn.2024-01.io.kubefence.test:disk2"
	nodeA = "iqn.2024-01.io.kubefence.test:node-a"
	nodeB = "iqn.2024-01.io.kubefence.test:node-b"
)

// storage is a tgtd with disk1 and disk2, both admitting node-a and node-b by IQN.
type storage struct {
	*tgt.Server
	tids map[string]int
}

func startStorage(t *testing.T) *storage {
	t.Helper()
	ctx := fixture.CallCtx(t, 30*time.Second)
	s, err := tgt.Start(ctx, tgt.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatalf("start tgtd: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("stop tgtd: %v", err)
		}
	})
	st := &storage{Server: s, tids: map[string]int{}}
	for _, disk := range []string{disk1, disk2} {
		tid, err := s.AddTarget(ctx, disk, 32<<20)
		if err != nil {
			t.Fatal(err)
		}
		st.tids[disk] = tid
		for _, ini := range []string{nodeA, nodeB} {
			if err := s.BindIQN(ctx, tid, ini); err != nil {
				t.Fatal(err)
			}
		}
	}
	return st
}

func (s *storage) request(initiator string, params map[string]string) plugin.Request {
	p := map[string]string{
		iscsi.ParamControlPort:   strconv.Itoa(s.ControlPort()),
		iscsi.ParamVerifyTimeout: "5s",
		iscsi.ParamPollInterval:  "50ms",
	}
	for k, v := range params {
		p[k] = v
	}
	return plugin.Request{Node: "node-a", Target: initiator, Params: p, Epoch: 3}
}

func (s *storage) mustLogin(t *testing.T, initiator, disk string) {
	t.Helper()
	if err := s.Login(fixture.CallCtx(t, 15*time.Second), initiator, disk); err != nil {
		t.Fatalf("%s cannot log in to %s: %v", initiator, disk, err)
	}
}

func (s *storage) mustBeRefused(t *testing.T, initiator, disk string) {
	t.Helper()
	err := s.Login(fixture.CallCtx(t, 15*time.Second), initiator, disk)
	if err == nil || !strings.Contains(err.Error(), "Target not found") {
		t.Fatalf("%s login to %s: got %v, want a refusal (Target not found)", initiator, disk, err)
	}
}

func (s *storage) acl(t *testing.T, disk string) []string {
	t.Helper()
	acl, err := s.ACL(fixture.CallCtx(t, 15*time.Second), s.tids[disk])
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(acl)
	return acl
}

func startIO(t *testing.T, s *storage, initiator, disk string) *tgt.IOLoop {
	t.Helper()
	loop, err := s.StartIO(initiator, disk)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = loop.Stop() })
	if err := loop.WaitConnected(fixture.CallCtx(t, 15*time.Second)); err != nil {
		t.Fatal(err)
	}
	return loop
}

// TestFenceCutsOffAndUnfenceRestores: node-a logs in, is fenced
// while an I/O loop runs (the loop dies, new logins are refused), node-b keeps access
// throughout, and Unfence with the fence's evidence lets node-a in again.
func TestFenceCutsOffAndUnfenceRestores(t *testing.T) {
	s := startStorage(t)
	s.mustLogin(t, nodeA, disk1)
	loopA := startIO(t, s, nodeA, disk1)
	loopB := startIO(t, s, nodeB, disk2)

	agent := iscsi.New()
	req := s.request(nodeA, nil)
	res, err := agent.Fence(fixture.CallCtx(t, 30*time.Second), req, plugin.ActionOff)
	if err != nil {
		t.Fatalf("fence: %v\n%s", err, res.Evidence)
	}
	t.Logf("fence evidence:\n%s", res.Evidence)
	if res.State != plugin.StateOff {
		t.Errorf("fence state %q, want off", res.State)
	}
	wantRemoved := "removed: target=" + disk1 + " iqn=" + nodeA + "; target=" + disk2 + " iqn=" + nodeA
	if !strings.Contains(res.Evidence, wantRemoved) {
		t.Errorf("evidence lacks %q:\n%s", wantRemoved, res.Evidence)
	}
	select {
	case <-loopA.Done():
	case <-time.After(15 * time.Second):
		t.Fatalf("node-a's io loop survived the fence:\n%s", loopA.Output())
	}
	if loopA.Err() == nil {
		t.Errorf("node-a's io loop exited cleanly; want a failure:\n%s", loopA.Output())
	}
	s.mustBeRefused(t, nodeA, disk1)
	s.mustBeRefused(t, nodeA, disk2)
	s.mustLogin(t, nodeB, disk1)
	select {
	case <-loopB.Done():
		t.Fatalf("node-b's io loop died: %v\n%s", loopB.Err(), loopB.Output())
	default:
	}
	if got := s.acl(t, disk1); !slices.Equal(got, []string{nodeB}) {
		t.Errorf("disk1 acl after fence = %v, want only node-b", got)
	}

	again, err := agent.Fence(fixture.CallCtx(t, 30*time.Second), req, plugin.ActionOff)
	if err != nil || again.State != plugin.StateOff || !strings.Contains(again.Evidence, "removed: none") {
		t.Fatalf("second fence = %q, %v; want off with nothing removed\n%s", again.State, err, again.Evidence)
	}
	st, err := agent.Status(fixture.CallCtx(t, 30*time.Second), req)
	if err != nil || st.State != plugin.StateOff {
		t.Fatalf("status after fence = %q, %v", st.State, err)
	}

	// The controller passes both evidences back; the union is restored, nothing more.
	restore := s.request(nodeA, map[string]string{iscsi.ParamRestore: res.Evidence + "\n" + again.Evidence})
	un, err := agent.Unfence(fixture.CallCtx(t, 30*time.Second), restore)
	if err != nil || un.State != plugin.StateOn {
		t.Fatalf("unfence = %q, %v\n%s", un.State, err, un.Evidence)
	}
	s.mustLogin(t, nodeA, disk1)
	s.mustLogin(t, nodeA, disk2)
	for _, disk := range []string{disk1, disk2} {
		if got := s.acl(t, disk); !slices.Equal(got, []string{nodeA, nodeB}) {
			t.Errorf("%s acl after unfence = %v, want node-a and node-b", disk, got)
		}
	}
	select {
	case <-loopB.Done():
		t.Fatalf("node-b's io loop died: %v", loopB.Err())
	default:
	}
}

// TestFenceByAddressAndRestore fences an initiator known by address only on one
// protected target, and restores exactly the address rule.
func TestFenceByAddressAndRestore(t *testing.T) {
	s := startStorage(t)
	ctx := fixture.CallCtx(t, 60*time.Second)
	if err := s.BindAddress(ctx, s.tids[disk2], "127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	loop := startIO(t, s, "iqn.2024-01.io.kubefence.test:by-address", disk2)
	agent := iscsi.New()
	req := s.request("", map[string]string{iscsi.ParamInitiatorAddress: "127.0.0.1", iscsi.ParamTargets: disk2})
	res, err := agent.Fence(ctx, req, plugin.ActionOff)
	if err != nil {
		t.Fatalf("fence: %v\n%s", err, res.Evidence)
	}
	if want := "removed: target=" + disk2 + " addr=127.0.0.1"; !strings.Contains(res.Evidence, want) {
		t.Errorf("evidence lacks %q:\n%s", want, res.Evidence)
	}
	select {
	case <-loop.Done():
	case <-time.After(15 * time.Second):
		t.Fatalf("io loop by address survived the fence")
	}
	// Only the address rule went; IQN rules of others, and disk1, are untouched.
	if got := s.acl(t, disk2); !slices.Equal(got, []string{nodeA, nodeB}) {
		t.Errorf("disk2 acl after fence = %v, want the iqn rules only", got)
	}
	req.Params[iscsi.ParamRestore] = res.Evidence
	if un, err := agent.Unfence(ctx, req); err != nil {
		t.Fatalf("unfence: %v\n%s", err, un.Evidence)
	}
	if got := s.acl(t, disk2); !slices.Equal(got, []string{"127.0.0.1", nodeA, nodeB}) {
		t.Errorf("disk2 acl after unfence = %v", got)
	}
}

// TestFenceErrors: each failure is typed, clear, and leaves the ACLs as they were.
func TestFenceErrors(t *testing.T) {
	s := startStorage(t)
	ctx := fixture.CallCtx(t, 60*time.Second)
	if err := s.BindAddress(ctx, s.tids[disk2], "ALL"); err != nil {
		t.Fatal(err)
	}
	agent := iscsi.New()
	tests := map[string]struct {
		req      plugin.Request
		kind     plugin.ErrorKind
		contains string
	}{
		"ALL rule": {s.request(nodeA, nil), plugin.KindPermanent, "ALL rule that admits every initiator"},
		"unknown target": {s.request(nodeA, map[string]string{iscsi.ParamTargets: disk1 + ",iqn.2024-01.io.kubefence.test:nope"}),
			plugin.KindPermanent, "target iqn.2024-01.io.kubefence.test:nope not found"},
		"tgtd not there": {s.request(nodeA, map[string]string{iscsi.ParamControlPort: strconv.Itoa(s.ControlPort() + 1)}),
			plugin.KindTargetUnreachable, "tgtd on control port"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			res, err := agent.Fence(ctx, tc.req, plugin.ActionOff)
			if err == nil {
				t.Fatalf("fence succeeded: %s", res.Evidence)
			}
			if plugin.KindOf(err) != tc.kind || !strings.Contains(err.Error(), tc.contains) {
				t.Errorf("fence = %v (kind %s), want kind %s containing %q", err, plugin.KindOf(err), tc.kind, tc.contains)
			}
			if !strings.Contains(res.Evidence, "removed: none") {
				t.Errorf("evidence does not say nothing was removed:\n%s", res.Evidence)
			}
		})
	}
	if got := s.acl(t, disk1); !slices.Equal(got, []string{nodeA, nodeB}) {
		t.Errorf("disk1 acl after refused fences = %v, want it untouched", got)
	}
	s.mustLogin(t, nodeA, disk1)

	// tgtd stopped: the same request becomes unreachable, not permanent.
	req := s.request(nodeA, nil)
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	_, err := agent.Status(ctx, req)
	var pe *plugin.Error
	if !errors.As(err, &pe) || pe.Kind != plugin.KindTargetUnreachable {
		t.Errorf("status with tgtd down = %v, want %s", err, plugin.KindTargetUnreachable)
	}
}
