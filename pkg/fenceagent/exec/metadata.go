package exec

import (
	"bytes"
	"context"
	"encoding/xml"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/kubefence/kubefence/pkg/plugin"
)

// metadataLimit bounds the metadata a script may print; fence_ipmilan's is 11 KB.
const metadataLimit = 1 << 20

// metadataTimeout bounds the metadata call: fence_ipmilan answers in about 0.3 s.
const metadataTimeout = 5 * time.Second

// agentMetadata is the part of a FenceAgentAPI agent's action=metadata answer that says
// which stdin keys it reads.
type agentMetadata struct {
	XMLName    xml.Name `xml:"resource-agent"`
	Name       string   `xml:"name,attr"`
	Parameters []struct {
		Name string `xml:"name,attr"`
	} `xml:"parameters>parameter"`
}

// scriptKeys asks the script for its metadata (action=metadata, as Pacemaker does when
// a fence device is defined) and returns the stdin keys it accepts. ok is false for a
// script that gives no usable metadata: its keys cannot be checked before it runs.
//
// The script gets action=metadata alone on stdin: no target, no parameters, no
// credentials, so that not even a script that ignores the action can reach a device.
func scriptKeys(ctx context.Context, script string) (name string, keys map[string]bool, ok bool) {
	ctx, cancel := context.WithTimeout(ctx, metadataTimeout)
	defer cancel()
	o, err := runKeeping(ctx, params{script: script}, "metadata", "", metadataLimit)
	if err != nil || o.code != 0 {
		return "", nil, false
	}
	// Agents may print warnings (Python's DeprecationWarning) around the document.
	out := o.output
	if i := strings.Index(out, "<resource-agent"); i >= 0 {
		out = out[i:]
	}
	var md agentMetadata
	if err := xml.NewDecoder(bytes.NewReader([]byte(out))).Decode(&md); err != nil || len(md.Parameters) == 0 {
		return "", nil, false
	}
	keys = map[string]bool{}
	for _, p := range md.Parameters {
		keys[p.Name] = true
	}
	return md.Name, keys, true
}

// checkKeys refuses the params and the target key that the script's metadata does not
// list, naming each.
func checkKeys(ctx context.Context, p params) error {
	if !p.checkMetadata {
		return nil
	}
	name, keys, ok := scriptKeys(ctx, p.script)
	if !ok {
		return nil
	}
	known := strings.Join(slices.Sorted(maps.Keys(keys)), ", ")
	var problems []plugin.ParamError
	for _, k := range slices.Sorted(maps.Keys(p.forward)) {
		if !keys[k] {
			problems = append(problems, plugin.ParamError{Name: k, Detail: fmt.Sprintf("not among the parameters %s's metadata lists (%s)", name, known)})
		}
	}
	if p.targetKey != "" && !keys[p.targetKey] {
		problems = append(problems, plugin.ParamError{Name: ParamTargetKey,
			Detail: fmt.Sprintf("%q is not among the parameters %s's metadata lists (%s)", p.targetKey, name, known)})
	}
	if len(problems) == 0 {
		return nil
	}
	return plugin.InvalidParams(problems)
}
