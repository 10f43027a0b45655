package iscsi_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kubefence/kubefence/pkg/fenceagent/iscsi"
	"github.com/kubefence/kubefence/pkg/plugin"
)

// configfs builds the LIO configfs shape in a temporary directory: targets with one TPG,
// LUNs 0 and 1, and node ACLs mapping LUN n to TPG LUN n (node-a with a live session in
// its info file).
type configfs struct{ root string }

const sessionInfo = `InitiatorName: %s
LIO Session ID: 4   ISID: 0x400001370000 TSIH: 2  SessionType: Normal
Session State: TARG_SESS_STATE_LOGGED_IN
----------------------[iSCSI Connections]-------------------------
CID: 0  Connection State: TARG_CONN_STATE_LOGGED_IN
   Address 10.0.0.11 TCP  StatSN: 0x00000003
`

func newConfigfs(t *testing.T, targets ...string) *configfs {
	t.Helper()
	c := &configfs{root: t.TempDir()}
	c.mkdir(t, "iscsi", "discovery_auth")
	for _, tgt := range targets {
		tpg := filepath.Join("iscsi", tgt, "tpgt_1")
		c.write(t, filepath.Join(tpg, "attrib", "generate_node_acls"), "0\n")
		for _, lun := range []string{"lun_0", "lun_1"} {
			c.mkdir(t, tpg, "lun", lun)
		}
		for _, ini := range []string{nodeA, nodeB} {
			info := "No active iSCSI Session for Initiator Endpoint: " + ini + "\n"
			if ini == nodeA {
				info = strings.ReplaceAll(sessionInfo, "%s", ini)
			}
			c.write(t, filepath.Join(tpg, "acls", ini, "info"), info)
			for _, lun := range []string{"lun_0", "lun_1"} {
				c.mkdir(t, tpg, "acls", ini, lun)
				c.write(t, filepath.Join(tpg, "acls", ini, lun, "write_protect"), "0\n")
				if err := os.Symlink(filepath.Join(c.root, tpg, "lun", lun), filepath.Join(c.root, tpg, "acls", ini, lun, "7a3c")); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	return c
}

func (c *configfs) mkdir(t *testing.T, parts ...string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(append([]string{c.root}, parts...)...), 0o755); err != nil {
		t.Fatal(err)
	}
}

func (c *configfs) write(t *testing.T, rel, content string) {
	t.Helper()
	c.mkdir(t, filepath.Dir(rel))
	if err := os.WriteFile(filepath.Join(c.root, rel), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (c *configfs) acls(t *testing.T, target string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(c.root, "iscsi", target, "tpgt_1", "acls"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// lunLinks lists "lun_M -> lun_K" for an ACL, read from the tree itself.
func (c *configfs) lunLinks(t *testing.T, target, ini string) []string {
	t.Helper()
	links, err := filepath.Glob(filepath.Join(c.root, "iscsi", target, "tpgt_1", "acls", ini, "lun_*", "*"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range links {
		if dest, err := os.Readlink(l); err == nil {
			out = append(out, filepath.Base(filepath.Dir(l))+" -> "+filepath.Base(dest))
		}
	}
	slices.Sort(out)
	return out
}

func (c *configfs) request(params map[string]string) plugin.Request {
	p := map[string]string{iscsi.ParamBackend: iscsi.BackendLIO, iscsi.ParamConfigfsRoot: c.root,
		iscsi.ParamVerifyTimeout: "2s", iscsi.ParamPollInterval: "20ms"}
	for k, v := range params {
		p[k] = v
	}
	return plugin.Request{Node: "node-a", Target: nodeA, Params: p}
}

func TestLIOFenceAndRestore(t *testing.T) {
	c := newConfigfs(t, disk1, disk2)
	agent := iscsi.New()
	ctx := context.Background()
	wantLinks := []string{"lun_0 -> lun_0", "lun_1 -> lun_1"}

	st, err := agent.Status(ctx, c.request(nil))
	if err != nil || st.State != plugin.StateOn {
		t.Fatalf("status before fence = %q, %v", st.State, err)
	}
	res, err := agent.Fence(ctx, c.request(nil), plugin.ActionOff)
	if err != nil || res.State != plugin.StateOff {
		t.Fatalf("fence = %q, %v\n%s", res.State, err, res.Evidence)
	}
	want := "removed: target=" + disk1 + " tpg=1 iqn=" + nodeA + " luns=0-0,1-1; target=" + disk2 + " tpg=1 iqn=" + nodeA + " luns=0-0,1-1"
	if !strings.Contains(res.Evidence, want) {
		t.Errorf("evidence lacks %q:\n%s", want, res.Evidence)
	}
	for _, disk := range []string{disk1, disk2} {
		if got := c.acls(t, disk); !slices.Equal(got, []string{nodeB}) {
			t.Errorf("%s acls after fence = %v, want only node-b", disk, got)
		}
		if got := c.lunLinks(t, disk, nodeB); !slices.Equal(got, wantLinks) {
			t.Errorf("%s node-b luns after fence = %v", disk, got)
		}
	}
	if again, err := agent.Fence(ctx, c.request(nil), plugin.ActionOff); err != nil || !strings.Contains(again.Evidence, "removed: none") {
		t.Fatalf("second fence = %v\n%s", err, again.Evidence)
	}
	un, err := agent.Unfence(ctx, c.request(map[string]string{iscsi.ParamRestore: res.Evidence}))
	if err != nil || un.State != plugin.StateOn {
		t.Fatalf("unfence = %q, %v\n%s", un.State, err, un.Evidence)
	}
	for _, disk := range []string{disk1, disk2} {
		if got := c.acls(t, disk); !slices.Equal(got, []string{nodeA, nodeB}) {
			t.Errorf("%s acls after unfence = %v", disk, got)
		}
		if got := c.lunLinks(t, disk, nodeA); !slices.Equal(got, wantLinks) {
			t.Errorf("%s node-a luns after unfence = %v, want %v", disk, got, wantLinks)
		}
	}
}

// TestLIOUnfenceWithoutRestore maps every TPG LUN on every protected target.
func TestLIOUnfenceWithoutRestore(t *testing.T) {
	c := newConfigfs(t, disk1)
	agent := iscsi.New()
	if _, err := agent.Fence(context.Background(), c.request(nil), plugin.ActionOff); err != nil {
		t.Fatal(err)
	}
	if _, err := agent.Unfence(context.Background(), c.request(nil)); err != nil {
		t.Fatal(err)
	}
	if got := c.lunLinks(t, disk1, nodeA); !slices.Equal(got, []string{"lun_0 -> lun_0", "lun_1 -> lun_1"}) {
		t.Errorf("node-a luns = %v", got)
	}
}

func TestLIOErrors(t *testing.T) {
	tests := map[string]struct {
		setup    func(t *testing.T, c *configfs) map[string]string
		kind     plugin.ErrorKind
		contains string
	}{
		"demo mode": {func(t *testing.T, c *configfs) map[string]string {
			c.write(t, filepath.Join("iscsi", disk2, "tpgt_1", "attrib", "generate_node_acls"), "1\n")
			return nil
		}, plugin.KindPermanent, "demo mode"},
		"unknown target": {func(*testing.T, *configfs) map[string]string {
			return map[string]string{iscsi.ParamTargets: "iqn.2024-01.io.kubefence.test:nope"}
		}, plugin.KindPermanent, "not found"},
		"no configfs": {func(*testing.T, *configfs) map[string]string {
			return map[string]string{iscsi.ParamConfigfsRoot: "/nonexistent/config/target"}
		}, plugin.KindTargetUnreachable, "configfs mounted"},
		"address with lio": {func(*testing.T, *configfs) map[string]string {
			return map[string]string{iscsi.ParamInitiatorAddress: "10.0.0.11"}
		}, plugin.KindPermanent, iscsi.ParamInitiatorAddress},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c := newConfigfs(t, disk1, disk2)
			params := tc.setup(t, c)
			_, err := iscsi.New().Fence(context.Background(), c.request(params), plugin.ActionOff)
			if err == nil || plugin.KindOf(err) != tc.kind || !strings.Contains(err.Error(), tc.contains) {
				t.Fatalf("fence = %v (kind %s), want kind %s containing %q", err, plugin.KindOf(err), tc.kind, tc.contains)
			}
			if got := c.acls(t, disk1); !slices.Equal(got, []string{nodeA, nodeB}) {
				t.Errorf("acls after a failed fence = %v, want untouched", got)
			}
		})
	}
}

// TestLIORestoreRefusesOtherInitiators: a restore record naming another initiator is
// refused before anything is bound.
func TestLIORestoreRefusesOtherInitiators(t *testing.T) {
	c := newConfigfs(t, disk1)
	restore := "removed: target=" + disk1 + " tpg=1 iqn=" + nodeA + "; target=" + disk1 + " tpg=1 iqn=iqn.2024-01.io.kubefence.test:node-c"
	if _, err := iscsi.New().Fence(context.Background(), c.request(nil), plugin.ActionOff); err != nil {
		t.Fatal(err)
	}
	_, err := iscsi.New().Unfence(context.Background(), c.request(map[string]string{iscsi.ParamRestore: restore}))
	if plugin.KindOf(err) != plugin.KindPermanent || err == nil || !strings.Contains(err.Error(), "names another initiator") {
		t.Fatalf("unfence = %v, want a permanent refusal", err)
	}
	if got := c.acls(t, disk1); !slices.Equal(got, []string{nodeB}) {
		t.Errorf("acls after a refused restore = %v, want only node-b", got)
	}
}
