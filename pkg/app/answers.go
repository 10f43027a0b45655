package app

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/kubefence/kubefence/pkg/fencecall"
	"github.com/kubefence/kubefence/pkg/oncall"
)

// The running replica answers `fence-controller explain` and `fence-controller devices`
// from its own loop, on a unix socket in its container (--answer-socket): only a process
// in the container reaches it, that is, a person who may exec there (kubectl fence
// explain and status, with pods/exec, which holds the controller's powers anyway). The
// answers are the leader's own: explain its loop's view (its caches, its detector with
// every renewal and heartbeat it saw, its peers), devices its device monitor's last reads.
// A replica that does not lead refuses: only the leader's view decides, and only the
// leader reads the devices.

// The answers' paths: explain's node is its query's "node".
const (
	answerExplain = "/explain"
	answerDevices = "/devices"
)

// answerTimeout bounds one answer: explain reads the node and its Leases.
const answerTimeout = 30 * time.Second

// deviceReads are the leader's device monitor's last reads; *devicemonitor.Monitor is one.
type deviceReads interface {
	LastReads() ([]fencecall.TargetCheck, time.Time)
}

// answers serves the running replica's answers.
type answers struct {
	explainer oncall.Explainer // Live: the loop's sources
	devices   deviceReads
	leading   func() bool
	identity  string
}

func (a answers) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case answerExplain:
		if r.URL.Query().Get("node") == "" {
			http.Error(w, "explain: name a node (?node=NODE)", http.StatusBadRequest)
			return
		}
	case answerDevices:
	default:
		http.NotFound(w, r)
		return
	}
	if !a.leading() {
		http.Error(w, fmt.Sprintf("replica %s does not lead: only the leader's view decides; ask the leader (kubectl fence explain, kubectl fence status)", a.identity),
			http.StatusServiceUnavailable)
		return
	}
	if r.URL.Path == answerDevices {
		a.answerDevices(w)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), answerTimeout)
	defer cancel()
	var out bytes.Buffer
	fmt.Fprintf(&out, "answered:  by the leader %s, from its own view\n", a.identity)
	if err := a.explainer.Explain(ctx, r.URL.Query().Get("node"), &out); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	_, _ = w.Write(out.Bytes())
}

// answerDevices writes the device monitor's last reads as JSON (oncall.Devices).
func (a answers) answerDevices(w http.ResponseWriter) {
	checks, round := a.devices.LastReads()
	b, err := json.Marshal(deviceAnswer(a.identity, checks, round))
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

// deviceAnswer is the answer of the leader identity of its reads, the last round ended
// at round.
func deviceAnswer(identity string, checks []fencecall.TargetCheck, round time.Time) oncall.Devices {
	d := oncall.Devices{Leader: identity, Reads: make([]oncall.DeviceRead, 0, len(checks))}
	if !round.IsZero() {
		d.LastRound = &round
	}
	for _, tc := range checks {
		r := oncall.DeviceRead{Node: tc.Node, Agent: tc.Agent, Target: tc.Target, State: tc.StateText(),
			Identity: fencecall.IdentityText(tc), DeviceIdentity: tc.Identity, NodeIdentity: tc.Expect,
			Latency: metav1.Duration{Duration: tc.Latency}, Error: tc.ErrText()}
		if !tc.At.IsZero() {
			r.At = &tc.At
		}
		d.Reads = append(d.Reads, r)
	}
	return d
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
	klog.FromContext(ctx).V(2).Info("Answering explain and devices", "socket", path)
	return nil
}

// errNoAnswerer: nothing listens on the answer socket (no such socket, or no process).
var errNoAnswerer = errors.New("no running replica answers there")

// askRunning asks the replica listening on the unix socket path to explain node and
// copies its answer to w.
func askRunning(ctx context.Context, path, node string, w io.Writer) error {
	err := askAnswer(ctx, path, answerExplain+"?node="+url.QueryEscape(node), w)
	if err != nil && !errors.Is(err, errNoAnswerer) {
		return fmt.Errorf("explain node %s: %w", node, err)
	}
	return err
}

// askAnswer asks the replica listening on the unix socket path for the answer at target
// (a path and its query) and copies it to w.
func askAnswer(ctx context.Context, path, target string, w io.Writer) error {
	fi, err := os.Stat(path)
	if err != nil || fi.Mode()&fs.ModeSocket == 0 {
		return fmt.Errorf("--answer-socket %s: %w", path, errNoAnswerer)
	}
	client := &http.Client{Timeout: answerTimeout + 5*time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://replica"+target, nil)
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
		return errors.New(string(bytes.TrimSpace(body)))
	}
	_, err = io.Copy(w, resp.Body)
	return err
}
