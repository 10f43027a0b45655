package realnode

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// CSIDriver is the name of the test's CSI driver (test/realnode/csidriver): single-attach
// volumes through Kubernetes' attach path.
const CSIDriver = "attach.kubefence.test"

// StorageClass is the class name of the static volumes CreateVolume makes.
const StorageClass = "attach"

// buildTools builds the node's static binaries (pause, the CSI driver) into dir.
func buildTools(ctx context.Context, root, dir string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", dir+string(os.PathSeparator),
		"./test/realnode/pause", "./test/realnode/csidriver")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build test binaries: %w: %s", err, out)
	}
	return nil
}

// startCSIController runs the driver's controller side and the kubernetes-csi
// external-attacher (built by hack/deps.sh) beside the control plane, and registers the
// driver as one that needs attaching.
func (c *Cluster) startCSIController(ctx context.Context, root string) error {
	attacher := filepath.Join(root, ".cache", "bin", "csi-attacher")
	if _, err := os.Stat(attacher); err != nil {
		return fmt.Errorf("%s: %w: run hack/deps.sh (or make deps), which builds the kubernetes-csi external-attacher", attacher, err)
	}
	sock := filepath.Join(c.dir, "csi", "controller.sock")
	c.attachLog = filepath.Join(c.dir, "csi", "attach.log")
	if err := os.MkdirAll(filepath.Dir(sock), 0o755); err != nil {
		return err
	}
	if err := c.daemon("csi-controller", filepath.Join(c.dir, "bin", "csidriver"),
		"-mode", "controller", "-endpoint", sock, "-log", c.attachLog); err != nil {
		return err
	}
	if err := c.daemon("csi-attacher", attacher, "--csi-address="+sock, "--kubeconfig="+c.Kubeconfig,
		"--leader-election=false", "--timeout=10s", "--retry-interval-max=5s", "-v=2"); err != nil {
		return err
	}
	drv := &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: CSIDriver},
		Spec: storagev1.CSIDriverSpec{AttachRequired: ptr.To(true), PodInfoOnMount: ptr.To(false)}}
	if _, err := c.Client.StorageV1().CSIDrivers().Create(ctx, drv, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// daemon starts a host process of the cluster, logged to logs/NAME.log and killed by Stop.
func (c *Cluster) daemon(name, bin string, args ...string) error {
	if err := os.MkdirAll(filepath.Join(c.dir, "logs"), 0o755); err != nil {
		return err
	}
	log, err := os.Create(filepath.Join(c.dir, "logs", name+".log"))
	if err != nil {
		return err
	}
	defer log.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	c.daemons = append(c.daemons, func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	})
	c.logf("realnode: started %s (pid %d)", name, cmd.Process.Pid)
	return nil
}

// CreateVolume creates a 1Gi single-attach PersistentVolume of the test driver, bound in
// advance to the claim ns/claim (a StatefulSet's volumeClaimTemplate names it).
func (c *Cluster) CreateVolume(ctx context.Context, name, ns, claim string) error {
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName:              StorageClass,
			ClaimRef:                      &corev1.ObjectReference{Namespace: ns, Name: claim},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: CSIDriver, VolumeHandle: name}},
		},
	}
	_, err := c.Client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{})
	return err
}

// Attachment is one line of the driver's attach log: what the storage itself did.
type Attachment struct {
	Time   time.Time
	Action string // attach, detach or refused
	Volume string
	Node   string
}

// Attachments reads the driver's attach log in order.
func (c *Cluster) Attachments() ([]Attachment, error) {
	f, err := os.Open(c.attachLog)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Attachment
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) != 4 {
			return nil, fmt.Errorf("attach log: bad line %q", s.Text())
		}
		ns, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("attach log: bad time in %q", s.Text())
		}
		out = append(out, Attachment{Time: time.Unix(0, ns), Action: fields[1], Volume: fields[2], Node: fields[3]})
	}
	return out, s.Err()
}
