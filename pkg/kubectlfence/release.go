package kubectlfence

import (
	"context"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// DefaultNamespace is the chart's release namespace in the docs.
const DefaultNamespace = "kubefence-system"

// defaultFullname is the full name of the release `kubefence`: the objects of a release
// found by its Lease alone (no Deployment, as a controller run outside a pod) are its.
const defaultFullname = "kubefence"

// Labels the chart sets on the controller's Deployment.
const (
	componentLabel = "app.kubernetes.io/component"
	instanceLabel  = "app.kubernetes.io/instance"
)

// ControllerContainer is the controller's container in the chart's Deployment.
const ControllerContainer = "controller"

// Release is one kubefence release in a namespace: the names of the objects the plugin
// reads and writes.
type Release struct {
	Namespace string `json:"namespace"`
	// Fullname is the chart's full name of the release: its objects' names begin with it.
	Fullname string `json:"fullname"`
	// Deployment is the controller's Deployment; empty when the release was found by its
	// leader Lease alone.
	Deployment string `json:"deployment,omitempty"`
	// Lease is the leader election Lease.
	Lease string `json:"lease"`
	// PauseConfigMap holds the pause requests: the controller's --pause-configmap.
	PauseConfigMap string `json:"pauseConfigMap"`
}

// Find is the release in ns: the Deployment labelled app.kubernetes.io/component=controller
// (of Helm release release, when named), else the leader Lease of the full name release
// (or kubefence). lease, when set, names the leader Lease (config.leaderElection.name).
// A caller who may read neither gets the names of the full name release as the chart
// makes them.
func Find(ctx context.Context, kube kubernetes.Interface, ns, release, lease string) (Release, error) {
	sel := componentLabel + "=controller"
	if release != "" {
		sel += "," + instanceLabel + "=" + release
	}
	list, err := kube.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
	switch {
	case apierrors.IsForbidden(err):
		// A person on call may hold only the chart's roles: the pause ConfigMap and the
		// incidents, not the Deployments.
		list = &appsv1.DeploymentList{}
	case err != nil:
		return Release{}, fmt.Errorf("find the controller's Deployment in %s: %w", ns, err)
	}
	switch n := len(list.Items); {
	case n == 1:
		return fromDeployment(&list.Items[0], lease), nil
	case n > 1:
		var names []string
		for _, d := range list.Items {
			names = append(names, d.Labels[instanceLabel])
		}
		return Release{}, fmt.Errorf("%d kubefence releases in %s (%s): name one with --release", n, ns, strings.Join(names, ", "))
	}
	r := named(ns, release)
	if lease != "" {
		r.Lease = lease
	}
	if _, err := kube.CoordinationV1().Leases(ns).Get(ctx, r.Lease, metav1.GetOptions{}); err != nil && !apierrors.IsForbidden(err) {
		if apierrors.IsNotFound(err) {
			return Release{}, fmt.Errorf("no kubefence release in %s: no controller Deployment and no Lease %s (-n NAMESPACE, --release)", ns, r.Lease)
		}
		return Release{}, fmt.Errorf("read the leader Lease %s/%s: %w", ns, r.Lease, err)
	}
	return r, nil
}

// named is the release of full name fullname (kubefence when empty), as the chart names
// its objects.
func named(ns, fullname string) Release {
	if fullname == "" {
		fullname = defaultFullname
	}
	return Release{Namespace: ns, Fullname: fullname, Lease: fullname + "-controller", PauseConfigMap: fullname + "-pause"}
}

// fromDeployment is the release of the controller's Deployment d: its name is
// <fullname>-controller, and its container's --pause-configmap names the pause ConfigMap.
func fromDeployment(d *appsv1.Deployment, lease string) Release {
	r := named(d.Namespace, strings.TrimSuffix(d.Name, "-controller"))
	r.Deployment = d.Name
	if lease != "" {
		r.Lease = lease
	}
	for _, c := range d.Spec.Template.Spec.Containers {
		if c.Name != ControllerContainer {
			continue
		}
		if v, ok := flagValue(c.Args, "pause-configmap"); ok {
			r.PauseConfigMap = v
		}
	}
	return r
}

// flagValue is the value of --name=VALUE (or -name=VALUE) among args.
func flagValue(args []string, name string) (string, bool) {
	for _, a := range args {
		for _, p := range []string{"--" + name + "=", "-" + name + "="} {
			if v, ok := strings.CutPrefix(a, p); ok {
				return v, true
			}
		}
	}
	return "", false
}
