package imagebuild

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
)

// AptRecord is what the lock generator needs of a package as apt knows it.
type AptRecord struct {
	Name, Arch, Version string
	// Depends lists every package name of Depends and Pre-Depends, alternatives
	// included, in their order, without versions or architecture qualifiers.
	Depends []string
}

// AptSource answers for the packages apt offers.
type AptSource struct {
	// Record returns the candidate version of name:arch, as `apt-cache show` does.
	Record func(ctx context.Context, name, arch string) (AptRecord, error)
	// Locate returns where the package file of name:arch=version is and its SHA-256, as
	// `apt-get download --print-uris` does.
	Locate func(ctx context.Context, name, arch, version string) (url, sha256 string, err error)
}

// Apt is the AptSource of this machine's apt, which checked the signatures of the
// archive's indexes the records come from.
func Apt() AptSource {
	return AptSource{Record: aptRecord, Locate: aptLocate}
}

// GenerateLock locks, for each architecture, ipmitool and the packages of its
// dependencies that hold a library it loads (directly or through another library),
// found by reading the ELF files of the packages; base-files for os-release; and
// ca-certificates (one for every architecture). Packages are fetched (and kept) in f's
// cache to read them.
func GenerateLock(ctx context.Context, src AptSource, f Fetcher, log io.Writer) (Lock, error) {
	var l Lock
	lock := func(name, arch string) (*Deb, error) {
		d, _, err := lockOne(ctx, src, f, name, arch)
		if err != nil {
			return nil, err
		}
		l.Packages = append(l.Packages, d.DebPackage)
		return d, nil
	}
	if _, err := lock(pkgCACerts, ArchAll); err != nil {
		return Lock{}, err
	}
	for _, a := range Arches {
		if _, err := lock(pkgBaseFiles, a.Name); err != nil {
			return Lock{}, err
		}
		debs, err := libraryClosure(ctx, src, f, a, log)
		if err != nil {
			return Lock{}, err
		}
		for _, d := range debs {
			l.Packages = append(l.Packages, d.DebPackage)
		}
	}
	return l, nil
}

// lockOne fetches the candidate version of name:arch and returns it unpacked, with its
// dependencies as apt lists them.
func lockOne(ctx context.Context, src AptSource, f Fetcher, name, arch string) (*Deb, AptRecord, error) {
	rec, err := src.Record(ctx, name, arch)
	if err != nil {
		return nil, AptRecord{}, err
	}
	d, err := fetchRecord(ctx, src, f, rec)
	return d, rec, err
}

func fetchRecord(ctx context.Context, src AptSource, f Fetcher, rec AptRecord) (*Deb, error) {
	url, sum, err := src.Locate(ctx, rec.Name, rec.Arch, rec.Version)
	if err != nil {
		return nil, err
	}
	p := DebPackage{Name: rec.Name, Arch: rec.Arch, Version: rec.Version, SHA256: sum, URL: url}
	if err := p.validate(); err != nil {
		return nil, err
	}
	data, err := f.Fetch(ctx, p)
	if err != nil {
		return nil, err
	}
	return ReadDeb(p, data)
}

// libraryClosure returns ipmitool for a and, in the order they were found, the packages
// that hold the libraries it loads: each missing library is looked for in the
// dependencies of the packages taken so far (those built for a: a package for every
// architecture holds no library), never in the build machine's files.
func libraryClosure(ctx context.Context, src AptSource, f Fetcher, a Arch, log io.Writer) ([]*Deb, error) {
	root, rec, err := lockOne(ctx, src, f, pkgIpmitool, a.Name)
	if err != nil {
		return nil, err
	}
	bin := root.Files.Get(Ipmitool)
	if bin == nil {
		return nil, fmt.Errorf("package %s has no %s", root.DebPackage, Ipmitool)
	}
	taken := []*Deb{root}
	deps := slices.Clone(rec.Depends)
	candidates := map[string]*candidate{}
	for {
		_, err := linkedFiles(a, Ipmitool, bin.Data, taken)
		var miss *MissingLibError
		if !errors.As(err, &miss) {
			return taken, err
		}
		var found *candidate
		for _, name := range deps {
			c, ok := candidates[name]
			if !ok {
				c = newCandidate(ctx, src, f, a, name, log)
				candidates[name] = c
			}
			if c.deb != nil && !slices.Contains(taken, c.deb) && holds(c.deb, a, miss.Lib) {
				found = c
				break
			}
		}
		if found == nil {
			return nil, fmt.Errorf("%s: %w; no dependency of %s holds it", a.Name, err, packageNames(taken))
		}
		fmt.Fprintf(log, "%s: %s is in %s\n", a.Name, miss.Lib, found.deb.DebPackage)
		taken = append(taken, found.deb)
		deps = append(deps, found.rec.Depends...)
	}
}

// candidate is a dependency that may hold a library; deb is nil for one that cannot.
type candidate struct {
	rec AptRecord
	deb *Deb
}

func newCandidate(ctx context.Context, src AptSource, f Fetcher, a Arch, name string, log io.Writer) *candidate {
	rec, err := src.Record(ctx, name, a.Name)
	if err != nil || rec.Arch != a.Name {
		// A virtual package, or one for every architecture: no library of a in it.
		return &candidate{}
	}
	d, err := fetchRecord(ctx, src, f, rec)
	if err != nil {
		fmt.Fprintf(log, "%s: skipping dependency %s: %v\n", a.Name, name, err)
		return &candidate{}
	}
	return &candidate{rec: rec, deb: d}
}

// holds says whether d has lib where the loader of a looks.
func holds(d *Deb, a Arch, lib string) bool {
	if strings.HasPrefix(lib, "/") {
		return d.Files.Get(lib) != nil
	}
	for _, dir := range a.libDirs() {
		if d.Files.Get(dir+"/"+lib) != nil {
			return true
		}
	}
	return false
}

func packageNames(debs []*Deb) string {
	var names []string
	for _, d := range debs {
		names = append(names, d.Name)
	}
	return strings.Join(names, ", ")
}

func aptRecord(ctx context.Context, name, arch string) (AptRecord, error) {
	q := name
	if arch != ArchAll {
		q += ":" + arch
	}
	out, err := exec.CommandContext(ctx, "apt-cache", "show", "--no-all-versions", q).Output()
	if err != nil {
		return AptRecord{}, fmt.Errorf("apt-cache show %s: %w (for arm64: dpkg --add-architecture arm64 && apt-get update)", q, exitText(err))
	}
	return ParseAptRecord(out)
}

// ParseAptRecord reads the first stanza of `apt-cache show`.
func ParseAptRecord(out []byte) (AptRecord, error) {
	stanza, _, _ := strings.Cut(string(out), "\n\n")
	r := AptRecord{
		Name:    controlField([]byte(stanza), "Package"),
		Arch:    controlField([]byte(stanza), "Architecture"),
		Version: controlField([]byte(stanza), "Version"),
	}
	if r.Name == "" || r.Arch == "" || r.Version == "" {
		return AptRecord{}, fmt.Errorf("no Package, Architecture or Version in %.200q", stanza)
	}
	for _, field := range []string{"Pre-Depends", "Depends"} {
		r.Depends = append(r.Depends, ParseDepends(controlField([]byte(stanza), field))...)
	}
	return r, nil
}

// ParseDepends returns the package names of a Depends field, alternatives included:
// "libc6 (>= 2.34), debconf (>= 0.5) | debconf-2.0, perl:any" gives libc6, debconf,
// debconf-2.0, perl.
func ParseDepends(field string) []string {
	var names []string
	for _, clause := range strings.Split(field, ",") {
		for _, alt := range strings.Split(clause, "|") {
			name, _, _ := strings.Cut(strings.TrimSpace(alt), " ")
			name, _, _ = strings.Cut(name, "(")
			name, _, _ = strings.Cut(name, ":")
			if name = strings.TrimSpace(name); name != "" {
				names = append(names, name)
			}
		}
	}
	return names
}

func aptLocate(ctx context.Context, name, arch, version string) (string, string, error) {
	q := name + "=" + version
	if arch != ArchAll {
		q = name + ":" + arch + "=" + version
	}
	cmd := exec.CommandContext(ctx, "apt-get", "download", "--print-uris", q)
	cmd.Dir = os.TempDir() // print-uris downloads nothing, but apt checks the directory
	out, err := cmd.Output()
	if err != nil {
		return "", "", fmt.Errorf("apt-get download --print-uris %s: %w", q, exitText(err))
	}
	return ParsePrintURIs(string(out))
}

// ParsePrintURIs reads the line `apt-get download --print-uris` prints:
// 'URL' FILE SIZE SHA256:HEX.
func ParsePrintURIs(out string) (url, sha256 string, err error) {
	f := strings.Fields(strings.TrimSpace(out))
	if len(f) != 4 || !strings.HasPrefix(f[3], "SHA256:") {
		return "", "", fmt.Errorf("apt-get --print-uris printed %q, want 'URL' FILE SIZE SHA256:HEX", out)
	}
	return strings.Trim(f[0], "'"), strings.TrimPrefix(f[3], "SHA256:"), nil
}
