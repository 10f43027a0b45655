package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/kubefence/kubefence/hack/images/imagebuild"
)

// TestImagesArm64 runs make images' command for arm64 on prebuilt stand-ins (-bin) and
// reads the tarball back: an arm64 image under the chart's tag.
func TestImagesArm64(t *testing.T) {
	bin := t.TempDir()
	for _, c := range imagebuild.Commands {
		if err := os.WriteFile(filepath.Join(bin, c.Name), []byte("stand-in "+c.Name), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(t.TempDir(), "kubefence-image.tar")
	err := build(context.Background(), []string{"-src", "../..", "-arch", "arm64", "-bin", bin, "-out", out,
		"-version", "v0.0.0-test", "-revision", "0123"})
	if err != nil {
		t.Fatal(err)
	}
	appVersion, err := imagebuild.ChartAppVersion(filepath.Join("../..", imagebuild.ChartFile))
	if err != nil {
		t.Fatal(err)
	}
	tag, err := name.NewTag("kubefence/kubefence:" + appVersion)
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(out, &tag)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Architecture != "arm64" || cf.OS != "linux" {
		t.Errorf("the image is %s/%s, want linux/arm64", cf.OS, cf.Architecture)
	}
	if err := build(context.Background(), []string{"-src", "../..", "-arch", "riscv64", "-bin", bin, "-out", out}); err == nil {
		t.Error("-arch riscv64 accepted")
	}
}
