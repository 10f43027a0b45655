package sim

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// processDead reports whether pid is gone or a zombie (its code runs no more).
func processDead(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return len(f) == 0 || f[0] == "Z" || f[0] == "X"
}

// liveProcesses lists, as "pid: argv", the live processes whose argv match accepts.
func liveProcesses(match func(argv []string) bool) []string {
	entries, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || processDead(pid) {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(cmdline) == 0 {
			continue
		}
		argv := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
		if match(argv) {
			out = append(out, fmt.Sprintf("%d: %s", pid, strings.Join(argv, " ")))
		}
	}
	return out
}
