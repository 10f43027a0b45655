package selffence

import (
	"strings"
	"testing"
	"time"
)

var s0 = time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)

func TestLive(t *testing.T) {
	members := []string{"a", "b", "c", "d", "e"}
	acks := func(peers ...string) map[string]time.Time {
		m := map[string]time.Time{}
		for _, p := range peers {
			m[p] = s0.Add(-5 * time.Second)
		}
		return m
	}
	for name, tc := range map[string]struct {
		view AgentView
		want string
	}{
		"a fresh read":                 {AgentView{Node: "a", Members: members, APIRead: s0.Add(-9 * time.Second)}, ""},
		"a NodeFence for the node":     {AgentView{Node: "a", Members: members, APIRead: s0, Read: []string{"c", "a"}}, "the cluster wants node a fenced: an open NodeFence for it"},
		"a NodeFence for another node": {AgentView{Node: "a", Members: members, APIRead: s0, Read: []string{"c"}, Relayed: []string{"d"}}, ""},
		// A fresh read of its own that does not list it decides: the relayed one began
		// after it and will show in the next read, or ended.
		"relayed for the node, a fresh read": {AgentView{Node: "a", Members: members, APIRead: s0.Add(-9 * time.Second), Relayed: []string{"a"}}, ""},
		"relayed for the node, an old read": {AgentView{Node: "a", Members: members, APIRead: s0.Add(-11 * time.Second), Relayed: []string{"a"}, Acks: acks("b", "c", "d")},
			"relayed by a peer while no read of its own is younger than 10s"},
		"relayed for the node, never read": {AgentView{Node: "a", Members: members, Relayed: []string{"a"}, Acks: acks("b", "c")}, "relayed by a peer"},
		"no read, answers from a majority": {AgentView{Node: "a", Members: members, Acks: acks("b", "c")}, ""},
		"no read, answers from half":       {AgentView{Node: "a", Members: members[:4], Acks: acks("b")}, "node a is cut off: no read from the API server never, and answers from 2 of 4 members"},
		"an old read, a minority":          {AgentView{Node: "a", Members: members, APIRead: s0.Add(-11 * time.Second), Acks: acks("b")}, "no read from the API server since 2026-11-24T11:59:49Z, and answers from 2 of 5"},
		"answers too old":                  {AgentView{Node: "a", Members: members, Acks: map[string]time.Time{"b": s0.Add(-11 * time.Second), "c": s0.Add(-11 * time.Second)}}, "answers from 1 of 5"},
		"answers from strangers":           {AgentView{Node: "a", Members: members, Acks: acks("x", "y", "z")}, "answers from 1 of 5"},
		"members never read":               {AgentView{Node: "a", Acks: acks("b", "c")}, "answers from 0 of 0"},
		"a member named twice counts once": {AgentView{Node: "a", Members: []string{"a", "b", "b", "b", "c", "d", "e"}, Acks: acks("b")}, "answers from 2 of 5"},
		"a member list without the node":   {AgentView{Node: "a", Members: []string{"b", "c"}, Acks: acks("b", "c")}, "answers from 0 of 2"},
	} {
		t.Run(name, func(t *testing.T) {
			got := Live(tc.view, 10*time.Second, s0)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Errorf("Live: %q, want %q", got, tc.want)
			}
		})
	}
}

// TestVerify: each reason a node is not eligible, the wait for a majority, the time it
// is verified at, and a sign of life too late to be the node's last.
func TestVerify(t *testing.T) {
	members := []string{"a", "b", "c"}
	p := Params{Isolation: 10 * time.Second, ReportMaxAge: time.Minute}
	good := func() Case {
		return Case{Visible: s0, BootID: "boot-1", Members: members, NewestMember: s0.Add(-time.Hour), ArmedBefore: s0.Add(-10 * time.Second),
			Report: &Report{At: s0.Add(-10 * time.Second), Armed: true, Timeout: 5 * time.Second, BootID: "boot-1", Members: []string{"c", "b", "a"}, Every: 10 * time.Second},
			Held:   map[string]time.Time{"b": s0.Add(2 * time.Second), "c": s0.Add(3 * time.Second)}}
	}
	for name, tc := range map[string]struct {
		change func(*Case)
		now    time.Duration
		state  State
		reason string
	}{
		"verified":                          {nil, 23 * time.Second, Verified, "a majority held the NodeFence at 2026-11-24T12:00:03Z"},
		"waiting":                           {nil, 22*time.Second + 999*time.Millisecond, Waiting, "reset certain at 2026-11-24T12:00:23Z"},
		"no majority yet":                   {func(c *Case) { delete(c.Held, "c") }, time.Hour, Waiting, "1 of 3 members hold the NodeFence; 2 needed"},
		"holders that are not members":      {func(c *Case) { c.Held = map[string]time.Time{"x": s0, "y": s0} }, time.Hour, Waiting, "0 of 3"},
		"a sign of life re-anchors":         {func(c *Case) { c.LastLife = s0.Add(10 * time.Second) }, 29 * time.Second, Waiting, "reset certain at 2026-11-24T12:00:30Z"},
		"a sign of life too late":           {func(c *Case) { c.LastLife = s0.Add(24 * time.Second) }, time.Hour, Contradicted, "sign of life at 2026-11-24T12:00:24Z"},
		"never reported":                    {func(c *Case) { c.Report = nil }, time.Hour, Ineligible, "never reported"},
		"no armed report before":            {func(c *Case) { c.ArmedBefore = time.Time{} }, time.Hour, Ineligible, "no report of an armed watchdog within 1m0s"},
		"an armed report too old":           {func(c *Case) { c.ArmedBefore = s0.Add(-61 * time.Second) }, time.Hour, Ineligible, "no report of an armed watchdog"},
		"disarmed since":                    {func(c *Case) { c.Report.Armed = false }, time.Hour, Ineligible, "not armed"},
		"another boot":                      {func(c *Case) { c.BootID = "boot-2" }, time.Hour, Ineligible, `reported boot "boot-1", the node runs boot "boot-2"`},
		"no boot ID":                        {func(c *Case) { c.BootID, c.Report.BootID = "", "" }, time.Hour, Ineligible, `reported boot ""`},
		"a member list naming a node twice": {func(c *Case) { c.Report.Members = []string{"a", "b", "b", "c"} }, time.Hour, Ineligible, "names a node twice"},
		"another member list":               {func(c *Case) { c.Members = []string{"a", "b", "c", "d"} }, time.Hour, Ineligible, "member list (3 nodes) is not the cluster's (4 nodes)"},
		"a node joined since the report":    {func(c *Case) { c.NewestMember = s0.Add(-5 * time.Second) }, time.Hour, Ineligible, "a node joined at"},
		"an emulated watchdog":              {func(c *Case) { c.Report.Emulated = true }, time.Hour, Ineligible, "emulated watchdog, which resets no machine"},
		"no report interval":                {func(c *Case) { c.Report.Every = 0 }, time.Hour, Ineligible, "does not say how often it reports"},
		// SIGTERM, then a partition: the kubelet renewed 21s after the agent's last word.
		"the agent went quiet, the kubelet lived on": {func(c *Case) { c.KubeletLife = s0.Add(11 * time.Second) }, time.Hour, Ineligible,
			"kubelet was seen alive at 2026-11-24T12:00:11Z, 21s after its agent's latest report (2026-11-24T11:59:50Z), more than two report intervals of 10s"},
		// A real partition silences both: the kubelet's last renewal 9s after the report.
		"a partition silences both": {func(c *Case) { c.KubeletLife, c.LastLife = s0.Add(-time.Second), s0.Add(-time.Second) }, 23 * time.Second, Verified, "a majority held"},
		"a goodbye after the latest report": {func(c *Case) { c.AgentLeft = s0.Add(-9 * time.Second) }, time.Hour, Ineligible,
			"the agent left its peers at 2026-11-24T11:59:51Z, after its latest report"},
		"a goodbye before the latest report (a rollout)":        {func(c *Case) { c.AgentLeft = s0.Add(-11 * time.Second) }, 23 * time.Second, Verified, "a majority held"},
		"a sign of life too late, from a quiet agent's kubelet": {func(c *Case) { c.LastLife, c.KubeletLife = s0.Add(24*time.Second), s0.Add(24*time.Second) }, time.Hour, Contradicted, "sign of life at 2026-11-24T12:00:24Z"},
	} {
		t.Run(name, func(t *testing.T) {
			c := good()
			if tc.change != nil {
				tc.change(&c)
			}
			v := Verify(c, p, s0.Add(tc.now))
			if v.State != tc.state || !strings.Contains(v.Reason, tc.reason) {
				t.Errorf("Verify: %s (%s), want %s (%s)", v.State, v.Reason, tc.state, tc.reason)
			}
			if c.Report != nil && c.Report.Emulated {
				test := p
				test.AllowEmulated = true
				if v := Verify(c, test, s0.Add(23*time.Second)); v.State != Verified {
					t.Errorf("Verify with watchdog.allowEmulated: %s (%s), want Verified", v.State, v.Reason)
				}
			}
		})
	}
}
