package imagebuild

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var (
	debsMu sync.Mutex
	debsOf = map[string][]*Deb{}
)

// lockedDebs are the lock's packages for arch, fetched into the repository's cache
// (the first run downloads them from the Debian mirror) and unpacked once per test run.
func lockedDebs(t *testing.T, arch string) []*Deb {
	t.Helper()
	debsMu.Lock()
	defer debsMu.Unlock()
	if d, ok := debsOf[arch]; ok {
		return d
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	d, err := LoadDebs(ctx, repoRoot, arch, nil)
	if err != nil {
		t.Fatalf("the lock's packages for %s: %v", arch, err)
	}
	debsOf[arch] = d
	return d
}

// checkBase checks the base of an image of a, flattened: ipmitool and every library it
// loads are the locked packages' files, every ELF file is for a, the CA bundle holds
// every certificate of ca-certificates, and each package has its status stanza and
// copyright.
func checkBase(t *testing.T, a Arch, debs []*Deb, files map[string]file) {
	t.Helper()
	var ipmi *Deb
	for _, d := range debs {
		if d.Name == pkgIpmitool {
			ipmi = d
		}
	}
	libs, err := linkedFiles(a, Ipmitool, ipmi.Files.Get(Ipmitool).Data, debs)
	if err != nil {
		t.Fatal(err)
	}
	if len(libs) < 5 {
		t.Errorf("ipmitool for %s links %d files, want its loader, libc and its other libraries", a.Name, len(libs))
	}
	for _, l := range append(libs, located{deb: ipmi, entry: ipmi.Files.Get(Ipmitool)}) {
		f, ok := files[l.entry.Path]
		switch {
		case !ok:
			t.Errorf("%s (from %s) missing", l.entry.Path, l.deb.DebPackage)
		case l.entry.Mode.IsRegular() && (!bytes.Equal(f.data, l.entry.Data) || f.hdr.Mode&0o111 != int64(l.entry.Mode&0o111)):
			t.Errorf("%s differs from package %s's (mode %o)", l.entry.Path, l.deb.DebPackage, f.hdr.Mode)
		case !l.entry.Mode.IsRegular() && f.hdr.Linkname != l.entry.Link:
			t.Errorf("%s links to %q, package %s to %q", l.entry.Path, f.hdr.Linkname, l.deb.DebPackage, l.entry.Link)
		}
	}
	for p, f := range files {
		if f.hdr.Typeflag == tar.TypeReg && IsELF(f.data) {
			if _, err := a.CheckELF(p, f.data); err != nil {
				t.Error(err)
			}
		}
	}
	certs := 0
	for _, d := range debs {
		if d.Name == pkgCACerts {
			for _, p := range d.Files.Paths() {
				if strings.HasPrefix(p, "/usr/share/ca-certificates/") && strings.HasSuffix(p, ".crt") {
					certs++
				}
			}
		}
		status := string(files["/var/lib/dpkg/status.d/"+d.Name].data)
		if !strings.HasPrefix(status, "Package: "+d.Name+"\nStatus: install ok installed\n") || !strings.Contains(status, "\nVersion: "+d.Version+"\n") {
			t.Errorf("status.d/%s: %.120q", d.Name, status)
		}
		if _, ok := files["/usr/share/doc/"+d.Name+"/copyright"]; !ok {
			if _, ok := files["/usr/share/doc/"+d.Name]; !ok {
				t.Errorf("no copyright of %s", d.Name)
			}
		}
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(files[CACerts].data) || certs < 100 {
		t.Errorf("%s does not parse, or ca-certificates holds only %d certificates", CACerts, certs)
	}
	if got := strings.Count(string(files[CACerts].data), "-----BEGIN CERTIFICATE-----"); got != certs {
		t.Errorf("%s holds %d certificates, the package %d", CACerts, got, certs)
	}
	if s := string(files["/usr/lib/os-release"].data); !strings.Contains(s, "ID=debian") || files[OSRelease].hdr == nil {
		t.Errorf("os-release: %.80q", s)
	}
}

// TestBaseFromLock builds the base layer of every architecture from the lock alone.
func TestBaseFromLock(t *testing.T) {
	for _, a := range Arches {
		t.Run(a.Name, func(t *testing.T) {
			debs := lockedDebs(t, a.Name)
			base, err := BaseTree(a, debs, time.Unix(0, 0))
			if err != nil {
				t.Fatal(err)
			}
			img, err := NewImageFor(a, time.Unix(0, 0), ImageConfig{}, base)
			if err != nil {
				t.Fatal(err)
			}
			checkBase(t, a, debs, flatten(t, img))
			cf, err := img.ConfigFile()
			if err != nil || cf.Architecture != a.Name {
				t.Errorf("config architecture %q (%v), want %s", cf.Architecture, err, a.Name)
			}
			t.Logf("%s: %d files, %s", a.Name, len(base.Paths()), MB(base.Size()))
		})
	}
}

// TestBaseRefusesUnusedPackage: the lock lists exactly what the image holds.
func TestBaseRefusesUnusedPackage(t *testing.T) {
	extra := &Deb{DebPackage: DebPackage{Name: "unused", Arch: "amd64", Version: "1"}, Control: []byte("Package: unused\n"), Files: NewTree(epoch)}
	if err := extra.Files.File("/usr/share/doc/unused/copyright", 0o644, []byte("x")); err != nil {
		t.Fatal(err)
	}
	debs := append(slices.Clone(lockedDebs(t, "amd64")), extra)
	_, err := BaseTree(Arches[0], debs, epoch)
	if err == nil || !strings.Contains(err.Error(), "unused:amd64=1") || !strings.Contains(err.Error(), "make debian-lock") {
		t.Errorf("an unused locked package: err = %v, want one naming it and the fix", err)
	}
}

func TestParseLock(t *testing.T) {
	sum := strings.Repeat("ab", 32)
	good := "# comment\n\nipmitool arm64 1.8.19-4+deb12u2 " + sum + " http://deb.debian.org/debian/pool/main/i/ipmitool/ipmitool_1.8.19-4%2bdeb12u2_arm64.deb\n"
	l, err := ParseLock(strings.NewReader(good))
	if err != nil {
		t.Fatal(err)
	}
	if p := l.Packages[0]; p.String() != "ipmitool:arm64=1.8.19-4+deb12u2" || p.FileName() != "ipmitool_1.8.19-4+deb12u2_arm64.deb" {
		t.Errorf("parsed %+v (%s)", p, p.FileName())
	}
	for name, tc := range map[string]struct{ lock, want string }{
		"fields":    {"ipmitool arm64 1.0\n", "line 1: 3 fields"},
		"sha256":    {"ipmitool arm64 1.0 abc http://x/a.deb\n", "line 1: ipmitool: sha256"},
		"url":       {"ipmitool arm64 1.0 " + sum + " ftp://x/a.deb\n", "line 1: ipmitool: url"},
		"duplicate": {good + good, "line 6: ipmitool:arm64 is already locked on line 3"},
		"empty":     {"# nothing\n", "no package"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := ParseLock(strings.NewReader(tc.lock)); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

// TestFetcher serves a package over HTTP: fetched once and cached, other bytes refused,
// a damaged cache fetched again.
func TestFetcher(t *testing.T) {
	body := []byte("a package")
	var served atomic.Int32
	var wrong atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		if wrong.Load() {
			w.Write([]byte("another package"))
			return
		}
		w.Write(body)
	}))
	defer srv.Close()
	sum := sha256.Sum256(body)
	p := DebPackage{Name: "p", Arch: "amd64", Version: "1", SHA256: hex.EncodeToString(sum[:]), URL: srv.URL + "/pool/p_1_amd64.deb"}
	f := Fetcher{Dir: t.TempDir()}
	ctx := context.Background()
	for i := range 2 {
		got, err := f.Fetch(ctx, p)
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("fetch %d: %q, %v", i, got, err)
		}
	}
	if served.Load() != 1 {
		t.Errorf("served %d times, want once (then from the cache)", served.Load())
	}
	cached := filepath.Join(f.Dir, "p_1_amd64.deb")
	if err := os.WriteFile(cached, []byte("damaged"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := f.Fetch(ctx, p); err != nil || !bytes.Equal(got, body) || served.Load() != 2 {
		t.Errorf("after damage: %q, %v, served %d", got, err, served.Load())
	}
	wrong.Store(true)
	os.Remove(cached)
	if _, err := f.Fetch(ctx, p); err == nil || !strings.Contains(err.Error(), "p:amd64=1") || !strings.Contains(err.Error(), "sha256") {
		t.Errorf("other bytes: err = %v, want a checksum error naming the package", err)
	}
	if _, err := os.Stat(cached); !os.IsNotExist(err) {
		t.Errorf("refused bytes were cached: %v", err)
	}
}

// TestReadDeb reads a package made here: ar, gzip control and data, links.
func TestReadDeb(t *testing.T) {
	tgz := func(entries ...*tar.Header) []byte {
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		tw := tar.NewWriter(zw)
		for _, h := range entries {
			if err := tw.WriteHeader(h); err != nil {
				t.Fatal(err)
			}
			if h.Typeflag == tar.TypeReg {
				tw.Write([]byte(h.Linkname))
			}
		}
		tw.Close()
		zw.Close()
		return b.Bytes()
	}
	reg := func(name, data string, mode int64) *tar.Header {
		// Linkname carries the content to write, for this helper only.
		return &tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: mode, Size: int64(len(data)), Linkname: data}
	}
	control := tgz(reg("./control", "Package: p\nVersion: 1.0-1\nArchitecture: arm64\n", 0o644))
	data := tgz(&tar.Header{Name: "./usr/", Typeflag: tar.TypeDir, Mode: 0o755},
		reg("./usr/bin/p", "binary", 0o755),
		&tar.Header{Name: "./usr/bin/p-link", Typeflag: tar.TypeSymlink, Linkname: "p"},
		&tar.Header{Name: "./usr/bin/p-hard", Typeflag: tar.TypeLink, Linkname: "./usr/bin/p"})
	var deb bytes.Buffer
	deb.WriteString("!<arch>\n")
	for _, m := range []struct {
		name string
		body []byte
	}{{"debian-binary", []byte("2.0\n")}, {"control.tar.gz", control}, {"data.tar.gz", data}} {
		fmt.Fprintf(&deb, "%-16s%-12d%-6d%-6d%-8s%-10d`\n", m.name, 0, 0, 0, "100644", len(m.body))
		deb.Write(m.body)
		if len(m.body)%2 == 1 {
			deb.WriteByte('\n')
		}
	}
	d, err := ReadDeb(DebPackage{Name: "p", Arch: "arm64", Version: "1.0-1"}, deb.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if e := d.Files.Get("/usr/bin/p"); e == nil || string(e.Data) != "binary" || e.Mode.Perm() != 0o755 {
		t.Errorf("/usr/bin/p: %+v", e)
	}
	if e := d.Files.Get("/usr/bin/p-link"); e == nil || e.Link != "p" {
		t.Errorf("/usr/bin/p-link: %+v", e)
	}
	if e := d.Files.Get("/usr/bin/p-hard"); e == nil || string(e.Data) != "binary" {
		t.Errorf("/usr/bin/p-hard: %+v", e)
	}
	if _, err := ReadDeb(DebPackage{Name: "p", Arch: "arm64", Version: "2.0-1"}, deb.Bytes()); err == nil || !strings.Contains(err.Error(), `version "1.0-1", the lock says "2.0-1"`) {
		t.Errorf("another version: err = %v", err)
	}
}

func TestParseDepends(t *testing.T) {
	got := ParseDepends("libc6 (>= 2.34), debconf (>= 0.5) | debconf-2.0, perl:any, libfoo1:arm64 (= 1)")
	if want := []string{"libc6", "debconf", "debconf-2.0", "perl", "libfoo1"}; !slices.Equal(got, want) {
		t.Errorf("ParseDepends = %q, want %q", got, want)
	}
	rec, err := ParseAptRecord([]byte("Package: ipmitool\nVersion: 1.8.19-4+deb12u2\nArchitecture: arm64\nDepends: libc6 (>= 2.34), libssl3\nPre-Depends: init-system-helpers (>= 1.54~)\n\nPackage: other\n"))
	if err != nil || rec.Name != "ipmitool" || rec.Arch != "arm64" || !slices.Equal(rec.Depends, []string{"init-system-helpers", "libc6", "libssl3"}) {
		t.Errorf("ParseAptRecord = %+v, %v", rec, err)
	}
	if _, err := ParseAptRecord(nil); err == nil {
		t.Error("apt-cache's empty answer (an unknown package) accepted")
	}
	out := "'http://deb.debian.org/debian/pool/main/i/ipmitool/ipmitool_1.8.19-4%2bdeb12u2_arm64.deb' ipmitool_1.8.19-4+deb12u2_arm64.deb 1974620 SHA256:8a99a321c0d5adddd51c7576e5cb5e83fe6defe96a329f45039bf99073bdf65c\n" +
		"'http://deb.debian.org/debian/pool/main/q/qemu/qemu-user-static_7.2_amd64.deb' qemu-user-static_7.2_amd64.deb 1 SHA256:00\n"
	recs := []AptRecord{{Name: "ipmitool", Arch: "arm64", Version: "1.8.19-4+deb12u2"}, {Name: "qemu-user-static", Arch: "amd64", Version: "1:7.2"}}
	located, err := ParsePrintURIs(out, recs)
	if p := located["ipmitool"]; err != nil || p.URL != "http://deb.debian.org/debian/pool/main/i/ipmitool/ipmitool_1.8.19-4%2bdeb12u2_arm64.deb" || !strings.HasPrefix(p.SHA256, "8a99a3") || located["qemu-user-static"].Version != "1:7.2" {
		t.Errorf("ParsePrintURIs = %+v, %v", located, err)
	}
	if _, err := ParsePrintURIs(out, append(recs, AptRecord{Name: "libc6", Arch: "arm64", Version: "2.36"})); err == nil || !strings.Contains(err.Error(), "libc6:arm64=2.36") {
		t.Errorf("a package apt named no file of: err = %v", err)
	}
}

// TestGenerateLock runs make debian-lock's generator against this machine's apt: for each
// architecture it finds the same packages as the committed lock (their versions may have
// moved on since), and the image builds from what it locked.
func TestGenerateLock(t *testing.T) {
	out, err := exec.Command("dpkg", "--print-foreign-architectures").Output()
	if err != nil || !slices.Contains(strings.Fields(string(out)), "arm64") {
		t.Fatalf("apt must know arm64 packages (%v): dpkg --add-architecture arm64 && apt-get update (hack/deps.sh does)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	f := Fetcher{Dir: filepath.Join(repoRoot, DebianCacheDir)}
	var log strings.Builder
	got, err := GenerateLock(ctx, Apt(), f, &log)
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	committed, err := ReadLock(filepath.Join(repoRoot, LockFile))
	if err != nil {
		t.Fatal(err)
	}
	names := func(l Lock, arch string) []string {
		var out []string
		for _, p := range l.For(arch) {
			out = append(out, p.Name+":"+p.Arch)
		}
		slices.Sort(out)
		return out
	}
	for _, a := range Arches {
		if g, c := names(got, a.Name), names(committed, a.Name); !slices.Equal(g, c) {
			t.Errorf("%s: apt gives %v, the lock holds %v", a.Name, g, c)
		}
		var debs []*Deb
		for _, p := range got.For(a.Name) {
			data, err := f.Fetch(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			d, err := ReadDeb(p, data)
			if err != nil {
				t.Fatal(err)
			}
			debs = append(debs, d)
		}
		if _, err := BaseTree(a, debs, epoch); err != nil {
			t.Errorf("the %s image from the generated lock: %v", a.Name, err)
		}
	}
	t.Logf("generated:\n%s", log.String())
}
