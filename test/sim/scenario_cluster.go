package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/test/sim/bmc"
	"github.com/kubefence/kubefence/test/sim/tgt"
)

// startStorage starts tgtd with a disk per node, each bound to its node's initiator
// (storage: iscsi).
func (r *runner) startStorage(ctx context.Context) error {
	s, err := tgt.Start(ctx, tgt.Options{Dir: filepath.Join(r.o.Dir, "tgt")})
	if err != nil {
		return err
	}
	r.storage = &Storage{Server: s, TIDs: map[string]int{}, Initiators: map[string]string{}}
	for i := 1; i <= r.sc.Nodes; i++ {
		node := fmt.Sprintf("node-%d", i)
		iqn := "iqn.2024-01.io.kubefence.sim:" + node
		tid, err := s.AddTarget(ctx, "iqn.2024-01.io.kubefence.sim:disk-"+node, 1<<20)
		if err != nil {
			return err
		}
		if err := s.BindIQN(ctx, tid, iqn); err != nil {
			return err
		}
		r.storage.TIDs[node], r.storage.Initiators[node] = tid, iqn
	}
	return nil
}

// harnessOptions are the simulated cluster of the scenario: its nodes, zones, profile,
// BMCs and the controller's configuration.
func (r *runner) harnessOptions() HarnessOptions {
	zoneOf := map[string]string{}
	for zone, nodes := range r.sc.Zones {
		for _, n := range nodes {
			zoneOf[n] = zone
		}
	}
	return HarnessOptions{
		Dir: r.o.Dir, Nodes: r.sc.Nodes, BinDir: r.o.BinDir, Logf: r.o.Logf,
		Cluster: func(o *Options) {
			if r.sc.Profile == ProfileFast {
				o.LeaseRenewInterval, o.StatusUpdateInterval = time.Second, 2*time.Second
			}
			o.Restarted = func(name string, exit error) {
				r.logf("%s exited (%v); restarted, as the kubelet restarts a static pod", name, exit)
			}
			for i := range o.Nodes {
				n := &o.Nodes[i]
				if z := zoneOf[n.Name]; z != "" {
					n.Labels = map[string]string{ZoneLabel: z}
				}
				if r.storage != nil {
					n.Annotations[InitiatorKey] = r.storage.Initiators[n.Name]
				}
			}
		},
		BMC:    func(_ string, o *bmc.IPMIOptions) { o.OffDelay = r.sc.BMC.OffDelay.Duration },
		Config: func(c *v1alpha1.Config) { r.configErr = r.adjustConfig(c) },
	}
}

// adjustConfig applies the profile, installs the iSCSI agent and merges the scenario's
// overrides.
func (r *runner) adjustConfig(c *v1alpha1.Config) error {
	if r.sc.Profile == ProfileFast {
		c.Detection.LeaseStaleAfter = metav1.Duration{Duration: 5 * time.Second}
		c.Detection.NotReadyAfter = metav1.Duration{Duration: 5 * time.Second}
		c.LeaderElection.LeaseDuration = metav1.Duration{Duration: 4 * time.Second}
		c.LeaderElection.RenewDeadline = metav1.Duration{Duration: 3 * time.Second}
		c.LeaderElection.RetryPeriod = metav1.Duration{Duration: 500 * time.Millisecond}
	}
	// The slow BMC's delay is the device's stated delay: an off whose outcome is unknown
	// is read back that long before another goes out.
	if d := r.sc.BMC.OffDelay.Duration; d > 0 {
		for i := range c.Agents {
			c.Agents[i].OffDelay = metav1.Duration{Duration: d + time.Second}
		}
	}
	if r.storage != nil {
		sum, err := copyFile(filepath.Join(r.o.BinDir, "fence-agent-iscsi"), filepath.Join(c.PluginDir, iscsiAgent))
		if err != nil {
			return fmt.Errorf("install iscsi agent: %w", err)
		}
		c.Agents = append(c.Agents, v1alpha1.Agent{Name: iscsiAgent, SHA256: sum,
			Params: map[string]string{"backend": "tgt", "controlPort": fmt.Sprint(r.storage.Server.ControlPort())},
			Target: v1alpha1.TargetSource{Annotation: InitiatorKey}})
	}
	if a := r.sc.NodeAgents; a != nil {
		c.Watchdog.Isolation = metav1.Duration{Duration: a.Isolation.Duration}
		c.Watchdog.AllowEmulated = true // the simulation's watchdogs are emulated
	}
	if len(r.sc.Config) == 0 && len(r.sc.Policy) == 0 {
		return nil
	}
	var m map[string]any
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	m = mergeMaps(m, r.sc.Config)
	if pols, ok := m["policies"].([]any); ok {
		for i, p := range pols {
			if pm, ok := p.(map[string]any); ok {
				pols[i] = mergeMaps(pm, r.sc.Policy)
			}
		}
	}
	if b, err = json.Marshal(m); err != nil {
		return err
	}
	var out v1alpha1.Config
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&out); err != nil {
		return err
	}
	*c = out
	return nil
}

// mergeMaps merges over into base: objects merge key by key, anything else replaces.
func mergeMaps(base, over map[string]any) map[string]any {
	if base == nil {
		base = map[string]any{}
	}
	for k, v := range over {
		bm, ok1 := base[k].(map[string]any)
		om, ok2 := v.(map[string]any)
		if ok1 && ok2 {
			base[k] = mergeMaps(bm, om)
			continue
		}
		base[k] = v
	}
	return base
}
