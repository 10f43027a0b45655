package realnode

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"time"
)

// The test network. The bridge and every address below are the test's own: nodes and the
// host's side of the test talk only on them (and loopback).
const (
	// bridgeCIDR is the bridge's address; nodes get bridgeNet.(10+i).
	bridgeIP   = "10.77.0.1"
	bridgeCIDR = bridgeIP + "/16"
	// bridgeMAC is fixed: a Linux bridge otherwise takes the lowest MAC of its ports, so
	// removing a dead node's veth could change it and black-hole every other node's
	// traffic until their ARP caches expire.
	bridgeMAC = "02:6b:66:00:00:01"
	// serviceIP is the kubernetes Service's ClusterIP (first address of the control
	// plane's --service-cluster-ip-range).
	serviceIP = "10.0.0.1"
)

// nodeIP is the address of node i (0-based) on the bridge.
func nodeIP(i int) string { return fmt.Sprintf("10.77.0.%d", 11+i) }

// podCIDR is node i's pod network.
func podCIDR(i int) string { return fmt.Sprintf("10.244.%d.0/24", i+1) }

// run runs a command with a bounded time and returns its combined output in the error.
func run(ctx context.Context, name string, args ...string) error {
	_, err := output(ctx, name, args...)
	return err
}

func output(ctx context.Context, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.WaitDelay = time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err,
			strings.TrimSpace(out.String()))
	}
	return out.String(), nil
}

// bridge is the test's L2 network in the host's namespace.
type bridge struct {
	name string
}

// newBridge creates the bridge with its fixed MAC and address. A bridge left by a test
// binary that was killed is removed first.
func newBridge(ctx context.Context, name string) (*bridge, error) {
	if _, err := net.InterfaceByName(name); err == nil {
		if err := run(ctx, "ip", "link", "del", name); err != nil {
			return nil, err
		}
	}
	b := &bridge{name: name}
	// Nothing from the nodes leaves the bridge: the host routes none of their packets
	// elsewhere (a containerd falling back from the local registry to docker.io, a DNS
	// query), whatever the host's ip_forward says.
	_ = run(ctx, "iptables", "-D", "FORWARD", "-i", name, "!", "-o", name, "-j", "DROP")
	steps := [][]string{
		{"ip", "link", "add", name, "address", bridgeMAC, "type", "bridge"},
		{"ip", "addr", "add", bridgeCIDR, "dev", name},
		{"ip", "link", "set", name, "up"},
		{"iptables", "-I", "FORWARD", "-i", name, "!", "-o", name, "-j", "DROP"},
	}
	for _, s := range steps {
		if err := run(ctx, s[0], s[1:]...); err != nil {
			return nil, errors.Join(err, b.remove(ctx))
		}
	}
	return b, nil
}

func (b *bridge) remove(ctx context.Context) error {
	_ = run(ctx, "iptables", "-D", "FORWARD", "-i", b.name, "!", "-o", b.name, "-j", "DROP")
	if _, err := net.InterfaceByName(b.name); err != nil {
		return nil
	}
	return run(ctx, "ip", "link", "del", b.name)
}

// CutNetwork takes the node's link down: it is alive but partitioned from everything.
func (n *Node) CutNetwork(ctx context.Context) error {
	return run(ctx, "ip", "link", "set", n.hostVeth(), "down")
}

// RestoreNetwork brings the node's link back up.
func (n *Node) RestoreNetwork(ctx context.Context) error {
	return run(ctx, "ip", "link", "set", n.hostVeth(), "up")
}

// setupNetwork creates the node's namespace and its link to the bridge. kubernetes.default
// (10.0.0.1:443) is DNATed to kube-apiserver in the node's namespace: the stand-in for
// kube-proxy, which would program the same rule from the Service's endpoints.
func (n *Node) setupNetwork(ctx context.Context) error {
	ns, veth := n.netns(), n.hostVeth()
	_ = run(ctx, "ip", "netns", "del", ns) // left by a node that died with the test binary
	_ = run(ctx, "ip", "link", "del", veth)
	api := fmt.Sprintf("%s:%d", bridgeIP, n.cfg.apiPort)
	steps := [][]string{
		{"ip", "netns", "add", ns},
		{"ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns},
		{"ip", "link", "set", veth, "master", n.cfg.bridge, "up"},
		{"ip", "-n", ns, "addr", "add", n.IP + "/16", "dev", "eth0"},
		{"ip", "-n", ns, "link", "set", "lo", "up"},
		{"ip", "-n", ns, "link", "set", "eth0", "up"},
		{"ip", "-n", ns, "route", "add", "default", "via", bridgeIP},
		{"ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv4.ip_forward=1"},
		{"ip", "netns", "exec", ns, "iptables", "-t", "nat", "-A", "PREROUTING", "-d", serviceIP,
			"-p", "tcp", "--dport", "443", "-j", "DNAT", "--to-destination", api},
		{"ip", "netns", "exec", ns, "iptables", "-t", "nat", "-A", "OUTPUT", "-d", serviceIP,
			"-p", "tcp", "--dport", "443", "-j", "DNAT", "--to-destination", api},
	}
	// Pods reach the pods of other nodes straight over the bridge, as a host-gw network
	// (flannel's) routes them.
	for j := range n.cfg.nodes {
		if j != n.index {
			steps = append(steps, []string{"ip", "-n", ns, "route", "add", podCIDR(j), "via", nodeIP(j)})
		}
	}
	for _, s := range steps {
		if err := run(ctx, s[0], s[1:]...); err != nil {
			return err
		}
	}
	return nil
}
