package realnode

import (
	"crypto/rand"
	"fmt"
	"os"
	"strings"
)

// Files a node's boot checks with protectKernelDefaults, and the values kubelet wants; the
// node sees these fakes instead of the host's own settings, which it must not change.
var kernelDefaults = map[string]string{
	"vm/overcommit_memory":      "1",
	"vm/panic_on_oom":           "0",
	"kernel/panic":              "10",
	"kernel/panic_on_oops":      "1",
	"kernel/keys/root_maxkeys":  "1000000",
	"kernel/keys/root_maxbytes": "25000000",
}

// prepareFiles writes the node's configuration and clears what does not survive a power
// cycle (/run: containerd's state and socket, CNI allocations), keeping its disks (images,
// the kubelet's directory).
func (n *Node) prepareFiles() error {
	if err := os.RemoveAll(n.path("run")); err != nil {
		return err
	}
	for _, d := range []string{"run/containerd", "run/netns", "run/cni", "containerd/root", "kubelet",
		"pod-logs", "containers-logs", "logs", "cni", "sys", "etc"} {
		if err := os.MkdirAll(n.path(d), 0o755); err != nil {
			return err
		}
	}
	// Mount points of the node's private views, created once on the host.
	for _, d := range []string{"/var/lib/cni", "/var/log/pods", "/var/log/containers"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	files := map[string]string{
		"init.sh":                   n.initScript(),
		"containerd.toml":           n.containerdConfig(),
		"kubelet.yaml":              n.kubeletConfig(),
		"kubeconfig":                n.kubeconfig(),
		"cni/10-kubefence.conflist": n.cniConfig(),
		"boot_id":                   n.bootID + "\n",
		"etc/resolv.conf":           "nameserver 127.0.0.53\n",
		"ca.crt":                    string(n.cfg.caPEM),
	}
	for name, v := range kernelDefaults {
		files["sys/"+strings.ReplaceAll(name, "/", "_")] = v + "\n"
	}
	for name, content := range files {
		mode := os.FileMode(0o600)
		if name == "boot_id" {
			mode = 0o644 // as /proc's: the node agent reads it, not as root
		}
		if err := os.WriteFile(n.path(name), []byte(content), mode); err != nil {
			return err
		}
		if err := os.Chmod(n.path(name), mode); err != nil {
			return err
		}
	}
	return nil
}

func (n *Node) initScript() string {
	var mounts strings.Builder
	for name := range kernelDefaults {
		fmt.Fprintf(&mounts, "mount --bind %s /proc/sys/%s\n", n.path("sys", strings.ReplaceAll(name, "/", "_")), name)
	}
	sock := n.path("run/containerd/containerd.sock")
	return fmt.Sprintf(`#!/bin/sh
# PID 1 of node %[1]s. Everything below dies when it is killed: the node's power.
set -eu
boot=$1
echo 0 > %[2]s/freezer/%[3]s/cgroup.procs
hostname %[1]s
%[4]smount --bind %[5]s /proc/sys/kernel/random/boot_id
mount --bind %[6]s /var/lib/cni
mount --bind %[7]s /var/log/pods
mount --bind %[8]s /var/log/containers
mount --bind %[9]s /run/netns
containerd --config %[10]s > %[11]s/containerd-$boot.log 2>&1 &
%[18]s -mode node -node-id %[1]s -endpoint %[17]s/plugins/%[19]s/csi.sock \
	-registration-dir %[17]s/plugins_registry > %[11]s/csidriver-$boot.log 2>&1 &
i=0
until [ -S %[12]s ]; do
	i=$((i+1)); [ $i -lt 600 ] || { echo "containerd did not create %[12]s"; exit 1; }
	sleep 0.05
done
# kubelet restarts when it exits, as systemd's kubelet.service (Restart=always) does: the
# socket is there before containerd's CRI serves, and kubelet quits if it asks too early.
while :; do
	%[13]s --config=%[14]s --kubeconfig=%[15]s --hostname-override=%[1]s --node-ip=%[16]s \
		--root-dir=%[17]s --v=1 >> %[11]s/kubelet-$boot.log 2>&1 || echo "kubelet exited ($?); restarting in 1s" >> %[11]s/kubelet-$boot.log
	sleep 1
done &
wait
`, n.Name, cgroupRoot, n.cgroup(), mounts.String(), n.path("boot_id"), n.path("run/cni"),
		n.path("pod-logs"), n.path("containers-logs"), n.path("run/netns"), n.path("containerd.toml"),
		n.path("logs"), sock, n.cfg.kubeletBin, n.path("kubelet.yaml"), n.path("kubeconfig"), n.IP,
		n.path("kubelet"), n.cfg.csiDriver, CSIDriver)
}

func (n *Node) containerdConfig() string {
	mirror := func(host string) string {
		return fmt.Sprintf(`    [plugins."io.containerd.grpc.v1.cri".registry.mirrors.%q]
      endpoint = ["http://%s"]
`, host, n.cfg.registry)
	}
	return fmt.Sprintf(`version = 2
root = %q
state = %q
[grpc]
  address = %q
[ttrpc]
  address = %q
[plugins."io.containerd.internal.v1.opt"]
  path = %q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.10"
  # These machines lack CAP_SYS_RESOURCE.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = %q
  # Every registry a pod may name is served by the test's local registry.
  [plugins."io.containerd.grpc.v1.cri".registry]
%s%s%s`, n.path("containerd/root"), n.path("run/containerd"), n.path("run/containerd/containerd.sock"),
		n.path("run/containerd/containerd.sock.ttrpc"), n.path("containerd/opt"), n.path("cni"),
		mirror("docker.io"), mirror("registry.k8s.io"), mirror(n.cfg.registry))
}

func (n *Node) kubeletConfig() string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /%s
enforceNodeAllocatable: []
protectKernelDefaults: true
failSwapOn: false
containerRuntimeEndpoint: unix://%s
address: %s
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
podCIDR: %s
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
resolvConf: %s
# The test's stand-in for the cluster DNS (dns.go), on the bridge.
clusterDNS: [%s]
clusterDomain: %s
nodeStatusUpdateFrequency: %s
nodeLeaseDurationSeconds: %d
# The test machine's disk and memory are shared by every node: no eviction for pressure.
evictionHard:
  memory.available: "1Mi"
  nodefs.available: "1%%"
  nodefs.inodesFree: "1%%"
  imagefs.available: "1%%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
maxPods: 30
`, n.cgroup(), n.path("run/containerd/containerd.sock"), n.IP, podCIDR(n.index), n.path("etc/resolv.conf"),
		bridgeIP, clusterDomain, n.cfg.statusUpdate, n.cfg.leaseSeconds)
}

func (n *Node) kubeconfig() string {
	return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: kf
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: kubelet
  user:
    token: %s
contexts:
- name: kf
  context: {cluster: kf, user: kubelet}
current-context: kf
`, n.cfg.apiServer, n.path("ca.crt"), n.cfg.token)
}

func (n *Node) cniConfig() string {
	return fmt.Sprintf(`{
  "cniVersion": "0.4.0",
  "name": "kubefence-test",
  "plugins": [
    {
      "type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
      "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "routes": [{"dst": "0.0.0.0/0"}]}
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`, podCIDR(n.index))
}

// newUUID returns a random (version 4) UUID, the form of /proc/sys/kernel/random/boot_id.
func newUUID() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:]), nil
}
