package realnode

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/kubefence/kubefence/hack/images/imagebuild"
	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/test/sim"
)

// Where and how the tests install kubefence: as docs/getting-started.md tells a user,
// under a release name and in a namespace other than the docs' own (kubefence,
// kubefence-system), as users name theirs: every name the chart renders must follow them
// (a controller that watched the default name once sat unready and fenced nothing). The
// docs' commands run with the docs' namespace read as this one (DocNamespace).
const (
	Namespace    = "fencing-ops"
	DocNamespace = "kubefence-system"
	Release      = "fencing"
	// Fullname is the chart's kubefence.fullname for Release: the release name and the
	// chart's, since the release name does not contain "kubefence".
	Fullname       = Release + "-kubefence"
	ChartImage     = "kubefence/kubefence" // the chart's default image.repository, on docker.io
	BMCSecret      = "bmc-credentials"
	BMCAnnotation  = "fencing.kubefence.io/ipmi-address"
	controllerName = Fullname + "-controller"
)

// helmBin is the helm binary hack/deps.sh builds (helm.sh/helm/v3 at deploy/render's
// pinned version).
func helmBin() (string, error) {
	root, err := sim.ModuleRoot()
	if err != nil {
		return "", err
	}
	p := filepath.Join(root, ".cache", "bin", "helm")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%s: %w: run hack/deps.sh (or make deps), which builds helm", p, err)
	}
	return p, nil
}

// Helm runs helm against the cluster and returns its output.
func (c *Cluster) Helm(ctx context.Context, args ...string) (string, error) {
	bin, err := helmBin()
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"--kubeconfig", c.Kubeconfig}, args...)...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(c.dir, "helm", "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(c.dir, "helm", "config"), "HELM_DATA_HOME="+filepath.Join(c.dir, "helm", "data"))
	cmd.WaitDelay = time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("helm %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// PushKubefence builds the kubefence image as `make images` does and pushes it to the
// cluster's registry under the chart's default repository (docker.io/kubefence/kubefence,
// which the nodes resolve to this registry), with both tags make images gives it: the
// chart's appVersion and git describe's version. It returns a line per tag with its
// digest and size. The binaries are built as `make build` builds them (static, stamped,
// sharing its compile cache); a release adds -trimpath.
func (c *Cluster) PushKubefence(ctx context.Context) (string, error) {
	root, err := sim.ModuleRoot()
	if err != nil {
		return "", err
	}
	version, revision, created, err := imagebuild.Git(root)
	if err != nil {
		return "", err
	}
	appVersion, err := imagebuild.ChartAppVersion(filepath.Join(root, imagebuild.ChartFile))
	if err != nil {
		return "", err
	}
	bin := filepath.Join(c.dir, "image-bin")
	var log strings.Builder
	if err := imagebuild.BuildBinaries(ctx, "go", root, bin, version, revision, false, &log); err != nil {
		return "", fmt.Errorf("%w: %s", err, log.String())
	}
	if plant := os.Getenv(PlantEnv); plant != "" {
		if err := buildPlanted(ctx, root, bin, plant); err != nil {
			return "", err
		}
		version += "-planted-" + plant
	}
	opts := imagebuild.Options{BinDir: bin, Version: version, Revision: revision, Created: created}
	img, err := imagebuild.Build(ctx, root, opts)
	if err != nil {
		return "", err
	}
	tags, err := imagebuild.Tags(c.Registry+"/"+ChartImage, []string{appVersion, version}, name.Insecure)
	if err != nil {
		return "", err
	}
	if err := imagebuild.Push(ctx, img, tags); err != nil {
		return "", err
	}
	sum, err := imagebuild.Summarize(img)
	if err != nil {
		return "", err
	}
	var out strings.Builder
	for _, t := range tags {
		fmt.Fprintf(&out, "%s@%s compressed %s, uncompressed %s, %d layers\n", t, sum.Digest,
			imagebuild.MB(sum.Compressed), imagebuild.MB(sum.Uncompressed), sum.Layers)
	}
	return out.String(), nil
}

// PlantEnv names a planted bug (test/sim.PlantedBugs) to build into the image's
// controller, so that a test shows it catches the bug (make chaos-realnode PLANT=nofloor).
const PlantEnv = "KUBEFENCE_REALNODE_PLANT"

// buildPlanted rebuilds bin/fence-controller with the named bug planted.
func buildPlanted(ctx context.Context, root, bin, plant string) error {
	ov, err := sim.PlantOverlay(filepath.Join(bin, "..", "plant"), plant)
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-buildvcs=false", "-overlay", ov, "-ldflags", "-s -w",
		"-o", filepath.Join(bin, "fence-controller"), "./cmd/fence-controller")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build fence-controller with planted bug %s: %w: %s", plant, err, out)
	}
	return nil
}

// PrepareBMCAccess creates the BMC credentials Secret and annotates every node with its
// BMC's address, steps 2 of docs/getting-started.md.
func (c *Cluster) PrepareBMCAccess(ctx context.Context) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	b := c.bmcs[0]
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: BMCSecret, Namespace: Namespace},
		StringData: map[string]string{"username": b.User(), "password": b.Password()}}
	if _, err := c.Client.CoreV1().Secrets(Namespace).Create(ctx, secret, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	for i, n := range c.nodes {
		addr := c.bmcs[i].Host() + ":" + strconv.Itoa(c.bmcs[i].Port())
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, BMCAnnotation, addr)
		if _, err := c.Client.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			return err
		}
	}
	return nil
}

// CreatePeerKey makes the Secret name with the node agents' shared key in the release
// namespace, as the chart's values tell an operator to (kubectl create secret generic
// kubefence-peer-key --from-literal=key=$(openssl rand -hex 16)); with the BMC access of
// PrepareBMCAccess, which makes that namespace.
func (c *Cluster) CreatePeerKey(ctx context.Context, name string) error {
	if err := c.PrepareBMCAccess(ctx); err != nil {
		return err
	}
	key := make([]byte, 16)
	if _, err := crand.Read(key); err != nil {
		return err
	}
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace},
		StringData: map[string]string{"key": hex.EncodeToString(key)}}
	_, err := c.Client.CoreV1().Secrets(Namespace).Create(ctx, s, metav1.CreateOptions{})
	return err
}

// Retag gives the image repo:from in the cluster's registry the tag to as well.
func (c *Cluster) Retag(ctx context.Context, repo, from, to string) error {
	src, err := name.NewTag(c.Registry+"/"+repo+":"+from, name.Insecure)
	if err != nil {
		return err
	}
	desc, err := remote.Get(src, remote.WithContext(ctx))
	if err != nil {
		return fmt.Errorf("retag %s: %w", src, err)
	}
	return remote.Tag(src.Context().Tag(to), desc, remote.WithContext(ctx))
}

// NodeFences lists the NodeFences of node, oldest first.
func (c *Cluster) NodeFences(ctx context.Context, node string) ([]unstructured.Unstructured, error) {
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		return nil, err
	}
	list, err := dyn.Resource(v1alpha1.NodeFenceResource).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []unstructured.Unstructured
	for _, nf := range list.Items {
		if n, _, _ := unstructured.NestedString(nf.Object, "spec", "nodeName"); n == node {
			out = append(out, nf)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].GetCreationTimestamp().Time.Before(out[j].GetCreationTimestamp().Time)
	})
	return out, nil
}
