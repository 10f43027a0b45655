package cloud

import (
	"strings"
	"testing"
	"time"

	"github.com/kubefence/kubefence/pkg/internal/fixture"
	"github.com/kubefence/kubefence/pkg/plugin"
)

// TestInstanceMustBeTheNodes: a target whose instance is not the one the node's
// providerID names is sent nothing, stopped or running, on EC2 and on Nova; the call
// fails TargetMismatch naming both. The node's ID (bare or as a providerID) matches;
// none is "not checked".
func TestInstanceMustBeTheNodes(t *testing.T) {
	const otherEC2, otherNova = "i-0aaaaaaaaaaaaaaaa", "0b0b0b0b-9d0b-4f3a-8a3e-1c6b2a7d9e01"
	tests := map[string]struct {
		expect, id   string
		wantMismatch bool
		wantEvidence string
	}{
		"another instance":        {expect: otherEC2, id: fakeID, wantMismatch: true},
		"another providerID":      {expect: "aws:///us-east-1a/" + otherEC2, id: fakeID, wantMismatch: true},
		"the node's":              {expect: fakeID, id: fakeID, wantEvidence: "matches"},
		"the node's providerID":   {expect: "aws:///us-east-1a/" + fakeID, id: fakeID, wantEvidence: "matches"},
		"the node reports none":   {id: fakeID, wantEvidence: "identity not checked"},
		"another nova server":     {expect: otherNova, id: srvID, wantMismatch: true},
		"the node's nova, upcase": {expect: strings.ToUpper(srvID), id: srvID, wantEvidence: "matches"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var req plugin.Request
			var sent func() []string
			if tc.id == srvID {
				f := newFakeNova(t, map[string]*fakeServer{srvID: {status: "SHUTOFF"}})
				req, sent = osRequest(f, srvID), f.sent
			} else {
				f := &fakeEC2{state: "stopped", stopTo: "stopped"}
				req = awsRequest(newFakeEC2(t, f), "us-east-1a", fakeID)
				sent = func() []string { _, calls, _ := f.snapshot(); return calls }
			}
			req.ExpectIdentity = tc.expect
			res, err := testAgent().Fence(fixture.CallCtx(t, 20*time.Second), req, plugin.ActionOff)
			if res.Identity != tc.id {
				t.Errorf("identity %q, want %q", res.Identity, tc.id)
			}
			if !tc.wantMismatch {
				if err != nil || !strings.Contains(res.Evidence, tc.wantEvidence) {
					t.Errorf("fence = %+v, %v; want success with %q", res, err, tc.wantEvidence)
				}
				return
			}
			if plugin.KindOf(err) != plugin.KindTargetMismatch || !strings.Contains(err.Error(), tc.id) {
				t.Fatalf("fence = %+v, %v; want TargetMismatch naming %s", res, err, tc.id)
			}
			if calls := sent(); len(calls) != 0 {
				t.Errorf("calls sent on a mismatch: %v", calls)
			}
		})
	}
}
