package app

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"time"

	"k8s.io/klog/v2"

	"github.com/kubefence/kubefence/pkg/oncall"
)

// The running replica answers `fence-controller explain` from its own loop, on a unix
// socket in its container (--answer-socket): only a process in the container reaches it,
// that is, a person who may exec there (kubectl fence explain, with pods/exec,
// which holds the controller's powers anyway). The answer is the loop's own view: its
// caches, its detector with every renewal and heartbeat it saw, its peers. A replica that
// does not lead refuses: only the leader's view decides.

// answerExplain is the path of the explain answer; the node is its query's "node".
const answerExplain = "/explain"

// answerTimeout bounds one answer: explain reads the node and its Leases.
const answerTimeout = 30 * time.Second

// answers serves the running replica's answers.
type answers struct {
	explainer oncall.Explainer // Live: the loop's sources
	leading   func() bool
	identity  string
}

func (a answers) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	node := r.URL.Query().Get("node")
	switch {
	case r.URL.Path != answerExplain:
		http.NotFound(w, r)
		return
	case node == "":
		http.Error(w, "explain: name a node (?node=NODE)", http.StatusBadRequest)
		return
	case !a.leading():
		http.Error(w, fmt.Sprintf("replica %s does not lead: only the leader's view decides; ask the leader (kubectl fence explain)", a.identity),
			http.StatusServiceUnavailable)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), answerTimeout)
	defer cancel()
	var out bytes.Buffer
	fmt.Fprintf(&out, "answered:  by the leader %s, from its own view\n", a.identity)
	if err := a.explainer.Explain(ctx, node, &out); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	_, _ = w.Write(out.Bytes())
}

// serveAnswers listens on the unix socket path (a socket an earlier run of the container
// left there removed first) and serves h until ctx ends; a failed server reports on errc.
func serveAnswers(ctx context.Context, path string, h http.Handler, errc chan<- error) error {
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&fs.ModeSocket != 0 {
		if err := os.Remove(path); err != nil {
			return fmt.Errorf("--answer-socket %s: remove the old socket: %w", path, err)
		}
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("--answer-socket %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return fmt.Errorf("--answer-socket %s: %w", path, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shut)
	}()
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("answer socket %s: %w", path, err)
		}
	}()
	klog.FromContext(ctx).V(2).Info("Answering explain", "socket", path)
	return nil
}

// errNoAnswerer: nothing listens on the answer socket (no such socket, or no process).
var errNoAnswerer = errors.New("no running replica answers there")

// askRunning asks the replica listening on the unix socket path to explain node and
// copies its answer to w.
func askRunning(ctx context.Context, path, node string, w io.Writer) error {
	fi, err := os.Stat(path)
	if err != nil || fi.Mode()&fs.ModeSocket == 0 {
		return fmt.Errorf("--answer-socket %s: %w", path, errNoAnswerer)
	}
	client := &http.Client{Timeout: answerTimeout + 5*time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://replica"+answerExplain+"?node="+url.QueryEscape(node), nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("--answer-socket %s: %w: %v", path, errNoAnswerer, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("explain node %s: %s", node, bytes.TrimSpace(body))
	}
	_, err = io.Copy(w, resp.Body)
	return err
}
