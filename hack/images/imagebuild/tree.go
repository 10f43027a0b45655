package imagebuild

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Entry is one file, directory or symbolic link of a Tree.
type Entry struct {
	// Path is absolute and clean, e.g. "/usr/bin/ipmitool".
	Path string
	// Mode carries the type (fs.ModeDir, fs.ModeSymlink or none for a regular file),
	// the permission bits and fs.ModeSticky.
	Mode     fs.FileMode
	UID, GID int
	// Data is a regular file's content.
	Data []byte
	// Link is a symbolic link's target.
	Link string
}

// Tree is a root filesystem in memory: what one image layer holds. Every file has the
// tree's modification time, so the same content always gives the same tar bytes.
type Tree struct {
	mtime   time.Time
	entries map[string]*Entry
}

// NewTree returns an empty tree whose files all carry mtime.
func NewTree(mtime time.Time) *Tree {
	return &Tree{mtime: mtime.UTC(), entries: map[string]*Entry{}}
}

func cleanPath(p string) (string, error) {
	if !strings.HasPrefix(p, "/") {
		return "", fmt.Errorf("%q is not an absolute path", p)
	}
	c := path.Clean(p)
	if c == "/" {
		return "", errors.New("the root itself is not an entry")
	}
	return c, nil
}

// add records e, first creating its missing parents as root-owned 0755 directories.
// A path already present is replaced, except that a directory stays a directory.
func (t *Tree) add(e Entry) error {
	p, err := cleanPath(e.Path)
	if err != nil {
		return err
	}
	e.Path = p
	for dir := path.Dir(p); dir != "/"; dir = path.Dir(dir) {
		if old, ok := t.entries[dir]; ok {
			if !old.Mode.IsDir() {
				return fmt.Errorf("%s: parent %s is not a directory", p, dir)
			}
			continue
		}
		t.entries[dir] = &Entry{Path: dir, Mode: fs.ModeDir | 0o755}
	}
	if old, ok := t.entries[p]; ok && old.Mode.IsDir() != e.Mode.IsDir() {
		return fmt.Errorf("%s: already in the tree as another kind of file", p)
	}
	t.entries[p] = &e
	return nil
}

// Dir adds a directory.
func (t *Tree) Dir(p string, perm fs.FileMode, uid, gid int) error {
	return t.add(Entry{Path: p, Mode: fs.ModeDir | perm, UID: uid, GID: gid})
}

// File adds a root-owned regular file.
func (t *Tree) File(p string, perm fs.FileMode, data []byte) error {
	return t.add(Entry{Path: p, Mode: perm.Perm(), Data: data})
}

// HostFile adds the content of src on this machine (symbolic links followed) as a
// root-owned regular file at p.
func (t *Tree) HostFile(p, src string, perm fs.FileMode) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return t.File(p, perm, data)
}

// Symlink adds a symbolic link at p pointing to target.
func (t *Tree) Symlink(p, target string) error {
	return t.add(Entry{Path: p, Mode: fs.ModeSymlink | 0o777, Link: target})
}

// Get returns the entry at p, or nil.
func (t *Tree) Get(p string) *Entry {
	return t.entries[path.Clean(p)]
}

// Paths lists every entry, parents before their children.
func (t *Tree) Paths() []string {
	out := make([]string, 0, len(t.entries))
	for p := range t.entries {
		out = append(out, p)
	}
	// A parent is a prefix of its children, so it sorts before them.
	slices.Sort(out)
	return out
}

// Size is the total size of the regular files.
func (t *Tree) Size() int64 {
	var n int64
	for _, e := range t.entries {
		n += int64(len(e.Data))
	}
	return n
}

// tarMode is the mode field of a tar header: permission bits plus the setuid, setgid
// and sticky bits in their Unix places.
func tarMode(m fs.FileMode) int64 {
	out := int64(m.Perm())
	if m&fs.ModeSetuid != 0 {
		out |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		out |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		out |= 0o1000
	}
	return out
}

// WriteTar writes the tree as an image layer: paths relative to the root, sorted, every
// time the tree's, no user or group names, so the bytes depend only on the content.
func (t *Tree) WriteTar(w io.Writer) error {
	tw := tar.NewWriter(w)
	for _, p := range t.Paths() {
		e := t.entries[p]
		h := &tar.Header{
			Name:    strings.TrimPrefix(p, "/"),
			Mode:    tarMode(e.Mode),
			Uid:     e.UID,
			Gid:     e.GID,
			ModTime: t.mtime,
			Format:  tar.FormatPAX,
		}
		switch {
		case e.Mode.IsDir():
			h.Typeflag = tar.TypeDir
			h.Name += "/"
		case e.Mode&fs.ModeSymlink != 0:
			h.Typeflag = tar.TypeSymlink
			h.Linkname = e.Link
		default:
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(e.Data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return fmt.Errorf("tar %s: %w", p, err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(e.Data); err != nil {
				return fmt.Errorf("tar %s: %w", p, err)
			}
		}
	}
	return tw.Close()
}

// WriteDir writes the tree under dir, which may already hold other trees (a later
// layer over an earlier one). Owners are set when running as root.
func (t *Tree) WriteDir(dir string) error {
	root := os.Geteuid() == 0
	for _, p := range t.Paths() {
		e := t.entries[p]
		dst := filepath.Join(dir, filepath.FromSlash(p))
		switch {
		case e.Mode.IsDir():
			if err := os.MkdirAll(dst, 0o755); err != nil {
				return err
			}
		case e.Mode&fs.ModeSymlink != 0:
			if err := os.Remove(dst); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			if err := os.Symlink(e.Link, dst); err != nil {
				return err
			}
		default:
			if err := os.Remove(dst); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			if err := os.WriteFile(dst, e.Data, 0o600); err != nil {
				return err
			}
		}
		if root {
			if err := os.Lchown(dst, e.UID, e.GID); err != nil {
				return err
			}
		}
		if e.Mode&fs.ModeSymlink == 0 {
			// After chown, which clears setuid and setgid bits.
			if err := os.Chmod(dst, e.Mode&(fs.ModePerm|fs.ModeSticky|fs.ModeSetuid|fs.ModeSetgid)); err != nil {
				return err
			}
		}
	}
	// Times last: writing a child changes its directory's.
	for _, p := range t.Paths() {
		if t.entries[p].Mode&fs.ModeSymlink != 0 {
			continue
		}
		if err := os.Chtimes(filepath.Join(dir, filepath.FromSlash(p)), t.mtime, t.mtime); err != nil {
			return err
		}
	}
	return nil
}

// TreeFromDir reads the directory dir into a tree: regular files, directories and
// symbolic links, with their permission bits, all owned by root. Hard links become
// copies; devices, sockets and pipes are refused.
func TreeFromDir(dir string, mtime time.Time) (*Tree, error) {
	t := NewTree(mtime)
	err := filepath.WalkDir(dir, func(src string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, src)
		if err != nil {
			return err
		}
		if rel == "." {
			return nil
		}
		p := "/" + filepath.ToSlash(rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		mode := info.Mode()
		switch {
		case mode.IsDir():
			return t.Dir(p, mode&(fs.ModePerm|fs.ModeSticky|fs.ModeSetgid), 0, 0)
		case mode&fs.ModeSymlink != 0:
			target, err := os.Readlink(src)
			if err != nil {
				return err
			}
			return t.Symlink(p, target)
		case mode.IsRegular():
			data, err := os.ReadFile(src)
			if err != nil {
				return err
			}
			return t.add(Entry{Path: p, Mode: mode & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky), Data: data})
		default:
			return fmt.Errorf("%s: a %s cannot go into the image", src, mode.Type())
		}
	})
	if err != nil {
		return nil, err
	}
	return t, nil
}
