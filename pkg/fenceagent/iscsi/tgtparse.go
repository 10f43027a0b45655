package iscsi

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// parseTgtShow reads `tgtadm --lld iscsi --op show --mode target` (tgt 1.0.x):
//
//	Target 1: iqn.2024-01.io.test:t1
//	    System information:
//	        Driver: iscsi
//	        State: ready
//	    I_T nexus information:
//	        I_T nexus: 2
//	            Initiator: iqn.2024-01.io.test:node-a alias: none
//	            Connection: 0
//	                IP Address: 127.0.0.1
//	    LUN information:
//	        LUN: 0
//	            ...
//	    Account information:
//	    ACL information:
//	        127.0.0.2
//	        iqn.2024-01.io.test:node-a
//
// Sections start at four spaces of indent, their items deeper. ACL lines mix address
// rules (-I: an IP, a subnet, or ALL) with IQN rules (-Q); tgt prints both the same way,
// so a line that is an IP, a subnet or ALL is an address rule and anything else an IQN.
func parseTgtShow(out string) ([]Target, error) {
	var targets []Target
	var t *Target
	section := ""
	var sess, ini string
	for n, raw := range strings.Split(out, "\n") {
		line := strings.TrimSpace(raw)
		if line == "" {
			continue
		}
		indent := len(raw) - len(strings.TrimLeft(raw, " \t"))
		if indent == 0 {
			rest, ok := strings.CutPrefix(line, "Target ")
			id, name, ok2 := strings.Cut(rest, ": ")
			if _, err := strconv.Atoi(id); !ok || !ok2 || err != nil || name == "" {
				return nil, fmt.Errorf("parse tgtadm show line %d %q: want \"Target <tid>: <iqn>\"", n+1, line)
			}
			targets = append(targets, Target{Name: strings.TrimSpace(name), ID: id})
			t, section, sess, ini = &targets[len(targets)-1], "", "", ""
			continue
		}
		if t == nil {
			return nil, fmt.Errorf("parse tgtadm show line %d %q: no target before it", n+1, line)
		}
		if indent <= 4 {
			section = strings.TrimSuffix(line, ":")
			continue
		}
		switch section {
		case "ACL information":
			t.Rules = append(t.Rules, tgtRule(line))
		case "I_T nexus information":
			if err := t.nexusLine(line, &sess, &ini); err != nil {
				return nil, fmt.Errorf("parse tgtadm show line %d: target %s: %w", n+1, t.Name, err)
			}
		}
	}
	return targets, nil
}

// nexusLine reads one line of an I_T nexus block: a session, its initiator, and its
// connections each followed by an IP Address line.
func (t *Target) nexusLine(line string, sess, ini *string) error {
	key, val, _ := strings.Cut(line, ":")
	val = strings.TrimSpace(val)
	switch key {
	case "I_T nexus":
		*sess, *ini = val, ""
	case "Initiator":
		// "iqn.... alias: none": the name is the first field.
		if f := strings.Fields(val); len(f) > 0 {
			*ini = f[0]
		}
	case "Connection":
		if *sess == "" {
			return fmt.Errorf("connection %q outside an I_T nexus", val)
		}
		t.Connections = append(t.Connections, Connection{Session: *sess, ID: val, Initiator: *ini})
	case "IP Address":
		if len(t.Connections) == 0 || t.Connections[len(t.Connections)-1].Session != *sess {
			return fmt.Errorf("ip address %q outside a connection", val)
		}
		t.Connections[len(t.Connections)-1].Address = val
	}
	return nil
}

func tgtRule(line string) Rule {
	if strings.EqualFold(line, allRule) || net.ParseIP(line) != nil {
		return Rule{Kind: RuleAddr, Value: line}
	}
	if _, _, err := net.ParseCIDR(line); err == nil {
		return Rule{Kind: RuleAddr, Value: line}
	}
	return Rule{Kind: RuleIQN, Value: line}
}
