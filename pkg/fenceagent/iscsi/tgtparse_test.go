package iscsi

import (
	"reflect"
	"strings"
	"testing"
)

// showOutput is `tgtadm -C N --lld iscsi --op show --mode target` of tgt 1.0.85 (Debian
// 12) with one session open, LUN details shortened.
const showOutput = `Target 1: iqn.2024-01.io.test:t1
    System information:
        Driver: iscsi
        State: ready
    I_T nexus information:
        I_T nexus: 2
            Initiator: iqn.2024-01.io.test:node-a alias: none
            Connection: 0
                IP Address: 127.0.0.1
    LUN information:
        LUN: 0
            Type: controller
            SCSI ID: IET     00010000
            Backing store path: None
            Backing store flags: 
        LUN: 1
            Type: disk
            Backing store path: /tmp/tgtx/lun1.img
    Account information:
    ACL information:
        127.0.0.2
        iqn.2024-01.io.test:node-a
Target 2: iqn.2024-01.io.test:t2
    System information:
        Driver: iscsi
        State: ready
    I_T nexus information:
    LUN information:
        LUN: 0
            Type: controller
    Account information:
    ACL information:
        ALL
        10.0.0.0/24
`

func TestParseTgtShow(t *testing.T) {
	tests := map[string]struct {
		in      string
		want    []Target
		wantErr string
	}{
		"real output": {in: showOutput, want: []Target{
			{Name: "iqn.2024-01.io.test:t1", ID: "1",
				Rules:       []Rule{{Kind: RuleAddr, Value: "127.0.0.2"}, {Kind: RuleIQN, Value: "iqn.2024-01.io.test:node-a"}},
				Connections: []Connection{{Session: "2", ID: "0", Initiator: "iqn.2024-01.io.test:node-a", Address: "127.0.0.1"}}},
			{Name: "iqn.2024-01.io.test:t2", ID: "2",
				Rules: []Rule{{Kind: RuleAddr, Value: "ALL"}, {Kind: RuleAddr, Value: "10.0.0.0/24"}}},
		}},
		"no targets": {in: "", want: nil},
		"two connections in one session": {in: "Target 3: iqn.x:t\n    I_T nexus information:\n        I_T nexus: 7\n" +
			"            Initiator: iqn.x:n alias: none\n            Connection: 0\n                IP Address: ::1\n" +
			"            Connection: 1\n                IP Address: 10.1.1.1\n",
			want: []Target{{Name: "iqn.x:t", ID: "3", Connections: []Connection{
				{Session: "7", ID: "0", Initiator: "iqn.x:n", Address: "::1"},
				{Session: "7", ID: "1", Initiator: "iqn.x:n", Address: "10.1.1.1"}}}}},
		"garbage header":        {in: "Targets: none\n", wantErr: "line 1"},
		"section before target": {in: "    ACL information:\n        ALL\n", wantErr: "no target before it"},
		"connection outside nexus": {in: "Target 1: iqn.x:t\n    I_T nexus information:\n            Connection: 0\n",
			wantErr: "outside an I_T nexus"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := parseTgtShow(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestRemovedRoundTrip(t *testing.T) {
	rs := []removal{
		{Target: "iqn.x:t1", Rule: Rule{Kind: RuleIQN, Value: "iqn.x:a"}},
		{Target: "iqn.x:t2", Rule: Rule{Kind: RuleAddr, Value: "10.0.0.5"}},
		{Target: "iqn.x:t3", TPG: 2, Rule: Rule{Kind: RuleIQN, Value: "iqn.x:a", LUNs: []string{"0-1", "1-3"}}},
		{Target: "iqn.x:t4", TPG: 1, Rule: Rule{Kind: RuleIQN, Value: "iqn.x:a", LUNs: []string{}}},
	}
	line := formatRemoved(rs)
	want := "removed: target=iqn.x:t1 iqn=iqn.x:a; target=iqn.x:t2 addr=10.0.0.5; " +
		"target=iqn.x:t3 tpg=2 iqn=iqn.x:a luns=0-1,1-3; target=iqn.x:t4 tpg=1 iqn=iqn.x:a luns=none"
	if line != want {
		t.Fatalf("formatRemoved = %q\nwant %q", line, want)
	}
	// Two fence evidences joined: the union, each record once.
	got, err := parseRemoved("2024 step\n" + line + "\nother\nremoved: none\n" + line)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, rs) {
		t.Errorf("parseRemoved = %+v\nwant %+v", got, rs)
	}
}

func TestParseRemovedErrors(t *testing.T) {
	tests := map[string]string{
		"no removed line":    "just some evidence",
		"no rule":            "removed: target=iqn.x:t1",
		"two rules":          "removed: target=iqn.x:t1 iqn=iqn.x:a addr=1.2.3.4",
		"unknown field":      "removed: target=iqn.x:t1 iqn=iqn.x:a colour=red",
		"bad target name":    "removed: target=disk1 iqn=iqn.x:a",
		"bad lun map":        "removed: target=iqn.x:t1 tpg=1 iqn=iqn.x:a luns=0:1",
		"option as iqn rule": "removed: target=iqn.x:t1 iqn=--force",
	}
	for name, in := range tests {
		t.Run(name, func(t *testing.T) {
			if got, err := parseRemoved(in); err == nil {
				t.Errorf("parseRemoved(%q) = %+v, want an error", in, got)
			}
		})
	}
}
