package sim

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"
)

// Versions of the peers whose CustomResourceDefinitions hack/deps.sh copies under
// .cache/crds: Cluster API (what a MachineHealthCheck's request names) and csi-addons.
const (
	ClusterAPIVersion = "v1.11.3"
	CSIAddonsVersion  = "v0.12.0"
)

// CachedCRDs reads the CustomResourceDefinitions hack/deps.sh copied from a peer's
// module (dir is e.g. "cluster-api-v1.11.3"); names picks files, all when empty.
func CachedCRDs(dir string, names ...string) ([][]byte, error) {
	root, err := moduleRoot()
	if err != nil {
		return nil, err
	}
	full := filepath.Join(root, ".cache", "crds", dir)
	if len(names) == 0 {
		entries, err := os.ReadDir(full)
		if err != nil {
			return nil, fmt.Errorf("%w (hack/deps.sh copies them there: run make deps)", err)
		}
		for _, e := range entries {
			names = append(names, e.Name())
		}
	}
	var out [][]byte
	for _, n := range names {
		data, err := os.ReadFile(filepath.Join(full, n))
		if err != nil {
			return nil, fmt.Errorf("%w (hack/deps.sh copies it there: run make deps)", err)
		}
		out = append(out, data)
	}
	return out, nil
}

// InstallCRDs creates the CustomResourceDefinitions (YAML documents) and waits until
// every one is Established.
func InstallCRDs(ctx context.Context, c *Cluster, docs [][]byte) error {
	dyn, err := dynamicClient(c)
	if err != nil {
		return err
	}
	var names []string
	for _, data := range docs {
		for _, doc := range bytes.Split(data, []byte("\n---\n")) {
			obj := &unstructured.Unstructured{}
			if err := yaml.Unmarshal(doc, &obj.Object); err != nil {
				return fmt.Errorf("decode CRD: %w", err)
			}
			if obj.GetKind() != "CustomResourceDefinition" {
				continue
			}
			if _, err := dyn.Resource(crdGVR).Create(ctx, obj, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("create CRD %s: %w", obj.GetName(), err)
			}
			names = append(names, obj.GetName())
		}
	}
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		for _, n := range names {
			crd, err := dyn.Resource(crdGVR).Get(ctx, n, metav1.GetOptions{})
			if err != nil || !established(crd) {
				return false, nil
			}
		}
		return true, nil
	})
}

func established(crd *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == "Established" && m["status"] == "True" {
			return true
		}
	}
	return false
}

// CallerClient is the API client of another controller that drives kubefence (a health
// checker): a ServiceAccount ns/name whose only permissions come from a ClusterRole
// that aggregates the ClusterRoles labelled aggregateLabel=true, as NodeHealthCheck
// and Cluster API grant themselves what remediators ship. It waits until the
// aggregation holds rules.
func CallerClient(ctx context.Context, c *Cluster, ns, name, aggregateLabel string) (dynamic.Interface, error) {
	cs := c.Client
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name + "-aggregated"},
		AggregationRule: &rbacv1.AggregationRule{ClusterRoleSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{aggregateLabel: "true"}}}}}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name + "-aggregated"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}}}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	// kube-controller-manager's clusterrole-aggregation controller fills the rules in.
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		r, err := cs.RbacV1().ClusterRoles().Get(ctx, role.Name, metav1.GetOptions{})
		return err == nil && len(r.Rules) > 0, nil
	})
	if err != nil {
		return nil, fmt.Errorf("ClusterRole %s aggregated no rules labelled %s: %w", role.Name, aggregateLabel, err)
	}
	expiry := int64(3600)
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry}}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("token for %s/%s: %w", ns, name, err)
	}
	rc := rest.AnonymousClientConfig(c.Config)
	rc.BearerToken = tr.Status.Token
	return dynamic.NewForConfig(rc)
}
