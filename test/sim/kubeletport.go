package sim

import (
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
)

// kubeletPort is a simulated node's kubelet port on loopback, which the node's status
// advertises (InternalIP 127.0.0.1, daemonEndpoints.kubeletEndpoint.port): while the
// kubelet runs it answers every HTTPS request with 401, as a kubelet answers a client
// without credentials; once the kubelet is down, or the node is cut off from the
// controller, it drops every connection unanswered.
type kubeletPort struct {
	srv     *httptest.Server
	refused atomic.Bool // cut off from the controller
}

func startKubeletPort(n *Node) (*kubeletPort, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	k := &kubeletPort{}
	k.srv = &httptest.Server{Listener: l, Config: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if k.refused.Load() || !n.Alive() {
			if hj, ok := w.(http.Hijacker); ok {
				if c, _, err := hj.Hijack(); err == nil {
					_ = c.Close()
					return
				}
			}
			panic(http.ErrAbortHandler)
		}
		w.WriteHeader(http.StatusUnauthorized)
	})}}
	k.srv.StartTLS()
	return k, nil
}

func (k *kubeletPort) port() int32 { return int32(k.srv.Listener.Addr().(*net.TCPAddr).Port) }

func (k *kubeletPort) close() { k.srv.Close() }
