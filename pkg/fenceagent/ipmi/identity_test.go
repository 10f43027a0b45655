package ipmi_test

import (
	"strings"
	"testing"
	"time"

	"github.com/kubefence/kubefence/pkg/fenceagent/ipmi"
	"github.com/kubefence/kubefence/pkg/internal/fixture"
	"github.com/kubefence/kubefence/pkg/plugin"
	"github.com/kubefence/kubefence/test/sim/bmc"
	"github.com/kubefence/kubefence/test/sim/redfish"
)

// otherGUID is a systemUUID no test BMC has.
const otherGUID = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"

// TestFenceRefusesAnotherMachinesBMC: a BMC whose system GUID is not the node's
// systemUUID is sent nothing, neither a power off when it is on nor the "already off"
// success when it is off (a powered-off spare named by mistake); the call fails
// TargetMismatch naming both identities. Status says so too.
func TestFenceRefusesAnotherMachinesBMC(t *testing.T) {
	t.Parallel()
	for name, on := range map[string]bool{"on": true, "already off": false} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := startBMC(t, bmc.IPMIOptions{PoweredOn: on})
			req := requestFor(s)
			req.ExpectIdentity = otherGUID
			agent := ipmi.New()
			for _, action := range []plugin.Action{plugin.ActionOff, plugin.ActionReboot, plugin.ActionOn} {
				res, err := agent.Fence(fixture.CallCtx(t, 15*time.Second), req, action)
				if plugin.KindOf(err) != plugin.KindTargetMismatch {
					t.Fatalf("fence %s = %+v, %v; want TargetMismatch", action, res, err)
				}
				for _, want := range []string{s.GUID(), otherGUID} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error %q does not name %s", err, want)
					}
				}
				if res.Identity != s.GUID() || strings.Contains(res.Evidence, "sent power") {
					t.Errorf("fence %s result %+v, want identity %s and nothing sent", action, res, s.GUID())
				}
			}
			if got := actions(t, s); len(got) != 0 || poweredOn(t, s) != on {
				t.Errorf("bmc events %v, on=%v; want none and the state it had", got, poweredOn(t, s))
			}
			if res, err := agent.Status(fixture.CallCtx(t, 10*time.Second), req); plugin.KindOf(err) != plugin.KindTargetMismatch || res.Identity != s.GUID() {
				t.Errorf("status = %+v, %v; want TargetMismatch with the identity read", res, err)
			}
		})
	}
}

// TestFenceAcceptsTheNodesGUIDInEachByteOrder: the node's systemUUID as Linux reads it
// from SMBIOS (first three fields little-endian, upper case), as the BMC sends it, and
// as ipmitool's "mc guid" prints it all match; the result carries the GUID read.
func TestFenceAcceptsTheNodesGUIDInEachByteOrder(t *testing.T) {
	t.Parallel()
	s := startBMC(t, bmc.IPMIOptions{PoweredOn: true, GUID: "a082c1f15e78c99bac2c69bf6acea05e"})
	if s.SystemUUID() != "F1C182A0-785E-9BC9-AC2C-69BF6ACEA05E" {
		t.Fatalf("sim systemUUID %s", s.SystemUUID())
	}
	agent := ipmi.New()
	for _, expect := range []string{s.SystemUUID(), s.GUID(), "5ea0ce6a-bf69-2cac-9bc9-785ef1c182a0"} {
		req := requestFor(s)
		req.ExpectIdentity = expect
		res, err := agent.Fence(fixture.CallCtx(t, 15*time.Second), req, plugin.ActionOff)
		if err != nil {
			t.Fatalf("fence with systemUUID %s: %v", expect, err)
		}
		if res.Identity != s.GUID() || !strings.Contains(res.Evidence, "matches the node's systemUUID "+expect) {
			t.Errorf("result %+v, want identity %s matched", res, s.GUID())
		}
	}
	if poweredOn(t, s) {
		t.Error("bmc still on after a fence whose identity matched")
	}
}

// TestIdentityNotCheckedWithoutTheNodes: a node that reports no systemUUID is fenced as
// before, and the result says the identity was not checked, with the GUID read.
func TestIdentityNotCheckedWithoutTheNodes(t *testing.T) {
	t.Parallel()
	s := startBMC(t, bmc.IPMIOptions{PoweredOn: true})
	res, err := ipmi.New().Fence(fixture.CallCtx(t, 15*time.Second), requestFor(s), plugin.ActionOff)
	if err != nil {
		t.Fatalf("fence: %v", err)
	}
	if res.Identity != s.GUID() || !strings.Contains(res.Evidence, "identity not checked") {
		t.Errorf("result %+v, want identity %s, not checked", res, s.GUID())
	}
	if poweredOn(t, s) {
		t.Error("bmc still on")
	}
}

// TestRedfishComparesTheSystemUUID: over Redfish the ComputerSystem's UUID is the device's
// identity: another machine's is refused before any reset, already off or not, the
// node's (any case) is fenced, and a system without a UUID is fenced "not checked".
func TestRedfishComparesTheSystemUUID(t *testing.T) {
	t.Parallel()
	const uuid = "4c4c4544-0042-3510-8052-b4c04f335331"
	tests := map[string]struct {
		uuid, expect string
		on           bool
		wantKind     plugin.ErrorKind
		wantEvidence string
	}{
		"another machine's, on":          {uuid: uuid, expect: otherGUID, on: true, wantKind: plugin.KindTargetMismatch},
		"another machine's, already off": {uuid: uuid, expect: otherGUID, wantKind: plugin.KindTargetMismatch},
		"the node's":                     {uuid: uuid, expect: strings.ToUpper(uuid), on: true, wantEvidence: "matches the node's systemUUID"},
		"the system has none":            {expect: uuid, on: true, wantEvidence: "identity not checked"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := startRedfish(t, redfish.Options{Systems: []redfish.SystemOptions{{ID: "1", PoweredOn: tc.on, UUID: tc.uuid}}})
			req := redfishRequest(s)
			req.ExpectIdentity = tc.expect
			res, err := ipmi.New().Fence(fixture.CallCtx(t, 10*time.Second), req, plugin.ActionOff)
			if tc.wantKind != "" {
				if plugin.KindOf(err) != tc.wantKind || !strings.Contains(err.Error(), tc.uuid) || !strings.Contains(err.Error(), tc.expect) {
					t.Fatalf("fence = %+v, %v; want %s naming both", res, err, tc.wantKind)
				}
				if got := rfEvents(t, s, "1"); got != "" || rfOn(t, s, "1") != tc.on {
					t.Errorf("events %q, on=%v; want none and the state it had", got, rfOn(t, s, "1"))
				}
				return
			}
			if err != nil || res.Identity != tc.uuid || !strings.Contains(res.Evidence, tc.wantEvidence) || rfOn(t, s, "1") {
				t.Errorf("fence = %+v, %v; want off with identity %q and %q", res, err, tc.uuid, tc.wantEvidence)
			}
		})
	}
}
