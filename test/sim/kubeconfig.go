package sim

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// TokenKubeconfig writes dir/name.kubeconfig: the cluster's API server, as the admin
// kubeconfig names it, with a bearer token, as a person's or an agent's kubeconfig.
func (c *Cluster) TokenKubeconfig(dir, name, token string) (string, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["sim"] = &clientcmdapi.Cluster{Server: c.Config.Host, CertificateAuthorityData: c.Config.CAData}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["sim"] = &clientcmdapi.Context{Cluster: "sim", AuthInfo: name}
	cfg.CurrentContext = "sim"
	path := filepath.Join(dir, name+".kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return "", fmt.Errorf("write %s's kubeconfig: %w", name, err)
	}
	return path, nil
}

// BuildKubectlFence builds cmd/kubectl-fence into dir, to put on PATH as kubectl's
// plugin, and returns the binary's path.
func BuildKubectlFence(ctx context.Context, dir string) (string, error) {
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-o", dir+string(os.PathSeparator), "./cmd/kubectl-fence")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build kubectl-fence: %w\n%s", err, out)
	}
	return filepath.Join(dir, "kubectl-fence"), nil
}
