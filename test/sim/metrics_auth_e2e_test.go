package sim

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
)

// renderedMetricsReader is the chart's ClusterRole for scrapers (release kubefence).
const renderedMetricsReader = "kubefence-metrics-reader"

// TestMetricsAuthentication: with --metrics-secure=true /metrics is
// served over TLS only to a bearer token the apiserver authenticates, whose identity RBAC
// lets get /metrics: a ServiceAccount bound to the chart's rendered metrics-reader
// ClusterRole reads kubefence_build_info and client-go's workqueue, REST client and
// leader election metrics (200), a request without a token gets 401, and a ServiceAccount
// without the role 403. The health probes answer over plain HTTP, without a token, on
// their own address.
func TestMetricsAuthentication(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	h := fastHarnessWith(t, ctx, HarnessOptions{Nodes: 1, Cluster: func(o *Options) { o.Authorization = "Node,RBAC" }})
	scraper := metricsServiceAccount(t, ctx, h.Cluster, "scraper", true)
	stranger := metricsServiceAccount(t, ctx, h.Cluster, "stranger", false)

	r := startLeader(t, ctx, h, "controller", "--metrics-secure=true")
	url := "https://" + servingAddress(t, ctx, r, metricsAt) + "/metrics"

	// RBAC reaches the apiserver's authorizer through its informers: poll for the first 200.
	var body string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		code, b := scrapeTLS(t, ctx, url, scraper)
		body = b
		return code == http.StatusOK, nil
	})
	if err != nil || !strings.Contains(body, "kubefence_build_info{") {
		t.Errorf("scrape with the metrics-reader token: %v, body has no kubefence_build_info:\n%.300s", err, body)
	}
	// client-go's own metrics, on the same registry: the incident queue, the API calls
	// and the election. Each series appears with its first sample (the first GET that
	// answered 200 may come after the first scrape), so scrape until all are there.
	wants := []string{`workqueue_depth{name="kubefence"}`, `workqueue_adds_total{name="kubefence"}`,
		`workqueue_work_duration_seconds_count{name="kubefence"}`, `rest_client_requests_total{code="200",host="`,
		`rest_client_request_duration_seconds_count{`, `rest_client_rate_limiter_duration_seconds_count{`,
		`leader_election_master_status{name="kubefence-controller"} 1`}
	var missing []string
	_ = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		code, b := scrapeTLS(t, ctx, url, scraper)
		if code != http.StatusOK {
			return false, nil
		}
		body, missing = b, missing[:0]
		for _, want := range wants {
			if !strings.Contains(body, want) {
				missing = append(missing, want)
			}
		}
		return len(missing) == 0, nil
	})
	if len(missing) > 0 {
		t.Errorf("/metrics lacks %q after a minute; it serves:\n%s", missing, metricNames(body))
	}
	for name, tc := range map[string]struct {
		token string
		want  int
	}{
		"no token":                   {"", http.StatusUnauthorized},
		"a token nobody issued":      {"not-a-token", http.StatusUnauthorized},
		"a token without the role":   {stranger, http.StatusForbidden},
		"the metrics-reader's token": {scraper, http.StatusOK},
	} {
		t.Run(name, func(t *testing.T) {
			if code, body := scrapeTLS(t, ctx, url, tc.token); code != tc.want {
				t.Errorf("status %d, want %d: %.200s", code, tc.want, body)
			}
		})
	}
	t.Run("plain HTTP to the metrics port", func(t *testing.T) {
		if body := scrape(ctx, strings.Replace(url, "https://", "http://", 1)); strings.Contains(body, "kubefence_") {
			t.Errorf("metrics served over plain HTTP")
		}
	})
	t.Run("health probes over plain HTTP", func(t *testing.T) {
		health := "http://" + servingAddress(t, ctx, r, healthAt)
		for _, path := range []string{"/healthz", "/readyz"} {
			if body := scrape(ctx, health+path); body != "ok" {
				t.Errorf("%s answered %q, want ok", path, body)
			}
		}
	})
	if strings.Contains(r.Log(), scraper) || strings.Contains(r.Log(), stranger) {
		t.Errorf("the controller logged a client's token")
	}
}

// metricsServiceAccount creates a ServiceAccount, bound to the rendered metrics-reader
// ClusterRole when reader, and returns a token for it from the TokenRequest API.
func metricsServiceAccount(t *testing.T, ctx context.Context, c *Cluster, name string, reader bool) string {
	t.Helper()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ControllerNamespace, Name: name}}
	if _, err := c.Client.CoreV1().ServiceAccounts(ControllerNamespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if reader {
		createRenderedMetricsReader(t, ctx, c)
		binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name + "-metrics-reader"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: renderedMetricsReader},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ControllerNamespace, Name: name}}}
		if _, err := c.Client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return serviceAccountToken(t, ctx, c, name)
}

// serviceAccountToken is an hour's token for the ServiceAccount name of
// ControllerNamespace, from the TokenRequest API.
func serviceAccountToken(t *testing.T, ctx context.Context, c *Cluster, name string) string {
	t.Helper()
	expiry := int64(3600)
	tr, err := c.Client.CoreV1().ServiceAccounts(ControllerNamespace).CreateToken(ctx, name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for %s/%s: %v", ControllerNamespace, name, err)
	}
	return tr.Status.Token
}

// createRenderedMetricsReader creates the chart's metrics-reader ClusterRole from
// deploy/manifests, so that this test checks what users install.
func createRenderedMetricsReader(t *testing.T, ctx context.Context, c *Cluster) {
	t.Helper()
	for _, o := range renderedObjects(t, renderedManifests) {
		if o.GetKind() != "ClusterRole" || o.GetName() != renderedMetricsReader {
			continue
		}
		role := &rbacv1.ClusterRole{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, role); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatalf("rendered manifests have no ClusterRole %s", renderedMetricsReader)
}

// scrapeTLS gets url over TLS with token as the bearer token (none when empty) and
// returns the status and body; 0 when the request failed.
func scrapeTLS(t *testing.T, ctx context.Context, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	// The controller's certificate is self-signed at start: nothing to verify it against.
	// The token is what the server checks; the client only needs the channel encrypted.
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}}}
	defer client.CloseIdleConnections()
	resp, err := client.Do(req)
	if err != nil {
		t.Logf("scrape %s: %v", url, err)
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.TLS == nil {
		t.Errorf("%s answered without TLS", url)
	}
	return resp.StatusCode, string(b)
}

// metricNames lists the metric families a scrape's body holds, one per line.
func metricNames(body string) string {
	var names []string
	for _, l := range strings.Split(body, "\n") {
		if name, ok := strings.CutPrefix(l, "# TYPE "); ok {
			names = append(names, name)
		}
	}
	return strings.Join(names, "\n")
}
