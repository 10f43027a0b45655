package iscsi

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// removedPrefix starts the one evidence line a machine reads back. Its grammar:
//
//	removed: none
//	removed: RECORD[; RECORD...]
//	RECORD = target=<target-iqn> [tpg=<n>] (iqn=<initiator-iqn> | addr=<ip>) [luns=<m>-<n>[,<m>-<n>...]]
//
// tpg appears for LIO only; luns lists an LIO ACL's mapped LUNs (mapped LUN - TPG LUN),
// or is "none" for an ACL that mapped none.
// Names never hold spaces, ';', '=' or ',' (checkName), so the line splits unambiguously.
const removedPrefix = "removed:"

// removal is one ACL rule the agent took off one target.
type removal struct {
	Target string
	TPG    int
	Rule   Rule
}

func (r removal) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "target=%s", r.Target)
	if r.TPG > 0 {
		fmt.Fprintf(&b, " tpg=%d", r.TPG)
	}
	fmt.Fprintf(&b, " %s=%s", r.Rule.Kind, r.Rule.Value)
	switch {
	case len(r.Rule.LUNs) > 0:
		fmt.Fprintf(&b, " luns=%s", strings.Join(r.Rule.LUNs, ","))
	case r.Rule.LUNs != nil:
		b.WriteString(" luns=none") // an ACL that mapped no LUN, unlike one never read
	}
	return b.String()
}

// formatRemoved renders the removed line.
func formatRemoved(rs []removal) string {
	if len(rs) == 0 {
		return removedPrefix + " none"
	}
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = r.String()
	}
	return removedPrefix + " " + strings.Join(parts, "; ")
}

// parseRemoved reads every removed line in evidence, which may be the evidence of several
// Fence calls joined together, and returns the union of their records in order. Evidence
// without any removed line is an error: it is not the output of a Fence.
func parseRemoved(evidence string) ([]removal, error) {
	var out []removal
	seen := map[string]bool{}
	found := false
	for _, line := range strings.Split(evidence, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), removedPrefix)
		if !ok {
			continue
		}
		found = true
		rest = strings.TrimSpace(rest)
		if rest == "none" {
			continue
		}
		for _, part := range strings.Split(rest, ";") {
			r, err := parseRemoval(strings.TrimSpace(part))
			if err != nil {
				return nil, err
			}
			if key := r.String(); !seen[key] {
				seen[key] = true
				out = append(out, r)
			}
		}
	}
	if !found {
		return nil, errors.New("no \"removed:\" line; pass the evidence of the fence call")
	}
	return out, nil
}

func parseRemoval(s string) (removal, error) {
	var r removal
	for _, field := range strings.Fields(s) {
		key, val, ok := strings.Cut(field, "=")
		if !ok || val == "" {
			return removal{}, fmt.Errorf("record %q: field %q is not key=value", s, field)
		}
		switch key {
		case "target":
			r.Target = val
		case "tpg":
			n, err := strconv.Atoi(val)
			if err != nil || n < 1 {
				return removal{}, fmt.Errorf("record %q: tpg %q is not a positive number", s, val)
			}
			r.TPG = n
		case string(RuleIQN), string(RuleAddr):
			if r.Rule.Kind != "" {
				return removal{}, fmt.Errorf("record %q: more than one rule", s)
			}
			r.Rule.Kind, r.Rule.Value = RuleKind(key), val
		case "luns":
			r.Rule.LUNs = []string{}
			if val == "none" {
				continue
			}
			for _, m := range strings.Split(val, ",") {
				if _, _, err := parseLUNMap(m); err != nil {
					return removal{}, fmt.Errorf("record %q: %w", s, err)
				}
				r.Rule.LUNs = append(r.Rule.LUNs, m)
			}
		default:
			return removal{}, fmt.Errorf("record %q: unknown field %q", s, key)
		}
	}
	if r.Target == "" || r.Rule.Kind == "" {
		return removal{}, fmt.Errorf("record %q: want target= and iqn= or addr=", s)
	}
	if err := checkName(r.Target); err != nil {
		return removal{}, fmt.Errorf("record %q: target: %w", s, err)
	}
	if r.Rule.Kind == RuleAddr && net.ParseIP(r.Rule.Value) == nil {
		return removal{}, fmt.Errorf("record %q: addr %q is not an IP address", s, r.Rule.Value)
	}
	if r.Rule.Kind == RuleIQN {
		if err := checkName(r.Rule.Value); err != nil {
			return removal{}, fmt.Errorf("record %q: iqn: %w", s, err)
		}
	}
	return r, nil
}

// parseLUNMap reads "m-n": mapped LUN m of an ACL points at LUN n of the TPG.
func parseLUNMap(s string) (mapped, tpgLUN int, err error) {
	a, b, ok := strings.Cut(s, "-")
	m, err1 := strconv.Atoi(a)
	n, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil || m < 0 || n < 0 {
		return 0, 0, fmt.Errorf("lun mapping %q is not <mapped>-<tpg lun>", s)
	}
	return m, n, nil
}
