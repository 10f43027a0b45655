package kubectlfence

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// TestPodExecAsksTheAPIServer: the exec goes to the API server's pods/exec of the pod,
// with the container and every word of the command, as kubectl exec sends it. The server
// here refuses it, which fails the exec with its answer.
func TestPodExecAsksTheAPIServer(t *testing.T) {
	var mu sync.Mutex
	var seen []*http.Request
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Clone(context.Background()))
		mu.Unlock()
		http.Error(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"pods \"p\" is forbidden","reason":"Forbidden","code":403}`, http.StatusForbidden)
	}))
	defer srv.Close()
	rc := &rest.Config{Host: srv.URL}
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	cmd := []string{"/usr/local/bin/fence-controller", "explain", "node-1", "--config=/run/kubefence/config.yaml"}
	err = PodExec(rc, kube)(context.Background(), "ops", "p", "controller", cmd, io.Discard, io.Discard)
	if err == nil {
		t.Fatal("an exec the API server refused succeeded")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) == 0 {
		t.Fatal("no request reached the API server")
	}
	for _, r := range seen {
		q := r.URL.Query()
		if r.URL.Path != "/api/v1/namespaces/ops/pods/p/exec" || q.Get("container") != "controller" ||
			!slices.Equal(q["command"], cmd) || q.Get("stdout") != "true" || q.Get("stderr") != "true" || q.Get("stdin") == "true" {
			t.Errorf("exec request %s %s", r.Method, r.URL)
		}
	}
}
