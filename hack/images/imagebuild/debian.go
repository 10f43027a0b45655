package imagebuild

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// LockFile is the Debian lock, relative to the repository root: every Debian package the
// image takes files from, per architecture, at a version and SHA-256 written down.
const LockFile = "hack/images/debian.lock"

// DebianCacheDir holds the downloaded packages, relative to the repository root.
const DebianCacheDir = ".cache/debian"

// ArchAll is the Debian architecture of packages that serve every architecture.
const ArchAll = "all"

// DebPackage is one line of the lock: a Debian package file, where to get it and its
// SHA-256.
type DebPackage struct {
	Name    string
	Arch    string // a Debian architecture (amd64, arm64) or ArchAll
	Version string
	SHA256  string
	URL     string
}

// String names the package as apt does: name:arch=version.
func (p DebPackage) String() string { return p.Name + ":" + p.Arch + "=" + p.Version }

// FileName is the .deb's name in the Debian archive (the URL's last element).
func (p DebPackage) FileName() string {
	u, err := url.Parse(p.URL)
	if err != nil {
		return p.Name + "_" + p.Arch + ".deb"
	}
	return path.Base(u.Path)
}

// Lock is the parsed lock file.
type Lock struct {
	Packages []DebPackage
}

// For lists the packages an image of arch takes files from: those of arch and those of
// every architecture, in lock order.
func (l Lock) For(arch string) []DebPackage {
	var out []DebPackage
	for _, p := range l.Packages {
		if p.Arch == arch || p.Arch == ArchAll {
			out = append(out, p)
		}
	}
	return out
}

// lockHeader opens the lock file that WriteLock writes.
const lockHeader = `# The Debian packages the kubefence image takes files from, per architecture (hack/images).
# Every file of the image that kubefence does not build comes from one of these, checked
# against the SHA-256 below before it is used; nothing comes from the build machine.
# Regenerate on purpose with ` + "`make debian-lock`" + `: it asks apt for the current versions and
# follows ipmitool's dependencies to the libraries it loads (apt must know arm64:
# dpkg --add-architecture arm64 && apt-get update).
#
# name arch version sha256 url
`

// ParseLock reads a lock file: comment lines (#) and blank lines are skipped, every other
// line is "name arch version sha256 url". Each error names the line.
func ParseLock(r io.Reader) (Lock, error) {
	var l Lock
	seen := map[string]int{}
	s := bufio.NewScanner(r)
	for n := 1; s.Scan(); n++ {
		line := strings.TrimSpace(s.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 5 {
			return Lock{}, fmt.Errorf("line %d: %d fields, want 5 (name arch version sha256 url)", n, len(f))
		}
		p := DebPackage{Name: f[0], Arch: f[1], Version: f[2], SHA256: f[3], URL: f[4]}
		if err := p.validate(); err != nil {
			return Lock{}, fmt.Errorf("line %d: %w", n, err)
		}
		key := p.Name + ":" + p.Arch
		if prev, ok := seen[key]; ok {
			return Lock{}, fmt.Errorf("line %d: %s is already locked on line %d", n, key, prev)
		}
		seen[key] = n
		l.Packages = append(l.Packages, p)
	}
	if err := s.Err(); err != nil {
		return Lock{}, err
	}
	if len(l.Packages) == 0 {
		return Lock{}, errors.New("no package")
	}
	return l, nil
}

func (p DebPackage) validate() error {
	if b, err := hex.DecodeString(p.SHA256); err != nil || len(b) != sha256.Size {
		return fmt.Errorf("%s: sha256 %q is not 64 hex digits", p.Name, p.SHA256)
	}
	u, err := url.Parse(p.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || !strings.HasSuffix(u.Path, ".deb") {
		return fmt.Errorf("%s: url %q is not an http(s) URL of a .deb", p.Name, p.URL)
	}
	return nil
}

// ReadLock reads the lock file at file.
func ReadLock(file string) (Lock, error) {
	f, err := os.Open(file)
	if err != nil {
		return Lock{}, err
	}
	defer f.Close()
	l, err := ParseLock(f)
	if err != nil {
		return Lock{}, fmt.Errorf("%s: %w", file, err)
	}
	return l, nil
}

// WriteLock writes l to file, sorted by architecture and name, with the header that says
// what the file is.
func WriteLock(file string, l Lock) error {
	pkgs := slices.Clone(l.Packages)
	slices.SortFunc(pkgs, func(a, b DebPackage) int {
		return strings.Compare(a.Arch+" "+a.Name, b.Arch+" "+b.Name)
	})
	var b bytes.Buffer
	b.WriteString(lockHeader)
	for _, p := range pkgs {
		if err := p.validate(); err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s %s %s %s %s\n", p.Name, p.Arch, p.Version, p.SHA256, p.URL)
	}
	return os.WriteFile(file, b.Bytes(), 0o644)
}

// Fetcher downloads locked packages into a cache directory and hands them out only after
// their SHA-256 matched the lock's.
type Fetcher struct {
	// Dir is the cache: one file per package, named as in the archive.
	Dir string
	// Client downloads; nil means http.DefaultClient.
	Client *http.Client
	// Log receives one line per download; nil discards them.
	Log io.Writer
}

// Fetch returns the content of p: from the cache when the cached file's SHA-256 is the
// lock's, else downloaded from p.URL, checked, and cached.
func (f Fetcher) Fetch(ctx context.Context, p DebPackage) ([]byte, error) {
	cached := filepath.Join(f.Dir, p.FileName())
	if data, err := os.ReadFile(cached); err == nil {
		if checkSum(data, p.SHA256) == nil {
			return data, nil
		}
		// A partial or altered file: fetched again, and replaced only once it checks out.
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	data, err := f.download(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("debian package %s: %w", p, err)
	}
	if err := checkSum(data, p.SHA256); err != nil {
		return nil, fmt.Errorf("debian package %s from %s: %w; the mirror serves other bytes than the lock names (regenerate it on purpose: make debian-lock)", p, p.URL, err)
	}
	if err := os.MkdirAll(f.Dir, 0o755); err != nil {
		return nil, err
	}
	tmp, err := os.CreateTemp(f.Dir, ".fetch-*")
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return nil, err
	}
	if err := tmp.Close(); err != nil {
		return nil, err
	}
	return data, os.Rename(tmp.Name(), cached)
}

func (f Fetcher) download(ctx context.Context, p DebPackage) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL, nil)
	if err != nil {
		return nil, err
	}
	client := f.Client
	if client == nil {
		client = http.DefaultClient
	}
	if f.Log != nil {
		fmt.Fprintf(f.Log, "downloading %s\n", p.URL)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		// A version the mirror no longer carries (Debian keeps only the newest of each
		// suite) is still on snapshot.debian.org, by the same pool path.
		return nil, fmt.Errorf("GET %s: %s (a superseded version is on snapshot.debian.org; or regenerate the lock: make debian-lock)", p.URL, resp.Status)
	}
	// Debian packages of the image are a few MB; the bound stops a runaway response.
	return io.ReadAll(io.LimitReader(resp.Body, 256<<20))
}

func checkSum(data []byte, want string) error {
	sum := sha256.Sum256(data)
	if got := hex.EncodeToString(sum[:]); got != want {
		return fmt.Errorf("sha256 %s, want %s", got, want)
	}
	return nil
}

// LoadDebs reads the lock of the repository at src and returns its packages for arch,
// fetched into src's cache (DebianCacheDir), checked and unpacked. Downloads are logged
// to log (nil: not).
func LoadDebs(ctx context.Context, src, arch string, log io.Writer) ([]*Deb, error) {
	lock, err := ReadLock(filepath.Join(src, LockFile))
	if err != nil {
		return nil, err
	}
	pkgs := lock.For(arch)
	if len(pkgs) == 0 {
		return nil, fmt.Errorf("%s: no package for %s", LockFile, arch)
	}
	f := Fetcher{Dir: filepath.Join(src, DebianCacheDir), Log: log}
	debs := make([]*Deb, 0, len(pkgs))
	for _, p := range pkgs {
		data, err := f.Fetch(ctx, p)
		if err != nil {
			return nil, err
		}
		d, err := ReadDeb(p, data)
		if err != nil {
			return nil, err
		}
		debs = append(debs, d)
	}
	return debs, nil
}
