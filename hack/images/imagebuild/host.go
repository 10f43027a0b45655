package imagebuild

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// Files taken from this machine (a Debian one) into the image.
const (
	// HostIpmitool is the ipmitool binary, from the Debian package ipmitool. It goes to
	// the same path in the image, with every library ldd lists and the dynamic loader.
	HostIpmitool = "/usr/bin/ipmitool"
	// HostPENRegistry is IANA's enterprise numbers, from the ipmitool package: ipmitool
	// reads it on every run and prints "IANA PEN registry open failed" without it,
	// which would end up in every error the IPMI agent reports.
	HostPENRegistry = "/usr/share/misc/enterprise-numbers.txt"
	// HostCACerts is the CA bundle, from the ca-certificates package, for Redfish BMCs
	// and cloud APIs; Go reads it at this path.
	HostCACerts = "/etc/ssl/certs/ca-certificates.crt"
	// HostOSRelease names the Debian release, from base-files.
	HostOSRelease = "/etc/os-release"
)

// IpmitoolInstallHint says how to get what HostIpmitool names.
const IpmitoolInstallHint = "install the Debian package ipmitool (apt-get install ipmitool, or hack/deps.sh): the image carries the machine's own /usr/bin/ipmitool with its libraries"

// hostOwners maps the host files that no package lists (generated at install) to the
// package they come from.
var hostOwners = map[string]string{HostCACerts: "ca-certificates"}

// ipmitoolFiles lists HostIpmitool, the shared libraries and the loader it needs, as
// ldd prints them, and HostPENRegistry.
func ipmitoolFiles() ([]string, error) {
	if _, err := os.Stat(HostIpmitool); err != nil {
		return nil, fmt.Errorf("ipmitool, which the image carries for the IPMI agent: %w; %s", err, IpmitoolInstallHint)
	}
	out, err := exec.Command("ldd", HostIpmitool).Output()
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %w", HostIpmitool, exitText(err))
	}
	libs, err := ParseLdd(string(out))
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %w", HostIpmitool, err)
	}
	if _, err := os.Stat(HostPENRegistry); err != nil {
		return nil, fmt.Errorf("%w; %s", err, IpmitoolInstallHint)
	}
	return append([]string{HostIpmitool, HostPENRegistry}, libs...), nil
}

// ParseLdd returns the absolute paths in ldd's output: each library a binary loads and
// the dynamic loader. The kernel's vDSO has no file and is left out; a library ldd
// could not find is an error.
func ParseLdd(out string) ([]string, error) {
	var paths []string
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if strings.Contains(line, "not found") {
			return nil, fmt.Errorf("missing library: %s", line)
		}
		if line == "statically linked" || strings.Contains(line, "not a dynamic executable") {
			continue
		}
		f := line
		if _, after, ok := strings.Cut(line, "=>"); ok {
			f = strings.TrimSpace(after)
		}
		// What is left is "PATH (0xADDRESS)" or, for the vDSO, "NAME (0xADDRESS)".
		f, _, _ = strings.Cut(f, " (")
		f = strings.TrimSpace(f)
		if !strings.HasPrefix(f, "/") {
			continue
		}
		if !slices.Contains(paths, f) {
			paths = append(paths, f)
		}
	}
	if len(paths) == 0 {
		return nil, errors.New("no library listed")
	}
	return paths, nil
}

// addHostPackages adds the Debian metadata of the packages that files come from, as
// a distroless image carries it: /var/lib/dpkg/status.d/PACKAGE (the package's status
// stanza, which image scanners read) and /usr/share/doc/PACKAGE/copyright (the
// licences of what the image redistributes). It returns the packages, sorted.
func addHostPackages(t *Tree, files []string) ([]string, error) {
	if _, err := exec.LookPath("dpkg-query"); err != nil {
		return nil, fmt.Errorf("dpkg-query, to name the Debian packages the image takes files from: %w", err)
	}
	var pkgs []string
	for _, f := range files {
		owners, err := packagesOf(f)
		if err != nil {
			return nil, err
		}
		for _, p := range owners {
			if !slices.Contains(pkgs, p) {
				pkgs = append(pkgs, p)
			}
		}
	}
	slices.Sort(pkgs)
	for _, p := range pkgs {
		status, err := exec.Command("dpkg-query", "-s", p).Output()
		if err != nil {
			return nil, fmt.Errorf("dpkg-query -s %s: %w", p, exitText(err))
		}
		short, _, _ := strings.Cut(p, ":") // libc6:amd64 -> libc6
		if err := t.File("/var/lib/dpkg/status.d/"+short, 0o644, status); err != nil {
			return nil, err
		}
		copyright := path.Join("/usr/share/doc", short, "copyright")
		if err := t.HostFile(copyright, copyright, 0o644); err != nil {
			return nil, fmt.Errorf("licence of package %s: %w", p, err)
		}
	}
	return pkgs, nil
}

// packagesOf names the packages that installed file, by dpkg-query -S. On a merged-/usr
// system a library ldd finds in /lib may be listed under /usr/lib, so that and the path
// with every link resolved are asked too.
func packagesOf(file string) ([]string, error) {
	if p, ok := hostOwners[file]; ok {
		return []string{p}, nil
	}
	candidates := []string{file}
	if !strings.HasPrefix(file, "/usr/") {
		candidates = append(candidates, "/usr"+file)
	}
	if real, err := filepath.EvalSymlinks(file); err == nil && !slices.Contains(candidates, real) {
		candidates = append(candidates, real)
	}
	for _, c := range candidates {
		// dpkg-query fails for a path no package lists: that is the next candidate's turn.
		out, _ := exec.Command("dpkg-query", "-S", c).Output()
		var pkgs []string
		for _, line := range strings.Split(string(out), "\n") {
			// "libc6:amd64: /lib/x86_64-linux-gnu/libc.so.6"; diversion lines differ.
			list, f, ok := strings.Cut(line, ": /")
			if !ok || "/"+f != c {
				continue
			}
			for _, p := range strings.Split(list, ",") {
				pkgs = append(pkgs, strings.TrimSpace(p))
			}
		}
		if len(pkgs) > 0 {
			return pkgs, nil
		}
	}
	return nil, fmt.Errorf("no Debian package lists %s (dpkg-query -S %s)", file, strings.Join(candidates, ", "))
}

// exitText adds a failed command's stderr to its error.
func exitText(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) && len(bytes.TrimSpace(ee.Stderr)) > 0 {
		return fmt.Errorf("%w: %s", err, bytes.TrimSpace(ee.Stderr))
	}
	return err
}
