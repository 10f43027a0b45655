package main

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestFillManifest fills the repository's krew manifest: every platform's checksum and the
// version, nothing of the template left; a platform not packed is refused by name.
func TestFillManifest(t *testing.T) {
	tmpl, err := os.ReadFile(filepath.Join("..", "..", "deploy", "krew", "fence.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	sums := map[string]string{}
	for _, p := range Platforms {
		sums[strings.Replace(p, "/", "_", 1)] = strings.Repeat(string(rune('a'+len(sums))), 64)
	}
	m, err := FillManifest(string(tmpl), "v1.2.3", sums)
	if err != nil {
		t.Fatal(err)
	}
	for key, sum := range sums {
		if !strings.Contains(m, "sha256: "+sum+"\n") {
			t.Errorf("the manifest has no sha256 %s for %s:\n%s", sum, key, m)
		}
	}
	for _, left := range []string{"VERSION", "SHA256_", "#"} {
		if strings.Contains(m, left) {
			t.Errorf("the filled manifest still has %q:\n%s", left, m)
		}
	}
	if !strings.Contains(m, "version: v1.2.3\n") || !strings.Contains(m, "/download/v1.2.3/kubectl-fence_v1.2.3_darwin_arm64.tar.gz") {
		t.Errorf("the manifest's version or URIs are not v1.2.3's:\n%s", m)
	}
	delete(sums, "darwin_arm64")
	if _, err := FillManifest(string(tmpl), "v1.2.3", sums); err == nil || !strings.Contains(err.Error(), "darwin/arm64") {
		t.Errorf("a manifest with darwin/arm64 not packed: %v, want an error naming darwin/arm64", err)
	}
}

// TestPackIsReproducible packs linux/amd64 twice: the same archive bytes both times, and
// the archive holds an executable kubectl-fence that answers --help.
func TestPackIsReproducible(t *testing.T) {
	var sums []string
	var out string
	for i := 0; i < 2; i++ {
		out = t.TempDir()
		p := Pack{Version: "v1.2.3", Revision: "0123456789abcdef", Src: filepath.Join("..", ".."), Out: out, Platforms: []string{"linux/amd64"}, Log: io.Discard}
		if err := p.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(out, "kubectl-fence_v1.2.3_checksums.txt"))
		if err != nil {
			t.Fatal(err)
		}
		sums = append(sums, string(b))
	}
	if sums[0] != sums[1] || !strings.HasSuffix(sums[0], "  kubectl-fence_v1.2.3_linux_amd64.tar.gz\n") {
		t.Fatalf("two packs of one tree differ or name no archive:\n%s\n%s", sums[0], sums[1])
	}
	f, err := os.Open(filepath.Join(out, "kubectl-fence_v1.2.3_linux_amd64.tar.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	hdr, err := tr.Next()
	if err != nil || hdr.Name != "kubectl-fence" || hdr.Mode&0o111 == 0 {
		t.Fatalf("the archive's first entry: %+v, %v; want an executable kubectl-fence", hdr, err)
	}
	bin := filepath.Join(t.TempDir(), "kubectl-fence")
	w, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(w, tr); err != nil {
		t.Fatal(err)
	}
	w.Close()
	help, err := exec.Command(bin, "--help").CombinedOutput()
	if err != nil || !strings.Contains(string(help), "kubectl fence: read and speak to a kubefence release") {
		t.Fatalf("the packed kubectl-fence --help: %v\n%s", err, help)
	}
}
