// Command plugin packs the kubectl plugin `kubectl fence` (cmd/kubectl-fence) for a
// release (make release): one archive per platform, kubectl-fence_VERSION_OS_ARCH.tar.gz
// (.zip for Windows) holding the binary, a checksums file, and the krew manifest of
// deploy/krew/fence.yaml with the version and each archive's SHA-256 filled in:
//
//	go run ./hack/plugin -version v0.2.0 -revision $(git rev-parse HEAD) -out bin/release/v0.2.0/plugin
//
// The binaries are built as the image's are (static, -trimpath, -buildvcs=false,
// stripped, version and revision stamped) and the archives hold fixed times and owners,
// so that one commit packs the same bytes anywhere. The manifest is written only when
// every platform it names is packed (krew would offer a download that does not exist):
// a pack of fewer platforms than Platforms writes none and says so; one of all of them
// that misses a platform the manifest names is an error.
package main

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Platforms are the platforms a release packs by default: every one the krew manifest
// names.
var Platforms = []string{"linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64", "windows/amd64"}

// archiveTime is every archive entry's modification time: the same bytes from any clone.
var archiveTime = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

const buildinfoPkg = "github.com/kubefence/kubefence/pkg/buildinfo"

// Pack is one run: what to build, from where, into where.
type Pack struct {
	Version, Revision string
	// Src is the module's root; Out the directory the archives, checksums and manifest go to.
	Src, Out string
	// Manifest is the krew manifest template (deploy/krew/fence.yaml); empty: none written.
	Manifest  string
	Platforms []string
	Log       io.Writer
}

func main() {
	p := Pack{Log: os.Stderr}
	platforms := flag.String("platforms", strings.Join(Platforms, ","), "comma-separated GOOS/GOARCH pairs")
	flag.StringVar(&p.Version, "version", "", "the release's version, vX.Y.Z")
	flag.StringVar(&p.Revision, "revision", "", "the source revision stamped into the binary")
	flag.StringVar(&p.Src, "src", ".", "the module's root")
	flag.StringVar(&p.Out, "out", "", "the directory to write into")
	flag.StringVar(&p.Manifest, "manifest", "deploy/krew/fence.yaml", "the krew manifest template; empty: write none")
	flag.Parse()
	p.Platforms = strings.Split(*platforms, ",")
	if err := p.Run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "plugin:", err)
		os.Exit(1)
	}
}

// Run builds and packs every platform, then writes the checksums and the manifest.
func (p Pack) Run(ctx context.Context) error {
	if !regexp.MustCompile(`^v\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$`).MatchString(p.Version) {
		return fmt.Errorf("-version %q: want vX.Y.Z", p.Version)
	}
	if p.Out == "" {
		return errors.New("-out: name the directory to write into")
	}
	if err := os.MkdirAll(p.Out, 0o755); err != nil {
		return err
	}
	sums := map[string]string{}
	var lines []string
	for _, pl := range p.Platforms {
		goos, goarch, ok := strings.Cut(pl, "/")
		if !ok || goos == "" || goarch == "" {
			return fmt.Errorf("-platforms: %q is not GOOS/GOARCH", pl)
		}
		name, sum, err := p.pack(ctx, goos, goarch)
		if err != nil {
			return err
		}
		sums[goos+"_"+goarch] = sum
		lines = append(lines, sum+"  "+name+"\n")
	}
	slices.Sort(lines)
	if err := os.WriteFile(filepath.Join(p.Out, "kubectl-fence_"+p.Version+"_checksums.txt"), []byte(strings.Join(lines, "")), 0o644); err != nil {
		return err
	}
	if p.Manifest == "" {
		return nil
	}
	tmpl, err := os.ReadFile(filepath.Join(p.Src, p.Manifest))
	if err != nil {
		return err
	}
	m, err := FillManifest(string(tmpl), p.Version, sums)
	var missing errMissing
	if errors.As(err, &missing) && len(p.Platforms) < len(Platforms) {
		// A pack of some platforms (a test's) has archives, not a manifest.
		fmt.Fprintf(p.Log, "plugin: no krew manifest: %v\n", err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s: %w", p.Manifest, err)
	}
	return os.WriteFile(filepath.Join(p.Out, "fence.yaml"), []byte(m), 0o644)
}

// pack builds the binary for goos/goarch and writes its archive; it returns the
// archive's name and SHA-256.
func (p Pack) pack(ctx context.Context, goos, goarch string) (string, string, error) {
	dir, err := os.MkdirTemp("", "kubectl-fence-")
	if err != nil {
		return "", "", err
	}
	defer os.RemoveAll(dir)
	bin := "kubectl-fence"
	if goos == "windows" {
		bin += ".exe"
	}
	ldflags := fmt.Sprintf("-s -w -X %s.version=%s -X %s.revision=%s", buildinfoPkg, p.Version, buildinfoPkg, p.Revision)
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false", "-ldflags", ldflags, "-o", filepath.Join(dir, bin), "./cmd/kubectl-fence")
	cmd.Dir = p.Src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+goos, "GOARCH="+goarch)
	cmd.Stdout, cmd.Stderr = p.Log, p.Log
	if err := cmd.Run(); err != nil {
		return "", "", fmt.Errorf("build kubectl-fence for %s/%s: %w", goos, goarch, err)
	}
	body, err := os.ReadFile(filepath.Join(dir, bin))
	if err != nil {
		return "", "", err
	}
	name := fmt.Sprintf("kubectl-fence_%s_%s_%s", p.Version, goos, goarch)
	var archive []byte
	if goos == "windows" {
		name += ".zip"
		archive, err = zipped(bin, body)
	} else {
		name += ".tar.gz"
		archive, err = tarred(bin, body)
	}
	if err != nil {
		return "", "", err
	}
	if err := os.WriteFile(filepath.Join(p.Out, name), archive, 0o644); err != nil {
		return "", "", err
	}
	sum := sha256.Sum256(archive)
	return name, hex.EncodeToString(sum[:]), nil
}

// tarred is a gzipped tar of one executable file, with fixed times and owners.
func tarred(name string, body []byte) ([]byte, error) {
	var buf bytes.Buffer
	gz, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	gz.ModTime = archiveTime
	tw := tar.NewWriter(gz)
	hdr := &tar.Header{Name: name, Mode: 0o755, Size: int64(len(body)), ModTime: archiveTime, Typeflag: tar.TypeReg, Format: tar.FormatPAX}
	if err := tw.WriteHeader(hdr); err != nil {
		return nil, err
	}
	if _, err := tw.Write(body); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// zipped is a zip of one executable file, with a fixed time.
func zipped(name string, body []byte) ([]byte, error) {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	h := &zip.FileHeader{Name: name, Method: zip.Deflate, Modified: archiveTime}
	h.SetMode(0o755)
	w, err := zw.CreateHeader(h)
	if err != nil {
		return nil, err
	}
	if _, err := w.Write(body); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// errMissing names the platforms a manifest names and a pack left out.
type errMissing []string

func (e errMissing) Error() string {
	return "the manifest names platforms that were not packed: " + strings.Join(e, ", ")
}

// manifestSum is a checksum placeholder of the krew manifest template.
var manifestSum = regexp.MustCompile(`SHA256_([A-Z0-9]+)_([A-Z0-9]+)`)

// FillManifest puts version and the archives' checksums (by os_arch) into the krew
// manifest template. A platform the template names and sums lacks is an error.
func FillManifest(tmpl, version string, sums map[string]string) (string, error) {
	var missing []string
	out := manifestSum.ReplaceAllStringFunc(tmpl, func(ph string) string {
		m := manifestSum.FindStringSubmatch(ph)
		key := strings.ToLower(m[1] + "_" + m[2])
		sum, ok := sums[key]
		if !ok {
			missing = append(missing, strings.Replace(key, "_", "/", 1))
			return ph
		}
		return sum
	})
	if len(missing) > 0 {
		return "", errMissing(missing)
	}
	// The template's leading comment tells how it is filled: the filled one starts at
	// its apiVersion.
	i := strings.Index(out, "apiVersion:")
	if i < 0 || !strings.Contains(out[i:], "version: VERSION") {
		return "", errors.New("the manifest has no apiVersion, or no spec.version placeholder VERSION")
	}
	return strings.ReplaceAll(out[i:], "VERSION", version), nil
}
