// Package sim is kubefence's simulated cluster: a real etcd, kube-apiserver,
// kube-controller-manager and kube-scheduler on loopback, and one simulated kubelet
// (a goroutine) per node that renews its Lease, posts Ready, runs the pods bound to it and
// attaches their CSI volumes. kube-controller-manager and kube-scheduler are restarted
// whenever they exit, as the kubelet restarts a real control plane's static pods.
//
// A node is alive only while its kubelet is not crashed and its Power reports on. A dead
// node does nothing: its Lease goes stale, its pods stay Running or Terminating in the API
// and its VolumeAttachments stay, and a replacement pod elsewhere is refused with a
// Multi-Attach error. That is the situation kubefence exists to resolve, so scenarios
// drive it with Node.Crash, Node.Restart and the nodes' Power (e.g. ipmi_sim BMCs).
//
// Start needs the binaries hack/controlplane.sh builds: etcd 3.6 and the control plane.
package sim
