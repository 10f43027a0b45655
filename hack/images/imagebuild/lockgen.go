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

// AptSource answers for the packages apt offers, many at a time: each question to apt
// reads its whole cache, which takes seconds.
type AptSource struct {
	// Records returns the candidate versions of names for arch (ArchAll: the native
	// ones), as `apt-cache show` does; a name apt has no package of is left out.
	Records func(ctx context.Context, names []string, arch string) ([]AptRecord, error)
	// Locate returns where each package file is and its SHA-256, by package name, as
	// `apt-get download --print-uris` does.
	Locate func(ctx context.Context, recs []AptRecord) (map[string]DebPackage, error)
}

// Apt is the AptSource of this machine's apt, which checked the signatures of the
// archive's indexes the records come from.
func Apt() AptSource {
	return AptSource{Records: aptRecords, Locate: aptLocate}
}

// GenerateLock locks, for each architecture, ipmitool and the packages of its
// dependencies that hold a library it loads (directly or through another library),
// found by reading the ELF files of the packages; base-files for os-release; and
// ca-certificates (one for every architecture). Packages are fetched (and kept) in f's
// cache to read them.
func GenerateLock(ctx context.Context, src AptSource, f Fetcher, log io.Writer) (Lock, error) {
	var l Lock
	certs, err := lockNamed(ctx, src, f, ArchAll, pkgCACerts)
	if err != nil {
		return Lock{}, err
	}
	l.Packages = append(l.Packages, certs...)
	for _, a := range Arches {
		base, err := lockNamed(ctx, src, f, a.Name, pkgBaseFiles)
		if err != nil {
			return Lock{}, err
		}
		l.Packages = append(l.Packages, base...)
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

// lockNamed locks the candidate versions of names for arch.
func lockNamed(ctx context.Context, src AptSource, f Fetcher, arch string, names ...string) ([]DebPackage, error) {
	recs, err := src.Records(ctx, names, arch)
	if err != nil {
		return nil, err
	}
	debs, err := fetchRecords(ctx, src, f, recs)
	if err != nil {
		return nil, err
	}
	var out []DebPackage
	for _, name := range names {
		d, ok := debs[name]
		if !ok {
			return nil, fmt.Errorf("apt has no package %s for %s", name, arch)
		}
		out = append(out, d.DebPackage)
	}
	return out, nil
}

// fetchRecords locates, fetches and unpacks the packages of recs.
func fetchRecords(ctx context.Context, src AptSource, f Fetcher, recs []AptRecord) (map[string]*Deb, error) {
	located, err := src.Locate(ctx, recs)
	if err != nil {
		return nil, err
	}
	out := map[string]*Deb{}
	for _, r := range recs {
		p, ok := located[r.Name]
		if !ok {
			return nil, fmt.Errorf("apt located no file of %s:%s=%s", r.Name, r.Arch, r.Version)
		}
		if err := p.validate(); err != nil {
			return nil, err
		}
		data, err := f.Fetch(ctx, p)
		if err != nil {
			return nil, err
		}
		if out[r.Name], err = ReadDeb(p, data); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// dependencyRecords returns root's record for a and those of its dependencies built for
// a, transitively, by name: the packages that may hold a library of a (a package for
// every architecture holds none, and its dependencies are not followed).
func dependencyRecords(ctx context.Context, src AptSource, root string, a Arch) (map[string]AptRecord, error) {
	recs := map[string]AptRecord{}
	asked := map[string]bool{}
	level := []string{root}
	for len(level) > 0 {
		for _, n := range level {
			asked[n] = true
		}
		found, err := src.Records(ctx, level, a.Name)
		if err != nil {
			return nil, err
		}
		level = nil
		for _, r := range found {
			if r.Arch != a.Name {
				continue
			}
			recs[r.Name] = r
			for _, d := range r.Depends {
				if !asked[d] && !slices.Contains(level, d) {
					level = append(level, d)
				}
			}
		}
	}
	if _, ok := recs[root]; !ok {
		return nil, fmt.Errorf("apt has no package %s for %s (for arm64: dpkg --add-architecture arm64 && apt-get update)", root, a.Name)
	}
	return recs, nil
}

// libraryClosure returns ipmitool for a and, in the order they were found, the packages
// that hold the libraries it loads: each missing library is looked for in the
// dependencies of the packages taken so far, in their order, never in the build
// machine's files.
func libraryClosure(ctx context.Context, src AptSource, f Fetcher, a Arch, log io.Writer) ([]*Deb, error) {
	recs, err := dependencyRecords(ctx, src, pkgIpmitool, a)
	if err != nil {
		return nil, err
	}
	all := make([]AptRecord, 0, len(recs))
	for _, r := range recs {
		all = append(all, r)
	}
	slices.SortFunc(all, func(x, y AptRecord) int { return strings.Compare(x.Name, y.Name) })
	debs, err := fetchRecords(ctx, src, f, all)
	if err != nil {
		return nil, err
	}
	root := debs[pkgIpmitool]
	bin := root.Files.Get(Ipmitool)
	if bin == nil {
		return nil, fmt.Errorf("package %s has no %s", root.DebPackage, Ipmitool)
	}
	taken := []*Deb{root}
	deps := slices.Clone(recs[pkgIpmitool].Depends)
	for {
		_, err := linkedFiles(a, Ipmitool, bin.Data, taken)
		var miss *MissingLibError
		if !errors.As(err, &miss) {
			return taken, err
		}
		i := slices.IndexFunc(deps, func(name string) bool {
			d := debs[name]
			return d != nil && !slices.Contains(taken, d) && holds(d, a, miss.Lib)
		})
		if i < 0 {
			return nil, fmt.Errorf("%s: %w; no dependency of %s holds it", a.Name, err, packageNames(taken))
		}
		found := debs[deps[i]]
		fmt.Fprintf(log, "%s: %s is in %s\n", a.Name, miss.Lib, found.DebPackage)
		taken = append(taken, found)
		deps = append(deps, recs[found.Name].Depends...)
	}
}

// holds says whether d has lib where the loader of a looks (or at lib, a path).
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

func aptRecords(ctx context.Context, names []string, arch string) ([]AptRecord, error) {
	args := []string{"show", "--no-all-versions"}
	for _, n := range names {
		if arch != ArchAll {
			n += ":" + arch
		}
		args = append(args, n)
	}
	// apt-cache show leaves out the names it has no package of (virtual ones).
	out, err := exec.CommandContext(ctx, "apt-cache", args...).Output()
	if err != nil {
		return nil, fmt.Errorf("apt-cache %s: %w (for arm64: dpkg --add-architecture arm64 && apt-get update)", strings.Join(args, " "), exitText(err))
	}
	var recs []AptRecord
	for _, stanza := range strings.Split(string(out), "\n\n") {
		if strings.TrimSpace(stanza) == "" {
			continue
		}
		r, err := ParseAptRecord([]byte(stanza))
		if err != nil {
			return nil, err
		}
		recs = append(recs, r)
	}
	return recs, nil
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

func aptLocate(ctx context.Context, recs []AptRecord) (map[string]DebPackage, error) {
	args := []string{"download", "--print-uris"}
	for _, r := range recs {
		q := r.Name + "=" + r.Version
		if r.Arch != ArchAll {
			q = r.Name + ":" + r.Arch + "=" + r.Version
		}
		args = append(args, q)
	}
	cmd := exec.CommandContext(ctx, "apt-get", args...)
	cmd.Dir = os.TempDir() // print-uris downloads nothing, but apt checks the directory
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("apt-get %s: %w", strings.Join(args, " "), exitText(err))
	}
	return ParsePrintURIs(string(out), recs)
}

// ParsePrintURIs reads what `apt-get download --print-uris` prints for recs, a line
// "'URL' FILE SIZE SHA256:HEX" each, FILE being NAME_VERSION_ARCH.deb (the version
// without its epoch).
func ParsePrintURIs(out string, recs []AptRecord) (map[string]DebPackage, error) {
	byFile := map[string][2]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) != 4 || !strings.HasPrefix(f[3], "SHA256:") {
			return nil, fmt.Errorf("apt-get --print-uris printed %q, want 'URL' FILE SIZE SHA256:HEX", line)
		}
		byFile[f[1]] = [2]string{strings.Trim(f[0], "'"), strings.TrimPrefix(f[3], "SHA256:")}
	}
	out2 := map[string]DebPackage{}
	for _, r := range recs {
		_, v, ok := strings.Cut(r.Version, ":")
		if !ok {
			v = r.Version
		}
		loc, ok := byFile[r.Name+"_"+v+"_"+r.Arch+".deb"]
		if !ok {
			return nil, fmt.Errorf("apt-get --print-uris named no file of %s:%s=%s", r.Name, r.Arch, r.Version)
		}
		out2[r.Name] = DebPackage{Name: r.Name, Arch: r.Arch, Version: r.Version, URL: loc[0], SHA256: loc[1]}
	}
	return out2, nil
}
