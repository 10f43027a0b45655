package app

import (
	"bytes"

	"github.com/hashicorp/go-hclog"
	"k8s.io/klog/v2"
)

// pluginLogger is the logger of the agent host: go-plugin's lines, and what the agents
// write on stderr, go through klog, so that they share the controller's format
// (--logging-format) instead of interleaving text into a JSON log.
func pluginLogger() hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: "agents", Level: hclog.Info, Output: klogLines{},
		DisableTime: true, Color: hclog.ColorOff})
}

// klogLines writes each line it is given as one klog entry.
type klogLines struct{}

func (klogLines) Write(p []byte) (int, error) {
	for _, line := range bytes.Split(bytes.TrimRight(p, "\n"), []byte("\n")) {
		if line = bytes.TrimSpace(line); len(line) > 0 {
			klog.InfoS(string(line), "source", "agent-host")
		}
	}
	return len(p), nil
}
