package fencecall

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/fencer"
	"github.com/kubefence/kubefence/pkg/plugin"
	"github.com/kubefence/kubefence/pkg/plugin/plugintest"
)

// bmcs is a fleet of fake BMCs, each with a password of its own, that answer Status
// only to their own password.
type bmcs struct {
	mu        sync.Mutex
	passwords map[string]string // by target
	sent      []string          // the passwords sent, in order
}

func (b *bmcs) status(_ context.Context, req plugin.Request) (plugin.Result, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sent = append(b.sent, req.Secrets["password"])
	if req.Secrets["password"] != b.passwords[req.Target] {
		return plugin.Result{}, plugin.Errorf(plugin.KindPermanent, "RAKP 2 HMAC is invalid (check the BMC credentials)")
	}
	return plugin.Result{State: plugin.StateOn}, nil
}

func credentials(name, password string, labelled bool) *corev1.Secret {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "kubefence-system", Name: name},
		Data: map[string][]byte{"username": []byte("fence"), "password": []byte(password)}}
	if labelled {
		s.Labels = map[string]string{v1alpha1.CredentialsLabel: v1alpha1.CredentialsLabelValue}
	}
	return s
}

func secretNode(name string, annotations map[string]string) *corev1.Node {
	a := map[string]string{"bmc": "bmc-" + name}
	for k, v := range annotations {
		a[k] = v
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: a}}
}

// TestSecretPerNode: an agent's Secret is chosen per node, by a template or by an
// annotation, and read at each call: every BMC gets its own password, a rotated Secret
// is sent at the next call, and a Secret that is missing or lacks kubefence's label is
// refused, with the node and the Secret named and nothing sent to the BMC.
func TestSecretPerNode(t *testing.T) {
	for name, tc := range map[string]struct {
		ref     v1alpha1.SecretRef
		node    *corev1.Node
		secrets []*corev1.Secret
		wantErr string
	}{
		"template": {ref: v1alpha1.SecretRef{Template: "bmc-{{ .Name }}"}, node: secretNode("node-1", nil),
			secrets: []*corev1.Secret{credentials("bmc-node-1", "p1", true)}},
		"annotation": {ref: v1alpha1.SecretRef{Annotation: "bmc-secret"}, node: secretNode("node-1", map[string]string{"bmc-secret": "rack-7"}),
			secrets: []*corev1.Secret{credentials("rack-7", "p1", true)}},
		"one name, unlabelled": {ref: v1alpha1.SecretRef{Name: "shared"}, node: secretNode("node-1", nil),
			secrets: []*corev1.Secret{credentials("shared", "p1", false)}},
		"per node, unlabelled": {ref: v1alpha1.SecretRef{Template: "bmc-{{ .Name }}"}, node: secretNode("node-1", nil),
			secrets: []*corev1.Secret{credentials("bmc-node-1", "p1", false)},
			wantErr: "Permanent: agent ipmi: node node-1: secret kubefence-system/bmc-node-1 lacks the label fencing.kubefence.io/credentials=true"},
		"missing": {ref: v1alpha1.SecretRef{Template: "bmc-{{ .Name }}"}, node: secretNode("node-1", nil),
			wantErr: `Retryable: agent ipmi: node node-1: read secret kubefence-system/bmc-node-1: secrets "bmc-node-1" not found`},
		"no annotation": {ref: v1alpha1.SecretRef{Annotation: "bmc-secret"}, node: secretNode("node-1", nil),
			wantErr: "Permanent: agent ipmi: secretRef: node node-1 has no annotation bmc-secret to name its Secret"},
		"not a name": {ref: v1alpha1.SecretRef{Annotation: "bmc-secret"}, node: secretNode("node-1", map[string]string{"bmc-secret": "Rack_7"}),
			wantErr: `Permanent: agent ipmi: secretRef: node node-1 names Secret "Rack_7", which is not a Secret's name`},
	} {
		t.Run(name, func(t *testing.T) {
			fleet := &bmcs{passwords: map[string]string{"bmc-node-1": "p1"}}
			cfg := ipmiConfig()
			ref := tc.ref
			ref.Namespace = "kubefence-system"
			cfg.Agents[0].SecretRef = &ref
			client := fake.NewClientset()
			for _, s := range tc.secrets {
				if _, err := client.CoreV1().Secrets(s.Namespace).Create(context.Background(), s, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			c, err := New(plugintest.One{A: &plugintest.Funcs{StatusFunc: fleet.status}}, cfg, client, NewMetrics(nil, nil), time.Now, nil)
			if err != nil {
				t.Fatal(err)
			}
			ev := c.Call(context.Background(), fencer.Step{Kind: fencer.DoVerify, Level: 1, Agent: "ipmi", Try: 1}, tc.node, "", "i", 1, time.Now().Add(time.Minute))
			switch {
			case tc.wantErr == "" && ev.Err != nil:
				t.Fatalf("read: %v", ev.Err)
			case tc.wantErr != "" && (ev.Err == nil || !strings.HasPrefix(ev.Err.Error(), tc.wantErr)):
				t.Fatalf("error %v, want %q", ev.Err, tc.wantErr)
			case tc.wantErr != "" && len(fleet.sent) > 0:
				t.Fatalf("sent %d calls to the BMC with a refused Secret", len(fleet.sent))
			case tc.wantErr != "":
				return
			}
			// Rotated at the BMC and in the Secret: the next call sends the new one.
			fleet.passwords["bmc-node-1"] = "p2"
			rotated := tc.secrets[0].DeepCopy()
			rotated.Data["password"] = []byte("p2")
			if _, err := client.CoreV1().Secrets(rotated.Namespace).Update(context.Background(), rotated, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			ev = c.Call(context.Background(), fencer.Step{Kind: fencer.DoVerify, Level: 1, Agent: "ipmi", Try: 2}, tc.node, "", "i", 1, time.Now().Add(time.Minute))
			if ev.Err != nil || strings.Join(fleet.sent, ",") != "p1,p2" {
				t.Errorf("after the rotation: %v, passwords sent %v; want p1 then p2", ev.Err, fleet.sent)
			}
		})
	}
}

// TestCheckNamesRefusedSecret: `check` names the node and the Secret whose credentials a
// BMC refused, and the node whose Secret is missing; the passwords appear nowhere.
func TestCheckNamesRefusedSecret(t *testing.T) {
	fleet := &bmcs{passwords: map[string]string{"bmc-node-1": "right-1", "bmc-node-2": "right-2"}}
	cfg := ipmiConfig()
	cfg.Agents[0].SecretRef = &v1alpha1.SecretRef{Namespace: "kubefence-system", Template: "bmc-{{ .Name }}"}
	client := fake.NewClientset(credentials("bmc-node-1", "right-1", true), credentials("bmc-node-2", "stale-2", true))
	nodes := []*corev1.Node{secretNode("node-1", nil), secretNode("node-2", nil), secretNode("node-3", nil)}
	checks, err := CheckTargets(context.Background(), cfg, plugintest.One{A: &plugintest.Funcs{StatusFunc: fleet.status}}, client, nodes)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"node-1": "",
		"node-2": "node node-2, with the credentials of secret kubefence-system/bmc-node-2: Permanent: RAKP 2 HMAC is invalid",
		"node-3": `Retryable: agent ipmi: node node-3: read secret kubefence-system/bmc-node-3: secrets "bmc-node-3" not found`,
	}
	for _, tc := range checks {
		got := ""
		if tc.Err != nil {
			got = tc.Err.Error()
		}
		if !strings.HasPrefix(got, want[tc.Node]) || (got == "") != (want[tc.Node] == "") {
			t.Errorf("%s: %q, want %q", tc.Node, got, want[tc.Node])
		}
		for _, p := range []string{"right-1", "right-2", "stale-2"} {
			if strings.Contains(got, p) {
				t.Errorf("%s: the error shows a password: %q", tc.Node, got)
			}
		}
	}
	if len(checks) != 3 {
		t.Errorf("%d checks, want 3", len(checks))
	}
}
