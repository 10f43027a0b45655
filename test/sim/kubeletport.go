package sim

import (
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
)

// kubeletPort is a simulated node's kubelet port on loopback, which the node's status
// advertises (InternalIP 127.0.0.1, daemonEndpoints.kubeletEndpoint.port): while the
// kubelet runs it answers every HTTPS request with 401, as a kubelet answers a client
// without credentials, except the container logs a test put there (ServeContainerLog),
// which it serves as a kubelet serves /containerLogs to the API server for kubectl logs;
// once the kubelet is down, or the node is cut off from the controller, it drops every
// connection unanswered.
type kubeletPort struct {
	srv     *httptest.Server
	refused atomic.Bool // cut off from the controller
	logs    sync.Map    // "/containerLogs/ns/pod/container" → func() string
}

// ServeContainerLog has the node's kubelet serve log as the log of container in pod
// ns/name, which the test has bound to the node: kubectl logs then reads it through the
// API server, as from a real kubelet.
func (n *Node) ServeContainerLog(ns, pod, container string, log func() string) {
	n.kubelet.logs.Store("/containerLogs/"+ns+"/"+pod+"/"+container, log)
}

func startKubeletPort(n *Node) (*kubeletPort, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	k := &kubeletPort{}
	k.srv = &httptest.Server{Listener: l, Config: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if k.refused.Load() || !n.Alive() {
			if hj, ok := w.(http.Hijacker); ok {
				if c, _, err := hj.Hijack(); err == nil {
					_ = c.Close()
					return
				}
			}
			panic(http.ErrAbortHandler)
		}
		if log, ok := k.logs.Load(r.URL.Path); ok {
			_, _ = w.Write([]byte(log.(func() string)()))
			return
		}
		w.WriteHeader(http.StatusUnauthorized)
	})}}
	k.srv.StartTLS()
	return k, nil
}

func (k *kubeletPort) port() int32 { return int32(k.srv.Listener.Addr().(*net.TCPAddr).Port) }

func (k *kubeletPort) close() { k.srv.Close() }
