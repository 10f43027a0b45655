package netfence

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// NodeTarget is the target of a NetworkFence agent for node: its addresses of the given
// types (status.addresses), each as a CIDR of one address, comma-separated. A node
// with none of them has no target, and nothing is fenced for it.
func NodeTarget(node *corev1.Node, addressTypes []string) (string, error) {
	var cidrs []string
	for _, a := range node.Status.Addresses {
		if !slices.Contains(addressTypes, string(a.Type)) {
			continue
		}
		p, err := prefixOf(a.Address)
		if err != nil {
			return "", fmt.Errorf("node %s: status.addresses %s %q: %w", node.Name, a.Type, a.Address, err)
		}
		if s := p.String(); !slices.Contains(cidrs, s) {
			cidrs = append(cidrs, s)
		}
	}
	if len(cidrs) == 0 {
		return "", fmt.Errorf("node %s has no address of type %s to fence", node.Name, strings.Join(addressTypes, " or "))
	}
	return strings.Join(cidrs, ","), nil
}

// ParseTarget reads a target: a comma-separated list of CIDRs or addresses (an address
// stands for its /32 or /128), normalized. A CIDR wider than a /16 (IPv4) or /48 (IPv6)
// is refused: fencing one node's storage access must not cut off its neighbours'.
func ParseTarget(target string) ([]string, error) {
	var out []string
	for _, f := range strings.Split(target, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		p, err := prefixOf(f)
		if err != nil {
			return nil, fmt.Errorf("target %q: %w", target, err)
		}
		if s := p.String(); !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("target %q names no CIDR", target)
	}
	return out, nil
}

// prefixOf reads a CIDR or an address as a prefix, with its host bits cleared.
func prefixOf(s string) (netip.Prefix, error) {
	if !strings.Contains(s, "/") {
		addr, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Prefix{}, errors.New("neither an IP address nor a CIDR")
		}
		return netip.PrefixFrom(addr.Unmap(), addr.Unmap().BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, errors.New("neither an IP address nor a CIDR")
	}
	if bits := p.Bits(); p.Addr().Is4In6() {
		if bits < 96 {
			return netip.Prefix{}, fmt.Errorf("%s mixes an IPv4 address with an IPv6 prefix length", s)
		}
		p = netip.PrefixFrom(p.Addr().Unmap(), bits-96)
	}
	p = p.Masked()
	if minBits := map[bool]int{true: 16, false: 48}[p.Addr().Is4()]; p.Bits() < minBits {
		return netip.Prefix{}, fmt.Errorf("%s is wider than /%d: it would fence more than one node", s, minBits)
	}
	return p, nil
}
