package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/yannh/kubeconform/pkg/validator"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
)

// rendered is a rendering's objects and its hooks, which rel.Manifest (and so Render and
// deploy/manifests) leaves out: Helm runs them apart, around install, upgrade or delete.
type rendered struct{ objects, hooks manifest }

// renderWithHooks renders as RenderAs does and also decodes the hooks; edit, if set,
// changes the loaded chart first (its default values, as --reuse-values replaces them).
func renderWithHooks(t *testing.T, values map[string]any, release, namespace string, edit func(*chart.Chart)) rendered {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(ch)
	}
	kv, err := chartutil.ParseKubeVersion(KubeVersion)
	if err != nil {
		t.Fatal(err)
	}
	install := action.NewInstall(&action.Configuration{})
	install.DryRun, install.ClientOnly, install.IncludeCRDs, install.Replace = true, true, true, true
	install.ReleaseName, install.Namespace, install.KubeVersion = release, namespace, kv
	rel, err := install.Run(ch, values)
	if err != nil {
		t.Fatal(err)
	}
	r := rendered{objects: parseManifest(t, []byte(rel.Manifest))}
	for _, h := range rel.Hooks {
		r.hooks = append(r.hooks, parseManifest(t, []byte(h.Manifest))...)
	}
	return r
}

// uninstallCheck is the pre-delete hook Job, or nil.
func (r rendered) uninstallCheck() map[string]any {
	for _, h := range r.hooks.ofKind("Job") {
		if str(h, "metadata", "annotations", "helm.sh/hook") == "pre-delete" {
			return h
		}
	}
	return nil
}

// TestRenderUninstallCheck installs the chart under several names and namespaces: by
// default helm uninstall first runs the check, a pre-delete Job, from the release's image,
// as the controller's ServiceAccount, which is rendered and may read what the check lists;
// hardened as the controller's pod is, placed where it is, run once, and valid.
func TestRenderUninstallCheck(t *testing.T) {
	v := newValidator(t)
	for name, in := range installs() {
		t.Run(name, func(t *testing.T) {
			values := chartutil.CoalesceTables(map[string]any{
				"imagePullSecrets": []any{map[string]any{"name": "regcred"}},
				"controller": map[string]any{"nodeSelector": map[string]any{"node-role.kubernetes.io/control-plane": ""},
					"tolerations": []any{map[string]any{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}}},
				"networkFenceAgents": []any{map[string]any{"name": "ceph-rbd", "driver": "rbd.csi.ceph.com"}},
			}, deepCopy(in.values))
			r := renderWithHooks(t, values, in.release, in.namespace, nil)
			job := r.uninstallCheck()
			if job == nil {
				t.Fatal("no pre-delete Job rendered by default")
			}
			checkUninstallJob(t, r, job, in.namespace)
			if res := validateOne(t, v, job); res.Status != validator.Valid {
				t.Errorf("the Job is not valid: %s", describeResult(res))
			}
		})
	}
}

func checkUninstallJob(t *testing.T, r rendered, job map[string]any, ns string) {
	t.Helper()
	ann := obj(job, "metadata", "annotations")
	if ann["helm.sh/hook-delete-policy"] != "before-hook-creation,hook-succeeded" || ann["helm.sh/hook-weight"] == nil {
		t.Errorf("hook annotations %v: want a weight, and a failed Job kept for its log", ann)
	}
	if ann["helm.sh/hook-output-log-policy"] != "hook-succeeded,hook-failed" {
		t.Errorf("hook annotations %v: want helm to print the report either way", ann)
	}
	if n := str(job, "metadata", "name"); len(n) > 63 || !strings.HasSuffix(n, "-uninstall-check") || str(job, "metadata", "namespace") != ns {
		t.Errorf("Job %s/%s: want <fullname>-uninstall-check, at most 63 characters (its pods' job-name label), in %s", str(job, "metadata", "namespace"), n, ns)
	}
	spec := obj(job, "spec")
	if spec["backoffLimit"] != 0.0 || spec["activeDeadlineSeconds"] == nil {
		t.Errorf("Job spec: backoffLimit %v, activeDeadlineSeconds %v: want 0 and a deadline", spec["backoffLimit"], spec["activeDeadlineSeconds"])
	}
	deploy := r.objects.ofKind("Deployment")[0]
	pod, ctlPod := obj(job, "spec", "template", "spec"), obj(deploy, "spec", "template", "spec")
	sa := str(pod, "serviceAccountName")
	if sa != str(ctlPod, "serviceAccountName") || r.objects.find("ServiceAccount", ns, sa) == nil {
		t.Errorf("the Job runs as ServiceAccount %q: want the controller's, rendered in %s", sa, ns)
	}
	for _, a := range []access{{group: "fencing.kubefence.io", resource: "nodefences"}, {resource: "nodes"}, {group: "csiaddons.openshift.io", resource: "networkfences"}} {
		r.objects.requireAllowed(t, "the uninstall check", ns, sa, a, "list")
	}
	for _, k := range []string{"imagePullSecrets", "nodeSelector", "tolerations"} {
		if jsonOf(t, pod[k]) != jsonOf(t, ctlPod[k]) {
			t.Errorf("the Job's %s %s, the controller's %s", k, jsonOf(t, pod[k]), jsonOf(t, ctlPod[k]))
		}
	}
	sc, ctlSC := obj(pod, "securityContext"), obj(ctlPod, "securityContext")
	for _, k := range []string{"runAsNonRoot", "runAsUser", "runAsGroup", "seccompProfile"} {
		if jsonOf(t, sc[k]) != jsonOf(t, ctlSC[k]) {
			t.Errorf("the Job's pod securityContext %s is %s, the controller's %s", k, jsonOf(t, sc[k]), jsonOf(t, ctlSC[k]))
		}
	}
	c, ctl := list(pod, "containers")[0], list(ctlPod, "containers")[0]
	if str(c, "image") != str(ctl, "image") || jsonOf(t, at(c, "securityContext")) != jsonOf(t, at(ctl, "securityContext")) {
		t.Errorf("the Job's container runs %s with %s; the controller %s with %s",
			str(c, "image"), jsonOf(t, at(c, "securityContext")), str(ctl, "image"), jsonOf(t, at(ctl, "securityContext")))
	}
	if got := append(strs(c, "command"), strs(c, "args")...); !slices.Equal(got, []string{"/usr/local/bin/fence-controller", "uninstall-check"}) {
		t.Errorf("the Job runs %q, want fence-controller uninstall-check", got)
	}
}

// TestRenderUninstallCheckValues: uninstall.check=false renders no hook, and no other
// either; uninstall.force=true passes --force; a release upgraded with --reuse-values
// from a chart without these values (whose defaults it renders with) keeps the check.
func TestRenderUninstallCheckValues(t *testing.T) {
	off := renderWithHooks(t, valuesFile(t, "uninstall: {check: false}"), Release, Namespace, nil)
	if len(off.hooks) != 0 {
		t.Errorf("uninstall.check=false: %d hooks rendered, want none", len(off.hooks))
	}
	forced := renderWithHooks(t, valuesFile(t, "uninstall: {force: true}"), Release, Namespace, nil).uninstallCheck()
	if args := strs(list(forced, "spec", "template", "spec", "containers")[0], "args"); !slices.Equal(args, []string{"uninstall-check", "--force"}) {
		t.Errorf("uninstall.force=true: args %q, want uninstall-check --force", args)
	}
	old := renderWithHooks(t, nil, Release, Namespace, func(ch *chart.Chart) { delete(ch.Values, "uninstall") }).uninstallCheck()
	if old == nil {
		t.Fatal("chart values without uninstall: no pre-delete Job")
	}
	if args := strs(list(old, "spec", "template", "spec", "containers")[0], "args"); !slices.Equal(args, []string{"uninstall-check"}) {
		t.Errorf("chart values without uninstall: args %q, want uninstall-check", args)
	}
}

// TestUninstallCheckSchema: the schema takes both booleans, and refuses a string for one
// or a key it does not know, naming the path.
func TestUninstallCheckSchema(t *testing.T) {
	for _, ok := range []string{"uninstall: {check: false, force: true}", "uninstall: {check: true, force: false}"} {
		if _, err := Render(chartDir, valuesFile(t, ok)); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for values, want := range map[string][]string{
		"uninstall: {check: \"no\"}": {"/uninstall/check", "want boolean"},
		"uninstall: {force: yes!}":   {"/uninstall/force", "want boolean"},
		"uninstall: {forced: true}":  {"/uninstall", "'forced' not allowed"},
	} {
		_, err := Render(chartDir, valuesFile(t, values))
		for _, w := range append(want, "schema") {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: err %v, want it to name %q", values, err, w)
			}
		}
	}
}
