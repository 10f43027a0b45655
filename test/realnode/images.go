package realnode

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/kubefence/kubefence/hack/images/imagebuild"
)

// Images every cluster gets in its registry: the pod sandbox, under the name containerd
// asks for, and a busybox for workloads.
const (
	PauseImage   = "registry.k8s.io/pause:3.10"
	BusyboxImage = "docker.io/library/busybox:test"
)

// imageEpoch is the modification time of every file of the test images.
var imageEpoch = time.Unix(0, 0)

// pushTestImages packs the pause binary of dir (buildTools) and Debian's busybox-static
// as images and pushes both to the registry under the names pods use.
func (c *Cluster) pushTestImages(ctx context.Context, dir string) error {
	bin := filepath.Join(dir, "pause")
	pause := imagebuild.NewTree(imageEpoch)
	if err := pause.HostFile("/pause", bin, 0o755); err != nil {
		return err
	}
	img, err := imagebuild.NewImage(imageEpoch, imagebuild.ImageConfig{Entrypoint: []string{"/pause"}}, pause)
	if err != nil {
		return err
	}
	if err := c.Push(ctx, img, PauseImage); err != nil {
		return err
	}
	const busybox = "/bin/busybox"
	if _, err := os.Stat(busybox); err != nil {
		return fmt.Errorf("%s: %w: apt-get install busybox-static (hack/deps.sh)", busybox, err)
	}
	bb := imagebuild.NewTree(imageEpoch)
	if err := bb.HostFile(busybox, busybox, 0o755); err != nil {
		return err
	}
	for _, applet := range []string{"sh", "sleep", "cat", "echo", "ls", "touch", "date", "hostname"} {
		if err := bb.Symlink("/bin/"+applet, "busybox"); err != nil {
			return err
		}
	}
	if err := bb.Dir("/tmp", 0o1777, 0, 0); err != nil {
		return err
	}
	img, err = imagebuild.NewImage(imageEpoch, imagebuild.ImageConfig{Entrypoint: []string{"/bin/sh"}}, bb)
	if err != nil {
		return err
	}
	return c.Push(ctx, img, BusyboxImage)
}

// Push stores img in the cluster's registry under ref's repository and tag, whatever
// registry ref names: the nodes' containerd resolves every registry to this one.
func (c *Cluster) Push(ctx context.Context, img v1.Image, ref string) error {
	r, err := name.ParseReference(ref)
	if err != nil {
		return err
	}
	local, err := name.ParseReference(c.Registry+"/"+r.Context().RepositoryStr()+":"+r.Identifier(), name.Insecure)
	if err != nil {
		return err
	}
	if err := remote.Write(local, img, remote.WithContext(ctx)); err != nil {
		return fmt.Errorf("push %s: %w", local, err)
	}
	return nil
}
