package imagebuild

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"time"
)

// Files of the image that come from Debian packages.
const (
	// Ipmitool is the ipmitool binary, from the package ipmitool, which the IPMI agent's
	// lanplus provider runs.
	Ipmitool = "/usr/bin/ipmitool"
	// PENRegistry is IANA's enterprise numbers, from the ipmitool package: ipmitool reads
	// it on every run and prints "IANA PEN registry open failed" without it, which would
	// end up in every error the IPMI agent reports.
	PENRegistry = "/usr/share/misc/enterprise-numbers.txt"
	// CACerts is the CA bundle for Redfish BMCs and cloud APIs, where Go reads it: every
	// certificate of the package ca-certificates, in the order of their paths.
	CACerts = "/etc/ssl/certs/ca-certificates.crt"
	// OSRelease names the Debian release (package base-files), which scanners read with
	// /var/lib/dpkg/status.d to match the packages with advisories.
	OSRelease = "/etc/os-release"
)

// Packages the base takes named files from; the libraries come from whichever locked
// package holds them.
const (
	pkgIpmitool  = "ipmitool"
	pkgCACerts   = "ca-certificates"
	pkgBaseFiles = "base-files"
)

// epoch is the Unix epoch, the time of files whose tree sets no other.
var epoch = time.Unix(0, 0).UTC()

// BaseTree is what the image of arch a holds besides kubefence: a root filesystem like
// distroless's (passwd and group with nonroot 65532, nsswitch.conf, /tmp 1777) and, from
// the Debian packages debs (the lock's for a, unpacked): ipmitool with the libraries and
// loader it links, the CA bundle, os-release, and each package's status stanza and
// copyright. It fails when a locked package gives the image nothing: the lock lists
// exactly what the image holds.
func BaseTree(a Arch, debs []*Deb, mtime time.Time) (*Tree, error) {
	t := NewTree(mtime)
	if err := addSkeleton(t); err != nil {
		return nil, err
	}
	byName := map[string]*Deb{}
	for _, d := range debs {
		byName[d.Name] = d
	}
	for _, name := range []string{pkgIpmitool, pkgCACerts, pkgBaseFiles} {
		if byName[name] == nil {
			return nil, fmt.Errorf("%s: no package %s for %s", LockFile, name, a.Name)
		}
	}
	used := map[*Deb]bool{}
	take := func(d *Deb, p string) error {
		e := d.Files.Get(p)
		if e == nil {
			return fmt.Errorf("package %s has no %s", d.DebPackage, p)
		}
		used[d] = true
		c := *e
		c.UID, c.GID = 0, 0
		return t.add(c)
	}
	if err := takeIpmitool(a, byName[pkgIpmitool], debs, take); err != nil {
		return nil, err
	}
	base := byName[pkgBaseFiles]
	for _, p := range []string{"/usr/lib/os-release", OSRelease} {
		if err := take(base, p); err != nil {
			return nil, err
		}
	}
	bundle, err := caBundle(byName[pkgCACerts])
	if err != nil {
		return nil, err
	}
	used[byName[pkgCACerts]] = true
	if err := t.File(CACerts, 0o644, bundle); err != nil {
		return nil, err
	}
	for _, d := range debs {
		if !used[d] {
			return nil, fmt.Errorf("%s locks %s, but the image takes no file of it: regenerate the lock (make debian-lock)", LockFile, d.DebPackage)
		}
	}
	if err := addPackageRecords(t, debs); err != nil {
		return nil, err
	}
	return t, nil
}

// takeIpmitool takes ipmitool, the IANA enterprise numbers it reads, and every file of
// debs it links (libraries, loader, the links to them).
func takeIpmitool(a Arch, ipmi *Deb, debs []*Deb, take func(*Deb, string) error) error {
	for _, p := range []string{Ipmitool, PENRegistry} {
		if err := take(ipmi, p); err != nil {
			return err
		}
	}
	libs, err := linkedFiles(a, Ipmitool, ipmi.Files.Get(Ipmitool).Data, debs)
	if err != nil {
		return err
	}
	for _, l := range libs {
		if err := take(l.deb, l.entry.Path); err != nil {
			return err
		}
	}
	return nil
}

// addSkeleton adds the users, name service configuration and directories every image
// has.
func addSkeleton(t *Tree) error {
	files := []struct {
		path string
		data string
	}{
		{"/etc/passwd", "root:x:0:0:root:/root:/sbin/nologin\n" +
			"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n" +
			fmt.Sprintf("nonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", NonRoot, NonRoot)},
		{"/etc/group", "root:x:0:\nnobody:x:65534:\n" + fmt.Sprintf("nonroot:x:%d:\n", NonRoot)},
		// glibc's name lookups (ipmitool -H bmc.example): /etc/hosts, then DNS. Both
		// are built into glibc 2.34 and later, so no libnss_* is needed.
		{"/etc/nsswitch.conf", "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\nnetworks: files\nprotocols: files\nservices: files\n"},
	}
	for _, f := range files {
		if err := t.File(f.path, 0o644, []byte(f.data)); err != nil {
			return err
		}
	}
	for _, d := range []struct {
		path     string
		perm     os.FileMode
		uid, gid int
	}{
		{"/tmp", os.ModeSticky | 0o777, 0, 0},
		{"/root", 0o700, 0, 0},
		{"/home/nonroot", 0o700, NonRoot, NonRoot},
		{"/var/run", 0o755, 0, 0},
	} {
		if err := t.Dir(d.path, d.perm, d.uid, d.gid); err != nil {
			return err
		}
	}
	return nil
}

// caBundle concatenates every certificate of the ca-certificates package, sorted by
// path, each ending in a newline: what update-ca-certificates writes at install, made
// here from the package alone.
func caBundle(d *Deb) ([]byte, error) {
	var b bytes.Buffer
	n := 0
	for _, p := range d.Files.Paths() {
		e := d.Files.Get(p)
		if !strings.HasPrefix(p, "/usr/share/ca-certificates/") || !strings.HasSuffix(p, ".crt") || !e.Mode.IsRegular() {
			continue
		}
		b.Write(e.Data)
		if !bytes.HasSuffix(e.Data, []byte("\n")) {
			b.WriteByte('\n')
		}
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("package %s holds no certificate", d.DebPackage)
	}
	return b.Bytes(), nil
}

// addPackageRecords adds each package's metadata as a distroless image carries it:
// /var/lib/dpkg/status.d/NAME (its control stanza, marked installed, which image
// scanners read) and /usr/share/doc/NAME/copyright (the licences of what the image
// redistributes; a package whose doc directory links to another's gets the link).
func addPackageRecords(t *Tree, debs []*Deb) error {
	var links []string
	for _, d := range debs {
		if err := t.File("/var/lib/dpkg/status.d/"+d.Name, 0o644, installedStanza(d.Control)); err != nil {
			return err
		}
		doc := path.Join("/usr/share/doc", d.Name)
		if e := d.Files.Get(doc + "/copyright"); e != nil && e.Mode.IsRegular() {
			if err := t.File(e.Path, 0o644, e.Data); err != nil {
				return err
			}
			continue
		}
		e := d.Files.Get(doc)
		if e == nil || e.Mode&fs.ModeSymlink == 0 {
			return fmt.Errorf("package %s has no %s/copyright", d.DebPackage, doc)
		}
		if err := t.Symlink(doc, e.Link); err != nil {
			return err
		}
		links = append(links, doc)
	}
	for _, doc := range links {
		target := path.Join(path.Dir(doc), t.Get(doc).Link, "copyright")
		if e := t.Get(target); e == nil || !e.Mode.IsRegular() {
			return errors.New(doc + " links to a directory without the copyright of a package of the image")
		}
	}
	return nil
}

// installedStanza is a control stanza as dpkg's status database records an installed
// package: with "Status: install ok installed" after its Package field.
func installedStanza(control []byte) []byte {
	lines := strings.Split(strings.TrimRight(string(control), "\n"), "\n")
	out := slices.Clone(lines[:1])
	out = append(out, "Status: install ok installed")
	out = append(out, lines[1:]...)
	return []byte(strings.Join(out, "\n") + "\n")
}
