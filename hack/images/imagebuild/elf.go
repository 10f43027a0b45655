package imagebuild

import (
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"io/fs"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// Arch is one architecture the image is built for. Go, Debian and OCI name both of
// them alike.
type Arch struct {
	// Name is the Go, Debian and OCI name: amd64, arm64.
	Name string
	// Machine is what the ELF header of every binary of the image says.
	Machine elf.Machine
	// Triplet is Debian's multiarch directory under /lib and /usr/lib.
	Triplet string
}

// Arches are the architectures of a release, in the order of the image index.
var Arches = []Arch{
	{Name: "amd64", Machine: elf.EM_X86_64, Triplet: "x86_64-linux-gnu"},
	{Name: "arm64", Machine: elf.EM_AARCH64, Triplet: "aarch64-linux-gnu"},
}

// ArchNamed returns the architecture called name.
func ArchNamed(name string) (Arch, error) {
	for _, a := range Arches {
		if a.Name == name {
			return a, nil
		}
	}
	return Arch{}, fmt.Errorf("architecture %q: not one of amd64, arm64", name)
}

// libDirs is where the dynamic loader looks for a library by name, in its order, on a
// Debian system without /etc/ld.so.cache: the multiarch directories first.
func (a Arch) libDirs() []string {
	return []string{"/lib/" + a.Triplet, "/usr/lib/" + a.Triplet, "/lib", "/usr/lib"}
}

// IsELF says whether data starts like an ELF file.
func IsELF(data []byte) bool { return bytes.HasPrefix(data, []byte(elf.ELFMAG)) }

// CheckELF fails unless data is a 64-bit ELF file for a.
func (a Arch) CheckELF(name string, data []byte) (*elf.File, error) {
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if f.Machine != a.Machine || f.Class != elf.ELFCLASS64 {
		return nil, fmt.Errorf("%s is an ELF file for %s (%s), not %s", name, f.Machine, f.Class, a.Name)
	}
	return f, nil
}

// located is one file of a package.
type located struct {
	deb   *Deb
	entry *Entry
}

// libIndex finds files by path across the packages of one architecture.
type libIndex map[string]located

func newLibIndex(debs []*Deb) libIndex {
	idx := libIndex{}
	for _, d := range debs {
		for _, p := range d.Files.Paths() {
			if _, taken := idx[p]; !taken {
				idx[p] = located{deb: d, entry: d.Files.Get(p)}
			}
		}
	}
	return idx
}

// resolve follows p through its symbolic links and returns every hop, p first, the
// regular file last.
func (idx libIndex) resolve(p string) ([]located, error) {
	var hops []located
	for range 16 {
		l, ok := idx[p]
		if !ok {
			return nil, fmt.Errorf("%s: in no package", p)
		}
		hops = append(hops, l)
		if l.entry.Mode&fs.ModeSymlink == 0 {
			if !l.entry.Mode.IsRegular() {
				return nil, fmt.Errorf("%s: not a file", p)
			}
			return hops, nil
		}
		target := l.entry.Link
		if !strings.HasPrefix(target, "/") {
			target = path.Join(path.Dir(p), target)
		}
		p = path.Clean(target)
	}
	return nil, fmt.Errorf("%s: too many symbolic links", p)
}

// elfFile is an ELF file to read, by its path.
type elfFile struct {
	name string
	data []byte
}

// linkedFiles returns what the dynamic ELF binary bin (of arch a) loads, as package files:
// its interpreter and, transitively, every DT_NEEDED library, each with the symbolic
// links that lead to it, found where the loader looks in the packages of debs. It fails
// on a library no package holds, or one built for another machine.
func linkedFiles(a Arch, bin string, data []byte, debs []*Deb) ([]located, error) {
	idx := newLibIndex(debs)
	var out []located
	seen := map[string]bool{}
	add := func(hops []located) {
		for _, h := range hops {
			if !seen[h.entry.Path] {
				seen[h.entry.Path] = true
				out = append(out, h)
			}
		}
	}
	queue := []elfFile{{bin, data}}
	done := map[string]bool{}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		f, err := a.CheckELF(cur.name, cur.data)
		if err != nil {
			return nil, err
		}
		needed, err := f.DynString(elf.DT_NEEDED)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", cur.name, err)
		}
		if interp := interpreter(f); interp != "" {
			if _, ok := idx[interp]; !ok {
				return nil, fmt.Errorf("%s's interpreter %s: %w", cur.name, interp, &MissingLibError{Lib: interp, Arch: a.Name})
			}
			hops, err := idx.resolve(interp)
			if err != nil {
				return nil, fmt.Errorf("%s's interpreter: %w", cur.name, err)
			}
			add(hops)
			if last := hops[len(hops)-1].entry; !done[last.Path] {
				done[last.Path] = true
				queue = append(queue, elfFile{last.Path, last.Data})
			}
		}
		for _, lib := range needed {
			if done[lib] {
				continue
			}
			done[lib] = true
			hops, err := idx.find(a, lib)
			if err != nil {
				return nil, fmt.Errorf("%s needs %s: %w", cur.name, lib, err)
			}
			add(hops)
			last := hops[len(hops)-1].entry
			queue = append(queue, elfFile{last.Path, last.Data})
		}
	}
	slices.SortFunc(out, func(x, y located) int { return strings.Compare(x.entry.Path, y.entry.Path) })
	return out, nil
}

// find looks lib up in the loader's directories.
func (idx libIndex) find(a Arch, lib string) ([]located, error) {
	for _, dir := range a.libDirs() {
		if _, ok := idx[path.Join(dir, lib)]; ok {
			return idx.resolve(path.Join(dir, lib))
		}
	}
	return nil, &MissingLibError{Lib: lib, Arch: a.Name, Dirs: a.libDirs()}
}

// MissingLibError says that no package holds a library a binary needs.
type MissingLibError struct {
	Lib, Arch string
	Dirs      []string
}

func (e *MissingLibError) Error() string {
	where := ""
	if len(e.Dirs) > 0 {
		where = " in " + strings.Join(e.Dirs, ", ")
	}
	return fmt.Sprintf("no locked package of %s holds it%s (regenerate the lock: make debian-lock)", e.Arch, where)
}

// interpreter is the PT_INTERP path of f, or "" for a static binary.
func interpreter(f *elf.File) string {
	for _, p := range f.Progs {
		if p.Type != elf.PT_INTERP {
			continue
		}
		b := make([]byte, p.Filesz)
		if _, err := p.ReadAt(b, 0); err != nil {
			return ""
		}
		return strings.TrimRight(string(b), "\x00")
	}
	return ""
}

// Qemu is the user-mode emulator that runs an arm64 binary on another machine: Debian's
// qemu-user-static, which hack/deps.sh installs.
const Qemu = "qemu-aarch64-static"

// QemuHint says how to get Qemu.
const QemuHint = "apt-get install qemu-user-static (hack/deps.sh installs it)"

// QemuCommand runs args[0], a path inside the arm64 root filesystem root, under Qemu,
// with root as the prefix of every absolute path it opens (-L): its dynamic loader and
// libraries, and files such as /etc/hosts, are the image's and not this machine's.
func QemuCommand(ctx context.Context, root string, args ...string) (*exec.Cmd, error) {
	bin, err := exec.LookPath(Qemu)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", err, QemuHint)
	}
	qargs := append([]string{"-L", root, filepath.Join(root, args[0])}, args[1:]...)
	cmd := exec.CommandContext(ctx, bin, qargs...)
	cmd.Env = []string{"LC_ALL=C", PathEnv}
	return cmd, nil
}
