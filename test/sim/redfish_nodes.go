package sim

import (
	"crypto/sha256"
	"fmt"
	"net"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/test/sim/bmc"
	"github.com/kubefence/kubefence/test/sim/redfish"
)

// Names of what the harness installs for nodes with Redfish BMCs.
const (
	RedfishAddressKey = "fencing.kubefence.io/redfish-address"
	BMCKindLabel      = "fencing.kubefence.io/bmc"
	redfishAgent      = "redfish"
	redfishSecret     = "redfish-credentials"
)

// startRedfish gives node a Redfish BMC (one server, system "1", TLS from ca) and returns
// the node's spec.
func (h *Harness) startRedfish(name string, ca *redfish.CA) (NodeSpec, error) {
	sum := sha256.Sum256([]byte("redfish system of " + name))
	uuid := fmt.Sprintf("%x-%x-%x-%x-%x", sum[0:4], sum[4:6], sum[6:8], sum[8:10], sum[10:16])
	srv, err := redfish.Start(redfish.Options{CA: ca, Systems: []redfish.SystemOptions{{ID: "1", PoweredOn: true, UUID: uuid}}})
	if err != nil {
		return NodeSpec{}, fmt.Errorf("start Redfish BMC of %s: %w", name, err)
	}
	h.Redfish[name] = srv
	return NodeSpec{Name: name, Power: srv.Power("1"), SystemUUID: strings.ToUpper(uuid),
		Labels:      map[string]string{BMCKindLabel: "redfish"},
		Annotations: map[string]string{RedfishAddressKey: net.JoinHostPort(srv.Host(), strconv.Itoa(srv.Port()))},
	}, nil
}

// RedfishEvents returns a Redfish node's power events in the BMC log's form, for the checker.
func (h *Harness) RedfishEvents(node string) ([]bmc.PowerEvent, error) {
	ev, err := h.Redfish[node].Events("1")
	if err != nil {
		return nil, err
	}
	out := make([]bmc.PowerEvent, 0, len(ev))
	for _, e := range ev {
		out = append(out, bmc.PowerEvent{Time: e.Time, Action: e.Action, Source: e.Source})
	}
	return out, nil
}

// redfishConfig adds the Redfish agent (the same BMC agent binary, protocol redfish, the
// sim's CA as its trust bundle) and a policy for nodes labelled with a Redfish BMC, ahead
// of the default policy.
func (h *Harness) redfishConfig(cfg *v1alpha1.Config, ca *redfish.CA, sum string) {
	cfg.Agents = append(cfg.Agents, v1alpha1.Agent{
		Name: redfishAgent, Binary: ipmiAgent, SHA256: sum,
		Params:    map[string]string{"protocol": "redfish", "caBundle": string(ca.PEM())},
		SecretRef: &v1alpha1.SecretRef{Namespace: ControllerNamespace, Name: redfishSecret},
		Target:    v1alpha1.TargetSource{Annotation: RedfishAddressKey},
	})
	pol := v1alpha1.Policy{Name: "redfish", NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{BMCKindLabel: "redfish"}},
		Levels: []v1alpha1.Level{{Agents: []string{redfishAgent}}}}
	cfg.Policies = append([]v1alpha1.Policy{pol}, cfg.Policies...)
}

func (h *Harness) redfishSecret() *corev1.Secret {
	for _, s := range h.Redfish {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ControllerNamespace, Name: redfishSecret},
			StringData: map[string]string{"username": s.User(), "password": s.Password()}}
	}
	return nil
}
