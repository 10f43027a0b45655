package iscsi_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kubefence/kubefence/pkg/fenceagent/iscsi"
	"github.com/kubefence/kubefence/pkg/internal/fixture"
	"github.com/kubefence/kubefence/pkg/plugin"
	"github.com/kubefence/kubefence/pkg/plugin/plugintest"
)

// TestConformance runs the agent-contract kit against a real tgtd. The target's real
// state is read from tgtd by the harness: on while node-a has an ACL rule or a session.
func TestConformance(t *testing.T) {
	plugintest.Run(t, plugintest.Kit{
		Agent:       iscsi.New(),
		Unfenceable: true,
		NewTarget: func(t *testing.T) plugintest.Target {
			s := startStorage(t)
			tid := s.tids[disk1]
			return plugintest.Target{
				Request: s.request(nodeA, map[string]string{iscsi.ParamTargets: disk1}),
				Observe: func() (plugin.PowerState, error) {
					ctx := fixture.CallCtx(t, 10*time.Second)
					acl, err := s.ACL(ctx, tid)
					if err != nil {
						return plugin.StateUnknown, err
					}
					sessions, err := s.Initiators(ctx, tid)
					if err != nil {
						return plugin.StateUnknown, err
					}
					if slices.Contains(acl, nodeA) || slices.Contains(sessions, nodeA) {
						return plugin.StateOn, nil
					}
					return plugin.StateOff, nil
				},
			}
		},
		BadParams: map[string]map[string]string{
			"backend":           {iscsi.ParamBackend: "iet"},
			"address":           {iscsi.ParamInitiatorAddress: "not-an-ip"},
			"targets":           {iscsi.ParamTargets: "disk1"},
			"control port":      {iscsi.ParamControlPort: "-" + strconv.Itoa(1)},
			"timeout":           {iscsi.ParamTimeout: "0s"},
			"restore":           {iscsi.ParamRestore: "removed: target=iqn.x:t iqn=iqn.x:a colour=red"},
			"relative configfs": {iscsi.ParamBackend: iscsi.BackendLIO, iscsi.ParamConfigfsRoot: "config/target"},
			"unknown":           {"password": "x"},
		},
	})
}

func TestValidateNamesEveryBadParam(t *testing.T) {
	err := iscsi.New().Validate(context.Background(), map[string]string{
		iscsi.ParamBackend:      "tgt",
		iscsi.ParamTargets:      "iqn.x:ok, disk2",
		iscsi.ParamLLD:          "--force",
		iscsi.ParamPollInterval: "soon",
	})
	if plugin.KindOf(err) != plugin.KindPermanent {
		t.Fatalf("validate = %v, want a permanent error", err)
	}
	for _, name := range []string{iscsi.ParamTargets, `"disk2"`, iscsi.ParamLLD, iscsi.ParamPollInterval} {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("validate error %q does not name %s", err, name)
		}
	}
	if err := iscsi.New().Validate(context.Background(), nil); err != nil {
		t.Errorf("validate of the defaults: %v", err)
	}
}

func TestRequestErrors(t *testing.T) {
	tests := map[string]struct {
		req      plugin.Request
		action   plugin.Action
		kind     plugin.ErrorKind
		contains string
	}{
		"reboot":            {plugin.Request{Target: "iqn.x:a"}, plugin.ActionReboot, plugin.KindUnsupported, "off or on"},
		"no initiator":      {plugin.Request{}, plugin.ActionOff, plugin.KindPermanent, iscsi.ParamInitiatorAddress},
		"target not an iqn": {plugin.Request{Target: "node-a"}, plugin.ActionOff, plugin.KindPermanent, "not an iSCSI name"},
		"option as target":  {plugin.Request{Target: "--force"}, plugin.ActionOff, plugin.KindPermanent, "not an iSCSI name"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := iscsi.New().Fence(context.Background(), tc.req, tc.action)
			if plugin.KindOf(err) != tc.kind || err == nil || !strings.Contains(err.Error(), tc.contains) {
				t.Errorf("fence = %v (kind %s), want kind %s containing %q", err, plugin.KindOf(err), tc.kind, tc.contains)
			}
		})
	}
}
