package iscsi

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// LIO drives the Linux kernel target through its configfs tree:
//
//	<Root>/iscsi/<target-iqn>/tpgt_<N>/acls/<initiator-iqn>/          a node ACL
//	<Root>/iscsi/<target-iqn>/tpgt_<N>/acls/<initiator-iqn>/lun_<M>/  a mapped LUN, holding a
//	                                                                   symlink to ../../../lun/lun_<K>
//	<Root>/iscsi/<target-iqn>/tpgt_<N>/acls/<initiator-iqn>/info      the session indicator
//	<Root>/iscsi/<target-iqn>/tpgt_<N>/attrib/generate_node_acls      1: demo mode, admits all
//	<Root>/iscsi/<target-iqn>/tpgt_<N>/lun/lun_<K>/                   the TPG's LUNs
//
// Sessions are read from the ACL's info file as the kernel writes it ("LIO Session ID: S",
// "CID: C", "Address A"; "No active iSCSI Session" when there is none). The kernel ends
// the sessions of a node ACL when the ACL is removed, and configfs has no other way to
// end one, so CloseConnection only confirms that the ACL is gone. A test builds the same
// tree in a plain directory, where removing an ACL also removes its info file.
type LIO struct {
	// Root is the target configfs directory, /sys/kernel/config/target on a real host.
	Root string
}

var _ Backend = (*LIO)(nil)

// Targets reads every TPG of every iSCSI target under Root.
func (b *LIO) Targets(ctx context.Context) ([]Target, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("lio configfs root %s: %w", b.Root, err)
	}
	if _, err := os.Stat(b.Root); err != nil {
		return nil, fmt.Errorf("lio configfs root %s (is configfs mounted and target_core_mod loaded?): %w: %v", b.Root, ErrUnreachable, err)
	}
	iscsiDir := filepath.Join(b.Root, "iscsi")
	names, err := subdirs(iscsiDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil // iscsi_target_mod holds no targets
	}
	if err != nil {
		return nil, fmt.Errorf("lio: %w", err)
	}
	var out []Target
	for _, name := range names {
		if checkName(name) != nil {
			continue // discovery_auth and other non-target entries
		}
		tpgs, err := subdirs(filepath.Join(iscsiDir, name))
		if err != nil {
			return nil, fmt.Errorf("lio target %s: %w", name, err)
		}
		for _, tpg := range tpgs {
			tag, err := strconv.Atoi(strings.TrimPrefix(tpg, "tpgt_"))
			if !strings.HasPrefix(tpg, "tpgt_") || err != nil {
				continue
			}
			t, err := b.readTPG(name, tag, tpg)
			if err != nil {
				return nil, err
			}
			out = append(out, t)
		}
	}
	return out, nil
}

func (b *LIO) readTPG(name string, tag int, tpg string) (Target, error) {
	t := Target{Name: name, TPG: tag, ID: tpg}
	dir := b.tpgDir(t)
	if v, err := os.ReadFile(filepath.Join(dir, "attrib", "generate_node_acls")); err == nil && strings.TrimSpace(string(v)) == "1" {
		t.OpenReason = "it is in demo mode (attrib/generate_node_acls=1) and admits every initiator"
	}
	acls, err := subdirs(filepath.Join(dir, "acls"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return Target{}, fmt.Errorf("lio target %s %s: %w", name, tpg, err)
	}
	for _, iqn := range acls {
		aclDir := filepath.Join(dir, "acls", iqn)
		luns, err := readLUNMaps(aclDir)
		if err != nil {
			return Target{}, fmt.Errorf("lio target %s %s acl %s: %w", name, tpg, iqn, err)
		}
		t.Rules = append(t.Rules, Rule{Kind: RuleIQN, Value: iqn, LUNs: luns})
		info, err := os.ReadFile(filepath.Join(aclDir, "info"))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return Target{}, fmt.Errorf("lio target %s %s acl %s: %w", name, tpg, iqn, err)
		}
		t.Connections = append(t.Connections, parseLIOInfo(iqn, string(info))...)
	}
	return t, nil
}

// readLUNMaps lists an ACL's mapped LUNs as "M-K" from lun_M/<link> -> .../lun/lun_K.
func readLUNMaps(aclDir string) ([]string, error) {
	dirs, err := subdirs(aclDir)
	if err != nil {
		return nil, err
	}
	maps := []string{}
	for _, d := range dirs {
		m, err := strconv.Atoi(strings.TrimPrefix(d, "lun_"))
		if !strings.HasPrefix(d, "lun_") || err != nil {
			continue
		}
		entries, err := os.ReadDir(filepath.Join(aclDir, d))
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			if e.Type()&fs.ModeSymlink == 0 {
				continue
			}
			dest, err := os.Readlink(filepath.Join(aclDir, d, e.Name()))
			if err != nil {
				return nil, err
			}
			if k, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(dest), "lun_")); err == nil {
				maps = append(maps, fmt.Sprintf("%d-%d", m, k))
			}
		}
	}
	return maps, nil
}

// parseLIOInfo reads the connections of a node ACL's info attribute.
func parseLIOInfo(iqn, info string) []Connection {
	var out []Connection
	sess := ""
	for _, line := range strings.Split(info, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 4 && f[0] == "LIO" && f[1] == "Session" && f[2] == "ID:":
			sess = f[3]
		case len(f) >= 2 && f[0] == "CID:" && sess != "":
			out = append(out, Connection{Session: sess, ID: f[1], Initiator: iqn})
		case len(f) >= 2 && f[0] == "Address" && len(out) > 0:
			out[len(out)-1].Address = f[1]
		}
	}
	if sess != "" && len(out) == 0 {
		out = append(out, Connection{Session: sess, ID: "0", Initiator: iqn})
	}
	return out
}

// Bind creates the node ACL and its LUN mappings. Rule.LUNs nil maps every LUN of the
// TPG under its own number, as targetcli's auto_add_mapped_luns does; an empty non-nil
// list maps none.
func (b *LIO) Bind(ctx context.Context, t Target, r Rule) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("lio target %s: %w", t.label(), err)
	}
	if r.Kind != RuleIQN {
		return fmt.Errorf("lio target %s: %w: lio has no %s rules", t.label(), ErrBackendBroken, r.Kind)
	}
	aclDir := filepath.Join(b.tpgDir(t), "acls", r.Value)
	if err := os.Mkdir(aclDir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("lio target %s: create acl %s: %w", t.label(), r.Value, err)
	}
	maps := r.LUNs
	if maps == nil {
		luns, err := subdirs(filepath.Join(b.tpgDir(t), "lun"))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("lio target %s: list luns: %w", t.label(), err)
		}
		for _, l := range luns {
			if k, err := strconv.Atoi(strings.TrimPrefix(l, "lun_")); err == nil {
				maps = append(maps, fmt.Sprintf("%d-%d", k, k))
			}
		}
	}
	for _, m := range maps {
		mapped, k, err := parseLUNMap(m)
		if err != nil {
			return fmt.Errorf("lio target %s acl %s: %w", t.label(), r.Value, err)
		}
		dest := filepath.Join(b.tpgDir(t), "lun", fmt.Sprintf("lun_%d", k))
		if _, err := os.Stat(dest); err != nil {
			return fmt.Errorf("lio target %s acl %s: tpg lun %d: %w", t.label(), r.Value, k, err)
		}
		lunDir := filepath.Join(aclDir, fmt.Sprintf("lun_%d", mapped))
		if err := os.Mkdir(lunDir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("lio target %s acl %s: map lun %d: %w", t.label(), r.Value, mapped, err)
		}
		link := filepath.Join(lunDir, fmt.Sprintf("lun_%d", k))
		if err := os.Symlink(dest, link); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("lio target %s acl %s: map lun %d: %w", t.label(), r.Value, mapped, err)
		}
	}
	return nil
}

// Unbind removes a node ACL the way configfs allows: links first, then the mapped LUN
// directories, then the ACL directory; the kernel ends the ACL's sessions with it.
func (b *LIO) Unbind(ctx context.Context, t Target, r Rule) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("lio target %s: %w", t.label(), err)
	}
	aclDir := filepath.Join(b.tpgDir(t), "acls", r.Value)
	if _, err := os.Lstat(aclDir); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("lio target %s acl %s: %w", t.label(), r.Value, ErrNotFound)
	}
	dirs, err := subdirs(aclDir)
	if err != nil {
		return fmt.Errorf("lio target %s acl %s: %w", t.label(), r.Value, err)
	}
	for _, d := range dirs {
		if err := removeGroup(filepath.Join(aclDir, d)); err != nil {
			return fmt.Errorf("lio target %s acl %s: %w", t.label(), r.Value, err)
		}
	}
	if err := removeGroup(aclDir); err != nil {
		return fmt.Errorf("lio target %s acl %s: %w", t.label(), r.Value, err)
	}
	return nil
}

// CloseConnection succeeds when the connection's node ACL is gone, which ended it.
func (b *LIO) CloseConnection(_ context.Context, t Target, c Connection) error {
	if _, err := os.Lstat(filepath.Join(b.tpgDir(t), "acls", c.Initiator)); err == nil {
		return fmt.Errorf("lio target %s: session %s of %s: ends only with its node acl, which is still there", t.label(), c.Session, c.Initiator)
	}
	return fmt.Errorf("lio target %s session %s: %w", t.label(), c.Session, ErrNotFound)
}

// removeGroup removes a configfs group directory: its symlinks, then the directory.
// configfs removes attribute files with the directory; a plain directory tree (a test's)
// needs them removed first, which is tried only when the directory is not empty.
func removeGroup(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.Type()&fs.ModeSymlink != 0 {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	if err := os.Remove(dir); err == nil || errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	for _, e := range entries {
		if e.Type().IsRegular() {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	return os.Remove(dir)
}

func (b *LIO) tpgDir(t Target) string {
	return filepath.Join(b.Root, "iscsi", t.Name, fmt.Sprintf("tpgt_%d", t.TPG))
}

func subdirs(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out, nil
}
