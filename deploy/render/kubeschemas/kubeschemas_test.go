package kubeschemas

import "testing"

// TestFileName: the names are those kubeconform derives from apiVersion and kind for a
// location "DIR/{{ .ResourceKind }}{{ .KindSuffix }}.json".
func TestFileName(t *testing.T) {
	for _, tc := range []struct{ apiVersion, kind, want string }{
		{"v1", "Service", "service-v1.json"},
		{"apps/v1", "Deployment", "deployment-apps-v1.json"},
		{"rbac.authorization.k8s.io/v1", "ClusterRoleBinding", "clusterrolebinding-rbac-v1.json"},
		{"apiextensions.k8s.io/v1", "CustomResourceDefinition", "customresourcedefinition-apiextensions-v1.json"},
		{"monitoring.coreos.com/v1", "PrometheusRule", "prometheusrule-monitoring-v1.json"},
	} {
		if got := FileName(tc.apiVersion, tc.kind); got != tc.want {
			t.Errorf("FileName(%q, %q) = %q, want %q", tc.apiVersion, tc.kind, got, tc.want)
		}
	}
}
