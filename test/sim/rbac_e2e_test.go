package sim

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/configfile"
)

// What the chart renders (deploy/manifests, `make manifests`) for release kubefence.
const (
	renderedManifests     = "deploy/manifests/kubefence.yaml"
	renderedAgentManifest = "deploy/manifests/node-agent.yaml"
	renderedSA            = "kubefence"
	renderedConfigMap     = "kubefence-config"
	rbacTestFieldManager  = "kubefence-rbac-e2e"
	renderedAgentBinary   = "fence-agent-ipmi"
	rbacTestOutsideSecret = "not-for-kubefence"
)

// The kinds of the rendered manifests this test applies: identity and permissions, and
// the CRD. The Deployment is not run here: the controller runs as a process with the
// ServiceAccount's token instead.
var appliedKinds = map[string]bool{
	"CustomResourceDefinition": true, "ServiceAccount": true, "ClusterRole": true,
	"ClusterRoleBinding": true, "Role": true, "RoleBinding": true,
}

// TestRenderedRBACFencesAndNothingMore applies the chart's rendered RBAC on an apiserver
// in Node,RBAC mode, runs the controller with the rendered ServiceAccount's token and the
// chart's own configuration, crashes a node and requires a complete fence with no
// request refused; then shows that the same identity cannot read other Secrets, delete
// nodes or create pods.
func TestRenderedRBACFencesAndNothingMore(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	docs := renderedObjects(t, renderedManifests)
	h := rbacHarness(t, ctx)
	c := h.Cluster

	if err := applyServerSide(ctx, c, docs, appliedKinds); err != nil {
		t.Fatal(err)
	}
	kubeconfig := serviceAccountKubeconfig(t, ctx, c)
	sa, err := clientFor(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfgPath := chartConfig(t, h, docs)

	victim := deployWeb(t, ctx, c)
	replica := startLeader(t, ctx, h, "controller-rbac", "--config", cfgPath, "--kubeconfig", kubeconfig, "--metrics-secure=true")
	c.Node(victim).Crash()
	t.Logf("crashed %s", victim)
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		incs, err := Incidents(ctx, c, victim)
		if err != nil || len(incs) == 0 {
			return false, nil
		}
		return incs[len(incs)-1].Status.Phase == v1alpha1.PhaseRemediated, nil
	})
	if err != nil {
		t.Fatalf("incident of %s not Remediated under the rendered RBAC: %v", victim, err)
	}
	incs, _ := Incidents(ctx, c, victim)
	st := incs[len(incs)-1].Status
	if st.VerifiedLevel != 1 || len(st.Remediation.PodsDeleted) == 0 || len(st.Remediation.TaintsAdded) == 0 {
		t.Errorf("status verifiedLevel=%d remediation=%+v, want a verified fence, pods deleted and taints added", st.VerifiedLevel, st.Remediation)
	}
	if on, err := h.BMCs[victim].PoweredOn(); err != nil || on {
		t.Errorf("BMC of %s: powered on = %t (%v), want off", victim, on, err)
	}
	// A pod bound to the fenced node after its release (a scheduler with a stale cache) is
	// released too, after the controller reads it live: the ClusterRole must allow that.
	// It tolerates the out-of-service taint, so that only kubefence can release it.
	late := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: "late"},
		Spec: corev1.PodSpec{NodeName: victim, Containers: []corev1.Container{{Name: "c", Image: "none"}},
			Tolerations: []corev1.Toleration{{Key: corev1.TaintNodeOutOfService, Operator: corev1.TolerationOpExists}}}}
	if _, err := c.Client.CoreV1().Pods(Namespace).Create(ctx, late, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := c.Client.CoreV1().Pods(Namespace).Get(ctx, late.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Errorf("the pod bound to %s after its release was not released under the rendered RBAC: %v", victim, err)
	} else if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		// The step reaches the NodeFence's status with the incident's next save, after
		// the deletion itself.
		incs, err := Incidents(ctx, c, victim)
		return err == nil && len(incs) > 0 && slices.ContainsFunc(incs[len(incs)-1].Status.Timeline, func(s v1alpha1.Step) bool {
			return s.Type == v1alpha1.StepLateRelease && strings.Contains(s.Message, Namespace+"/late")
		}), nil
	}); err != nil {
		t.Errorf("the late pod is gone but no LateRelease step names it within 30s (%v): something else deleted it", err)
	}
	// Secure metrics, the chart's default: the controller reviews a scraper's token and
	// access with the API server. Its own identity may not read /metrics, so 403; a review
	// the ClusterRole refused would answer 500 and log the refusal.
	url := "https://" + servingAddress(t, ctx, replica, metricsAt) + "/metrics"
	if code, body := scrapeTLS(t, ctx, url, serviceAccountToken(t, ctx, c, renderedSA)); code != http.StatusForbidden {
		t.Errorf("/metrics with the controller's own token: status %d, want 403: %.200s", code, body)
	}
	// Events and leader condition writes fail only in the log: any refusal means the
	// ClusterRole or Role misses a verb the controller uses.
	for _, line := range strings.Split(replica.Log(), "\n") {
		if strings.Contains(strings.ToLower(line), "forbidden") {
			t.Errorf("controller was refused a request: %s", line)
		}
	}

	t.Run("access reviews", func(t *testing.T) { checkAccessReviews(t, ctx, sa) })
	t.Run("refused requests", func(t *testing.T) { checkRefusedRequests(t, ctx, c, sa, victim) })
}

func rbacHarness(t *testing.T, ctx context.Context) *Harness {
	t.Helper()
	h, err := StartHarness(ctx, HarnessOptions{
		Dir: t.TempDir(), Nodes: 3, Logf: t.Logf,
		Cluster: func(o *Options) {
			o.Authorization = "Node,RBAC"
			o.LeaseRenewInterval = time.Second
			o.StatusUpdateInterval = 2 * time.Second
		},
	})
	if err != nil {
		t.Fatalf("start harness: %v", err)
	}
	stopOnCleanup(t, h, true)
	return h
}

// renderedObjects decodes every document of a rendered file (relative to the module).
func renderedObjects(t *testing.T, file string) []*unstructured.Unstructured {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, file))
	if err != nil {
		t.Fatalf("%v (run make manifests)", err)
	}
	var objs []*unstructured.Unstructured
	for _, doc := range bytes.Split(data, []byte("\n---\n")) {
		obj := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &obj.Object); err != nil {
			t.Fatalf("decode rendered manifest: %v", err)
		}
		if obj.GetKind() != "" {
			objs = append(objs, obj)
		}
	}
	return objs
}

// applyServerSide applies the objects of the given kinds with server-side apply, CRDs
// first, and waits until NodeFences can be listed.
func applyServerSide(ctx context.Context, c *Cluster, objs []*unstructured.Unstructured, kinds map[string]bool) error {
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		return err
	}
	disc, err := discovery.NewDiscoveryClientForConfig(c.Config)
	if err != nil {
		return err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))
	applied := 0
	for _, first := range []bool{true, false} {
		for _, obj := range objs {
			if !kinds[obj.GetKind()] || (obj.GetKind() == "CustomResourceDefinition") != first {
				continue
			}
			gvk := obj.GroupVersionKind()
			m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
			if err != nil {
				return err
			}
			data, err := obj.MarshalJSON()
			if err != nil {
				return err
			}
			force := true
			_, err = dyn.Resource(m.Resource).Namespace(obj.GetNamespace()).Patch(ctx, obj.GetName(), types.ApplyPatchType, data,
				metav1.PatchOptions{FieldManager: rbacTestFieldManager, Force: &force})
			if err != nil {
				return err
			}
			applied++
		}
	}
	if applied < len(kinds) {
		return fmt.Errorf("rendered manifests hold %d objects of the kinds %v, want at least %d", applied, slices.Sorted(maps.Keys(kinds)), len(kinds))
	}
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := dyn.Resource(v1alpha1.NodeFenceResource).List(ctx, metav1.ListOptions{Limit: 1})
		return err == nil, nil
	})
}

// serviceAccountKubeconfig mints a token for the rendered ServiceAccount with the
// TokenRequest API and writes a kubeconfig that uses it.
func serviceAccountKubeconfig(t *testing.T, ctx context.Context, c *Cluster) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["sim"] = &clientcmdapi.Cluster{Server: c.Config.Host, CertificateAuthorityData: c.Config.CAData}
	cfg.AuthInfos["kubefence"] = &clientcmdapi.AuthInfo{Token: serviceAccountToken(t, ctx, c, renderedSA)}
	cfg.Contexts["sim"] = &clientcmdapi.Context{Cluster: "sim", AuthInfo: "kubefence"}
	cfg.CurrentContext = "sim"
	path := filepath.Join(t.TempDir(), "kubefence.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

func clientFor(kubeconfig string) (kubernetes.Interface, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(rc)
}

// chartConfig writes the configuration the chart renders into its ConfigMap, completed
// as kubefence-config-init completes it in the pod (the agent's checksum), with the
// plugin directory of this test and the fast harness's detection timings; tweaks change
// it further.
func chartConfig(t *testing.T, h *Harness, objs []*unstructured.Unstructured, tweaks ...func(map[string]any)) string {
	t.Helper()
	var raw string
	for _, o := range objs {
		if o.GetKind() == "ConfigMap" && o.GetName() == renderedConfigMap {
			raw, _, _ = unstructured.NestedString(o.Object, "data", "config.yaml")
		}
	}
	if raw == "" {
		t.Fatalf("rendered manifests have no ConfigMap %s with config.yaml", renderedConfigMap)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(raw), &cfg); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	plugins := filepath.Join(dir, "agents")
	if err := os.Mkdir(plugins, 0o755); err != nil {
		t.Fatal(err)
	}
	sum, err := copyFile(filepath.Join(h.bin, renderedAgentBinary), filepath.Join(plugins, renderedAgentBinary))
	if err != nil {
		t.Fatal(err)
	}
	cfg["pluginDir"] = plugins
	cfg["detection"] = map[string]any{"leaseStaleAfter": "5s", "notReadyAfter": "5s"}
	for _, tweak := range tweaks {
		tweak(cfg)
	}
	agents, _ := cfg["agents"].([]any)
	for _, a := range agents {
		if m, ok := a.(map[string]any); ok && m["binary"] == renderedAgentBinary {
			m["sha256"] = sum
		}
	}
	data, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := configfile.Parse(data)
	if err != nil {
		t.Fatalf("the chart's configuration is invalid: %v", err)
	}
	if parsed.LeaderElection.Namespace != ControllerNamespace || parsed.Agents[0].SecretRef == nil ||
		parsed.Agents[0].SecretRef.Name != BMCSecret {
		t.Fatalf("the chart's configuration does not match the harness's namespace and Secret: %+v", parsed)
	}
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// checkAccessReviews asks the apiserver, as the controller's identity, what it may do.
func checkAccessReviews(t *testing.T, ctx context.Context, sa kubernetes.Interface) {
	for name, tc := range map[string]struct {
		attrs authorizationv1.ResourceAttributes
		want  bool
	}{
		"get its agent Secret":           {authorizationv1.ResourceAttributes{Namespace: ControllerNamespace, Verb: "get", Resource: "secrets", Name: BMCSecret}, true},
		"update nodes":                   {authorizationv1.ResourceAttributes{Verb: "update", Resource: "nodes"}, true},
		"get another Secret of its own":  {authorizationv1.ResourceAttributes{Namespace: ControllerNamespace, Verb: "get", Resource: "secrets", Name: "other"}, false},
		"list Secrets of its namespace":  {authorizationv1.ResourceAttributes{Namespace: ControllerNamespace, Verb: "list", Resource: "secrets"}, false},
		"get Secrets elsewhere":          {authorizationv1.ResourceAttributes{Namespace: "default", Verb: "get", Resource: "secrets", Name: rbacTestOutsideSecret}, false},
		"delete nodes":                   {authorizationv1.ResourceAttributes{Verb: "delete", Resource: "nodes"}, false},
		"create pods":                    {authorizationv1.ResourceAttributes{Namespace: "default", Verb: "create", Resource: "pods"}, false},
		"evict pods":                     {authorizationv1.ResourceAttributes{Namespace: "default", Verb: "create", Resource: "pods", Subresource: "eviction"}, false},
		"delete NodeFences (retention)":  {authorizationv1.ResourceAttributes{Group: v1alpha1.GroupName, Verb: "delete", Resource: "nodefences"}, true},
		"update NodeFence specs":         {authorizationv1.ResourceAttributes{Group: v1alpha1.GroupName, Verb: "update", Resource: "nodefences"}, false},
		"write Leases outside":           {authorizationv1.ResourceAttributes{Namespace: NodeLeaseNamespace, Group: "coordination.k8s.io", Verb: "update", Resource: "leases"}, false},
		"create VolumeAttachments":       {authorizationv1.ResourceAttributes{Group: "storage.k8s.io", Verb: "create", Resource: "volumeattachments"}, false},
		"bind roles":                     {authorizationv1.ResourceAttributes{Group: "rbac.authorization.k8s.io", Verb: "create", Resource: "clusterrolebindings"}, false},
		"read ConfigMaps of its release": {authorizationv1.ResourceAttributes{Namespace: ControllerNamespace, Verb: "get", Resource: "configmaps"}, false},
		"watch its pause ConfigMap":      {authorizationv1.ResourceAttributes{Namespace: ControllerNamespace, Verb: "watch", Resource: "configmaps", Name: "kubefence-pause"}, true},
		"read its configuration":         {authorizationv1.ResourceAttributes{Namespace: ControllerNamespace, Verb: "get", Resource: "configmaps", Name: "kubefence-config"}, false},
		"review tokens (secure metrics)": {authorizationv1.ResourceAttributes{Group: "authentication.k8s.io", Verb: "create", Resource: "tokenreviews"}, true},
		"review access (secure metrics)": {authorizationv1.ResourceAttributes{Group: "authorization.k8s.io", Verb: "create", Resource: "subjectaccessreviews"}, true},
	} {
		t.Run(name, func(t *testing.T) {
			attrs := tc.attrs
			r, err := sa.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
				Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &attrs}}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if r.Status.Allowed != tc.want {
				t.Errorf("allowed = %t (%s), want %t", r.Status.Allowed, r.Status.Reason, tc.want)
			}
		})
	}
}

// checkRefusedRequests makes the requests for real and expects 403 Forbidden.
func checkRefusedRequests(t *testing.T, ctx context.Context, c *Cluster, sa kubernetes.Interface, victim string) {
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: rbacTestOutsideSecret},
		StringData: map[string]string{"password": "not yours"}}
	if _, err := c.Client.CoreV1().Secrets("default").Create(ctx, secret, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	var healthy string
	for _, n := range c.Nodes() {
		if n.Name() != victim {
			healthy = n.Name()
			break
		}
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "kubefence-may-not"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "none"}}}}
	for name, call := range map[string]func() error{
		"get a Secret outside its namespace": func() error {
			_, err := sa.CoreV1().Secrets("default").Get(ctx, rbacTestOutsideSecret, metav1.GetOptions{})
			return err
		},
		"list Secrets of its namespace": func() error {
			_, err := sa.CoreV1().Secrets(ControllerNamespace).List(ctx, metav1.ListOptions{})
			return err
		},
		"delete a node": func() error {
			return sa.CoreV1().Nodes().Delete(ctx, healthy, metav1.DeleteOptions{})
		},
		"create a pod": func() error {
			_, err := sa.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			if err := call(); !apierrors.IsForbidden(err) {
				t.Errorf("err = %v, want 403 Forbidden", err)
			}
		})
	}
	if _, err := c.Client.CoreV1().Nodes().Get(ctx, healthy, metav1.GetOptions{}); err != nil {
		t.Errorf("node %s after the refused delete: %v", healthy, err)
	}
}
