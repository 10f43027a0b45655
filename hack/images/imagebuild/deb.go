package imagebuild

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strconv"
	"strings"

	"github.com/ulikunitz/xz"
)

// Deb is an unpacked Debian package: its control stanza and its files, read in Go from
// the .deb itself (no dpkg), so that any machine unpacks it alike.
type Deb struct {
	DebPackage
	// Control is the package's DEBIAN/control file, the stanza dpkg records.
	Control []byte
	// Files holds what the package installs, with its modes; owners are root.
	Files *Tree
}

// ReadDeb unpacks data, the .deb of p: an ar archive of debian-binary, control.tar.* and
// data.tar.* (gzip or xz).
func ReadDeb(p DebPackage, data []byte) (*Deb, error) {
	members, err := readAr(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p.FileName(), err)
	}
	d := &Deb{DebPackage: p}
	if v := strings.TrimSpace(string(members["debian-binary"])); v != "2.0" {
		return nil, fmt.Errorf("%s: debian-binary %q, want 2.0", p.FileName(), v)
	}
	for name, body := range members {
		switch {
		case strings.HasPrefix(name, "control.tar"):
			ctl, err := untar(name, body)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", p.FileName(), err)
			}
			if e := ctl.Get("/control"); e != nil {
				d.Control = e.Data
			}
		case strings.HasPrefix(name, "data.tar"):
			if d.Files, err = untar(name, body); err != nil {
				return nil, fmt.Errorf("%s: %w", p.FileName(), err)
			}
		}
	}
	if d.Control == nil || d.Files == nil {
		return nil, fmt.Errorf("%s: no control file or no data", p.FileName())
	}
	if got := controlField(d.Control, "Package"); got != p.Name {
		return nil, fmt.Errorf("%s: the package is %q, the lock says %q", p.FileName(), got, p.Name)
	}
	if got := controlField(d.Control, "Version"); got != p.Version {
		return nil, fmt.Errorf("%s: version %q, the lock says %q", p.FileName(), got, p.Version)
	}
	return d, nil
}

// controlField is the value of a single-line field of a control stanza.
func controlField(control []byte, field string) string {
	for _, line := range strings.Split(string(control), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// readAr returns the members of an ar archive (the common format dpkg writes).
func readAr(data []byte) (map[string][]byte, error) {
	const magic = "!<arch>\n"
	if !bytes.HasPrefix(data, []byte(magic)) {
		return nil, errors.New("not an ar archive")
	}
	out := map[string][]byte{}
	rest := data[len(magic):]
	for len(rest) > 0 {
		if len(rest) < 60 {
			return nil, errors.New("truncated ar header")
		}
		h := rest[:60]
		if string(h[58:60]) != "`\n" {
			return nil, errors.New("bad ar header")
		}
		name := strings.TrimSuffix(strings.TrimSpace(string(h[:16])), "/")
		size, err := strconv.ParseInt(strings.TrimSpace(string(h[48:58])), 10, 64)
		if err != nil || size < 0 || size > int64(len(rest)-60) {
			return nil, fmt.Errorf("ar member %q: bad size", name)
		}
		out[name] = rest[60 : 60+size]
		rest = rest[60+size:]
		if size%2 == 1 && len(rest) > 0 {
			rest = rest[1:] // members start at even offsets
		}
	}
	return out, nil
}

// untar reads a (compressed) tar member into a tree: regular files, directories,
// symbolic and hard links, with their permission bits; owners become root.
func untar(name string, body []byte) (*Tree, error) {
	var r io.Reader
	switch {
	case strings.HasSuffix(name, ".xz"):
		xr, err := xz.NewReader(bytes.NewReader(body))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		r = xr
	case strings.HasSuffix(name, ".gz"):
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		r = zr
	case strings.HasSuffix(name, ".tar"):
		r = bytes.NewReader(body)
	default:
		return nil, fmt.Errorf("%s: compression not supported (gzip and xz are)", name)
	}
	t := NewTree(epoch)
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return t, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		p := path.Clean("/" + h.Name)
		if p == "/" {
			continue
		}
		perm := fs.FileMode(h.Mode).Perm() | fs.FileMode(h.Mode)&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)
		switch h.Typeflag {
		case tar.TypeDir:
			err = t.Dir(p, perm, 0, 0)
		case tar.TypeSymlink:
			err = t.Symlink(p, h.Linkname)
		case tar.TypeLink:
			src := t.Get("/" + strings.TrimPrefix(path.Clean(h.Linkname), "./"))
			if src == nil {
				return nil, fmt.Errorf("%s: %s links to %s, which comes later or not at all", name, p, h.Linkname)
			}
			err = t.add(Entry{Path: p, Mode: src.Mode, Data: src.Data})
		case tar.TypeReg:
			data, rerr := io.ReadAll(tr)
			if rerr != nil {
				return nil, fmt.Errorf("%s: %s: %w", name, p, rerr)
			}
			err = t.add(Entry{Path: p, Mode: perm, Data: data})
		default:
			return nil, fmt.Errorf("%s: %s is of tar type %q, which no package of the image may hold", name, p, h.Typeflag)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
}
