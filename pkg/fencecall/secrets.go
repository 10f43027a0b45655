package fencecall

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/plugin"
)

// secretOf names the Secret, as namespace/name, that agent cfg's secretRef chooses for
// node; "" for an agent without one.
func (a *Caller) secretOf(cfg v1alpha1.Agent, node *corev1.Node) (string, error) {
	ref := cfg.SecretRef
	if ref == nil {
		return "", nil
	}
	name, err := ref.SecretNameOn(a.secretTemplates[cfg.Name], node)
	if err != nil {
		return "", plugin.Errorf(plugin.KindPermanent, "agent %s: secretRef: %v", cfg.Name, err)
	}
	return ref.Namespace + "/" + name, nil
}

// secretsFor reads, at every call, the Secret agent cfg's secretRef chooses for node and
// returns its keys as the request's secrets: a rotated Secret is used from the next
// call on. A Secret chosen per node is refused unless it carries kubefence's
// credentials label. Errors name the node and the Secret, never its content.
func (a *Caller) secretsFor(ctx context.Context, cfg v1alpha1.Agent, node *corev1.Node) (map[string]string, error) {
	ref := cfg.SecretRef
	if ref == nil {
		return nil, nil
	}
	id, err := a.secretOf(cfg, node)
	if err != nil {
		return nil, err
	}
	name := id[len(ref.Namespace)+1:]
	sec, err := a.client.CoreV1().Secrets(ref.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, plugin.Errorf(plugin.KindRetryable, "agent %s: node %s: read secret %s: %v", cfg.Name, node.Name, id, err)
	}
	if ref.PerNode() && sec.Labels[v1alpha1.CredentialsLabel] != v1alpha1.CredentialsLabelValue {
		return nil, plugin.Errorf(plugin.KindPermanent, "agent %s: node %s: secret %s lacks the label %s=%s, without which no Secret chosen per node is sent to a target",
			cfg.Name, node.Name, id, v1alpha1.CredentialsLabel, v1alpha1.CredentialsLabelValue)
	}
	secrets := make(map[string]string, len(sec.Data))
	for k, v := range sec.Data {
		secrets[k] = string(v)
	}
	return secrets, nil
}

// credentialsRefused names the Secret whose credentials a device refused: a permanent
// error from a call that carried a Secret's keys. Other errors are returned as they are.
func credentialsRefused(err error, node *corev1.Node, secret string) error {
	if err == nil || secret == "" || plugin.KindOf(err) != plugin.KindPermanent {
		return err
	}
	return fmt.Errorf("node %s, with the credentials of secret %s: %w", node.Name, secret, err)
}
