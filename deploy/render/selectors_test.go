package main

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// podTemplate is a workload's pods: their namespace, labels and container port names.
type podTemplate struct {
	namespace string
	labels    map[string]any
	ports     []string
}

func (m manifest) pods() []podTemplate {
	var out []podTemplate
	for _, w := range m.ofKind("Deployment", "DaemonSet") {
		p := podTemplate{namespace: str(w, "metadata", "namespace"), labels: obj(w, "spec", "template", "metadata", "labels")}
		for _, c := range list(w, "spec", "template", "spec", "containers") {
			for _, port := range list(c, "ports") {
				p.ports = append(p.ports, str(port, "name"))
			}
		}
		out = append(out, p)
	}
	return out
}

// selects says whether every label of selector is in labels.
func selects(selector, labels map[string]any) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return len(selector) > 0
}

// selected is whether some pod of namespace ns matches selector and serves port ("" for
// any).
func (m manifest) selected(ns string, selector map[string]any, port string) bool {
	for _, p := range m.pods() {
		if p.namespace == ns && selects(selector, p.labels) && (port == "" || slices.Contains(p.ports, port)) {
			return true
		}
	}
	return false
}

// checkSelectors: every Service, PodDisruptionBudget and PodMonitor selects rendered pods
// of its namespace (serving the port it names), every ServiceMonitor a rendered Service.
func checkSelectors(t *testing.T, m manifest) {
	t.Helper()
	for _, s := range m.ofKind("Service") {
		ns, sel := str(s, "metadata", "namespace"), obj(s, "spec", "selector")
		for _, p := range list(s, "spec", "ports") {
			if port, _ := at(p, "targetPort").(string); !m.selected(ns, sel, port) {
				t.Errorf("Service %s/%s: no rendered pod matches %v and serves port %q", ns, str(s, "metadata", "name"), sel, port)
			}
		}
	}
	for _, pdb := range m.ofKind("PodDisruptionBudget") {
		if ns, sel := str(pdb, "metadata", "namespace"), obj(pdb, "spec", "selector", "matchLabels"); !m.selected(ns, sel, "") {
			t.Errorf("PodDisruptionBudget %s/%s: no rendered pod matches %v", ns, str(pdb, "metadata", "name"), sel)
		}
	}
	for _, pm := range m.ofKind("PodMonitor") {
		sel := obj(pm, "spec", "selector", "matchLabels")
		for _, ns := range strs(pm, "spec", "namespaceSelector", "matchNames") {
			for _, e := range list(pm, "spec", "podMetricsEndpoints") {
				if !m.selected(ns, sel, str(e, "port")) {
					t.Errorf("PodMonitor %s: no rendered pod of %s matches %v and serves port %q", str(pm, "metadata", "name"), ns, sel, str(e, "port"))
				}
			}
		}
	}
	for _, sm := range m.ofKind("ServiceMonitor") {
		sel := obj(sm, "spec", "selector", "matchLabels")
		for _, ns := range strs(sm, "spec", "namespaceSelector", "matchNames") {
			for _, e := range list(sm, "spec", "endpoints") {
				if !m.serviceSelected(ns, sel, str(e, "port")) {
					t.Errorf("ServiceMonitor %s: no rendered Service of %s matches %v with port %q", str(sm, "metadata", "name"), ns, sel, str(e, "port"))
				}
			}
		}
	}
}

// serviceSelected is whether a Service of namespace ns has every label of selector and a
// port named port.
func (m manifest) serviceSelected(ns string, selector map[string]any, port string) bool {
	for _, s := range m.ofKind("Service") {
		if str(s, "metadata", "namespace") != ns || !selects(selector, obj(s, "metadata", "labels")) {
			continue
		}
		if slices.ContainsFunc(list(s, "spec", "ports"), func(p any) bool { return str(p, "name") == port }) {
			return true
		}
	}
	return false
}

// checkAlertTargets: the Deployments an alert's deployment=~"A|B" matcher names are
// rendered (kube-state-metrics reports them by name).
func checkAlertTargets(t *testing.T, m manifest) {
	t.Helper()
	matcher := regexp.MustCompile(`deployment=~"([^"]*)"`)
	deployments := map[string]bool{}
	for _, d := range m.ofKind("Deployment") {
		deployments[str(d, "metadata", "name")] = true
	}
	for _, r := range m.ofKind("PrometheusRule") {
		for _, g := range list(r, "spec", "groups") {
			for _, rule := range list(g, "rules") {
				for _, mt := range matcher.FindAllStringSubmatch(fmt.Sprint(at(rule, "expr")), -1) {
					for _, name := range strings.Split(mt[1], "|") {
						if !deployments[name] {
							t.Errorf("alert %s matches deployment %s, which is not rendered", str(rule, "alert"), name)
						}
					}
				}
			}
		}
	}
}
