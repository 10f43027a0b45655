package kubectlfence

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"
)

// Exec runs cmd in container of pod namespace/name and copies its output; it returns an
// ExitError when the command exits non-zero.
type Exec func(ctx context.Context, namespace, pod, container string, cmd []string, stdout, stderr io.Writer) error

// ExitError is a command run in the leader's pod that exited with Code.
type ExitError struct{ Code int }

func (e ExitError) Error() string { return fmt.Sprintf("exit code %d", e.Code) }

// PodExec is Exec through the API server's pods/exec, as kubectl exec: WebSocket, with
// SPDY for an API server (or proxy) that does not upgrade to it.
func PodExec(rc *rest.Config, kube kubernetes.Interface) Exec {
	return func(ctx context.Context, namespace, pod, container string, cmd []string, stdout, stderr io.Writer) error {
		req := kube.CoreV1().RESTClient().Post().Resource("pods").Namespace(namespace).Name(pod).SubResource("exec").
			VersionedParams(&corev1.PodExecOptions{Container: container, Command: cmd, Stdout: true, Stderr: true}, scheme.ParameterCodec)
		spdy, err := remotecommand.NewSPDYExecutor(rc, "POST", req.URL())
		if err != nil {
			return fmt.Errorf("exec in %s/%s: %w", namespace, pod, err)
		}
		ws, err := remotecommand.NewWebSocketExecutor(rc, "GET", req.URL().String())
		if err != nil {
			return fmt.Errorf("exec in %s/%s: %w", namespace, pod, err)
		}
		ex, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
			return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
		})
		if err != nil {
			return fmt.Errorf("exec in %s/%s: %w", namespace, pod, err)
		}
		err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: stdout, Stderr: stderr})
		var code utilexec.ExitError
		if errors.As(err, &code) && code.Exited() {
			return ExitError{Code: code.ExitStatus()}
		}
		if err != nil {
			return fmt.Errorf("exec in %s/%s: %w", namespace, pod, err)
		}
		return nil
	}
}

// AskLeader runs `fence-controller SUB ARGS...` in the controller container of r's
// leader, with the leader's configuration, and copies its answer: explain and check are
// answered by the running leader, with its config and its agents, not recomputed here.
func (c Clients) AskLeader(ctx context.Context, exec Exec, r Release, now time.Time, sub string, args []string, stdout, stderr io.Writer) error {
	pod, err := LeaderPod(ctx, c.Kube, r, now)
	if err != nil {
		return err
	}
	container, cmd := ControllerCommand(pod, sub, args...)
	return exec(ctx, pod.Namespace, pod.Name, container, cmd, stdout, stderr)
}
