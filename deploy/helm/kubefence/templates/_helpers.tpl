{{- define "kubefence.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "kubefence.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "kubefence.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
The names of the release's objects. Every name the chart renders and also tells a
container (a flag, the config file, an env), a binding, a Service, a policy or an alert
comes from one helper here, and every place that writes it includes that helper: a name
written out twice drifts, and a controller told one name while its Role allows another
never syncs its caches and never fences. deploy/render/names_test.go follows each name
to its object and its RBAC under several release names, namespaces and overrides.
*/}}

{{/* The controller's Deployment, its PodDisruptionBudget, ServiceMonitor and roles. */}}
{{- define "kubefence.controllerName" -}}
{{- printf "%s-controller" (include "kubefence.fullname" .) -}}
{{- end -}}

{{/* The ConfigMap of the controller's config file (kubefence.config). */}}
{{- define "kubefence.configMap" -}}
{{- printf "%s-config" (include "kubefence.fullname" .) -}}
{{- end -}}

{{/* The pause requests' ConfigMap: the controller's and validate's --pause-configmap,
the controller's Role and the on-call Role name it. */}}
{{- define "kubefence.pauseConfigMap" -}}
{{- printf "%s-pause" (include "kubefence.fullname" .) -}}
{{- end -}}

{{/*
The leader election Lease, in the release namespace: config.leaderElection.name when set,
else <fullname>-controller, so that two releases in one namespace elect apart. For the
release kubefence that is kubefence-controller, the name before it followed the release:
an upgrade of the default install keeps its Lease, and so its one leader.
*/}}
{{- define "kubefence.leaderLease" -}}
{{- $le := .Values.config.leaderElection | default dict -}}
{{- $le.name | default (printf "%s-controller" (include "kubefence.fullname" .)) -}}
{{- end -}}

{{/*
The pre-delete hook's Job (templates/pre-delete-check.yaml): its name is a label value of
its pods (job-name), so at most 63 characters.
*/}}
{{- define "kubefence.uninstallCheckName" -}}
{{- printf "%s-uninstall-check" (include "kubefence.fullname" . | trunc 47 | trimSuffix "-") -}}
{{- end -}}

{{/* The metrics Service, and the ClusterRole that may scrape it. */}}
{{- define "kubefence.metricsService" -}}
{{- printf "%s-metrics" (include "kubefence.fullname" .) -}}
{{- end -}}
{{- define "kubefence.metricsReaderRole" -}}
{{- printf "%s-metrics-reader" (include "kubefence.fullname" .) -}}
{{- end -}}

{{/* The node agents' DaemonSet, ServiceAccount, roles and report policy. */}}
{{- define "kubefence.nodeAgentName" -}}
{{- printf "%s-node-agent" (include "kubefence.fullname" .) -}}
{{- end -}}

{{/*
The prefix of a node agent's report Lease (kubefence-node-<node>). fence-node-agent
writes it (pkg/nodeagent.LeasePrefix) and no flag renames it, so it does not follow the
release: the report policy must hold the agents to the name they write.
*/}}
{{- define "kubefence.nodeAgentLeasePrefix" -}}
kubefence-node-
{{- end -}}

{{/* A remote agent's Deployment and PodDisruptionBudget, and the alert's matcher
(dict "root" $ "agent" REMOTE-AGENT). */}}
{{- define "kubefence.remoteAgentName" -}}
{{- printf "%s-agent-%s" (include "kubefence.fullname" .root) .agent.name -}}
{{- end -}}

{{/*
The host the controller dials for a remote agent (REMOTE-AGENT), NAME.NAMESPACE.svc, and
checks its serving certificate against: its Service is the agent's own name, not the
release's, because the certificate the user issued names it (values.yaml, remoteAgents).
*/}}
{{- define "kubefence.remoteAgentHost" -}}
{{- printf "%s.%s.svc" .name (required "remoteAgents[].namespace" .namespace) -}}
{{- end -}}

{{/* The ClusterRoles for people, and the on-call Role on the pause ConfigMap. */}}
{{- define "kubefence.viewRole" -}}
{{- printf "%s-view" (include "kubefence.fullname" .) -}}
{{- end -}}
{{- define "kubefence.requesterRole" -}}
{{- printf "%s-requester" (include "kubefence.fullname" .) -}}
{{- end -}}
{{- define "kubefence.onCallRole" -}}
{{- printf "%s-oncall" (include "kubefence.fullname" .) -}}
{{- end -}}
{{- define "kubefence.onCallPauseRole" -}}
{{- printf "%s-oncall-pause" (include "kubefence.fullname" .) -}}
{{- end -}}

{{/*
What asking for a fence takes: create a NodeFence in your own name (requestedByPolicy holds
you to it) and annotate it (retry). The requester's rules, and the first of on-call's.
*/}}
{{- define "kubefence.requesterRules" -}}
- apiGroups: [fencing.kubefence.io]
  resources: [nodefences]
  verbs: [get, list, watch, create, update, patch]
{{- end -}}

{{- define "kubefence.labels" -}}
app.kubernetes.io/name: {{ include "kubefence.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "kubefence.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kubefence.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: controller
{{- end -}}

{{/*
kubefence.createServiceAccount is "true" unless serviceAccount.create is false. A missing
key counts as true: `helm upgrade --reuse-values` from a chart that had no such value
renders with that chart's values, and must keep the ServiceAccount it created.
*/}}
{{- define "kubefence.createServiceAccount" -}}
{{- if or (not (hasKey .Values.serviceAccount "create")) .Values.serviceAccount.create }}true{{ end -}}
{{- end -}}

{{/*
Without serviceAccount.create the name must be given: falling back to the namespace's
"default" ServiceAccount would hand the controller's ClusterRole to every pod that uses it.
*/}}
{{- define "kubefence.serviceAccountName" -}}
{{- if include "kubefence.createServiceAccount" . -}}
{{- default (include "kubefence.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name: the existing ServiceAccount to run as, needed when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/*
kubefence.topologySpreadConstraints takes (dict "constraints" LIST "selector" LABELS) and
gives every constraint without a labelSelector one matching LABELS, the pods' own, so that
a constraint may name only its topologyKey: the scheduler spreads nothing by a constraint
without a selector.
*/}}
{{- define "kubefence.topologySpreadConstraints" -}}
{{- $out := list -}}
{{- range .constraints -}}
{{- $c := deepCopy . -}}
{{- if not (hasKey $c "labelSelector") }}{{ $_ := set $c "labelSelector" (dict "matchLabels" $.selector) }}{{ end -}}
{{- $out = append $out $c -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}

{{/* kubefence.image takes (dict "image" IMAGE-VALUES "root" $). */}}
{{- define "kubefence.image" -}}
{{- $img := merge (deepCopy (.image | default dict)) .root.Values.image -}}
{{- $tag := default .root.Chart.AppVersion $img.tag -}}
{{- $repo := $img.repository -}}
{{- if $img.registry }}{{ $repo = printf "%s/%s" $img.registry $img.repository }}{{ end -}}
{{- if $img.digest -}}
{{- printf "%s:%s@%s" $repo $tag $img.digest -}}
{{- else -}}
{{- printf "%s:%s" $repo $tag -}}
{{- end -}}
{{- end -}}

{{/* The Secrets the controller may get: every agent's credentials, nothing else. */}}
{{- define "kubefence.secretNames" -}}
{{- $names := list -}}
{{- range concat .Values.agents .Values.remoteAgents -}}
{{- if and .secret (kindIs "string" .secret) }}{{ $names = append $names .secret }}{{ end -}}
{{- end -}}
{{- $names | uniq | toJson -}}
{{- end -}}

{{/*
"true" when an agent chooses its Secret per node (secret: {template: ...} or
{annotation: ...}): the controller may then get any Secret of the release namespace, and
itself refuses one without the label fencing.kubefence.io/credentials: "true".
*/}}
{{- define "kubefence.perNodeSecrets" -}}
{{- range concat .Values.agents .Values.remoteAgents -}}
{{- if kindIs "map" .secret }}true{{ end -}}
{{- end -}}
{{- end -}}

{{/* Where the controller finds a remote agent's client certificate. */}}
{{- define "kubefence.clientTLSDir" -}}
/etc/kubefence/remote-agents/{{ . }}
{{- end -}}

{{/*
The keys of a TLS Secret that kubefence reads, listed so that a Secret without one of
them stops the pod at its mount, with the missing key in the pod's events, instead of
at the first dial.
*/}}
{{- define "kubefence.tlsItems" -}}
items:
  - {key: tls.crt, path: tls.crt}
  - {key: tls.key, path: tls.key}
  - {key: ca.crt, path: ca.crt}
{{- end -}}

{{/* kubefence.agentConfig renders one agents[] entry of the config (dict "a" AGENT "root" $). */}}
{{- define "kubefence.agentConfig" -}}
{{- $a := dict "name" .a.name "target" .a.target -}}
{{- with .a.params }}{{ $_ := set $a "params" . }}{{ end -}}
{{- with .a.timeout }}{{ $_ := set $a "timeout" . }}{{ end -}}
{{- with .a.onTimeout }}{{ $_ := set $a "onTimeout" . }}{{ end -}}
{{- with .a.offDelay }}{{ $_ := set $a "offDelay" . }}{{ end -}}
{{- with .a.secret }}
{{- if kindIs "string" . }}{{ $_ := set $a "secretRef" (dict "namespace" $.root.Release.Namespace "name" .) }}
{{- else }}{{ $_ := set $a "secretRef" (merge (dict "namespace" $.root.Release.Namespace) (pick . "template" "annotation")) }}{{ end -}}
{{- end -}}
{{- toJson $a -}}
{{- end -}}

{{/*
kubefence.config is the controller's configuration file. Local agents carry no sha256
unless pinned: kubefence-config-init computes it from the image at pod start.
*/}}
{{- define "kubefence.config" -}}
{{- $agents := list -}}
{{- range .Values.agents -}}
{{- $a := include "kubefence.agentConfig" (dict "a" . "root" $) | fromJson -}}
{{- $_ := set $a "binary" (required "agents[].binary: the file name of an agent in the image" .binary) -}}
{{- with .sha256 }}{{ $_ := set $a "sha256" . }}{{ end -}}
{{- $agents = append $agents $a -}}
{{- end -}}
{{- range .Values.remoteAgents -}}
{{- $a := include "kubefence.agentConfig" (dict "a" . "root" $) | fromJson -}}
{{- $host := include "kubefence.remoteAgentHost" . -}}
{{- $dir := include "kubefence.clientTLSDir" .name -}}
{{- $_ := set $a "address" (printf "%s:%v" $host (.port | default 9443)) -}}
{{- $_ := set $a "tls" (dict "certFile" (printf "%s/tls.crt" $dir) "keyFile" (printf "%s/tls.key" $dir) "caFile" (printf "%s/ca.crt" $dir) "serverName" $host) -}}
{{- $agents = append $agents $a -}}
{{- end -}}
{{- range .Values.networkFenceAgents -}}
{{- $a := dict "name" .name -}}
{{- with .target }}{{ $_ := set $a "target" . }}{{ end -}}
{{- with .timeout }}{{ $_ := set $a "timeout" . }}{{ end -}}
{{- with .onTimeout }}{{ $_ := set $a "onTimeout" . }}{{ end -}}
{{- with .offDelay }}{{ $_ := set $a "offDelay" . }}{{ end -}}
{{- $nf := dict -}}
{{- with .driver }}{{ $_ := set $nf "driver" . }}{{ end -}}
{{- with .className }}{{ $_ := set $nf "className" . }}{{ end -}}
{{- with .parameters }}{{ $_ := set $nf "parameters" . }}{{ end -}}
{{- with .secret }}{{ $_ := set $nf "secret" . }}{{ end -}}
{{- with .addressTypes }}{{ $_ := set $nf "addressTypes" . }}{{ end -}}
{{- $_ := set $a "networkFence" $nf -}}
{{- $agents = append $agents $a -}}
{{- end -}}
{{- /* The release namespace, where the chart's Role grants Leases, always; the name from its helper. */ -}}
{{- $le := merge (dict "namespace" .Release.Namespace "name" (include "kubefence.leaderLease" .)) (deepCopy (.Values.config.leaderElection | default dict)) -}}
{{- $cfg := dict "apiVersion" "config.kubefence.io/v1alpha1" "kind" "FenceControllerConfiguration" "pluginDir" .Values.pluginDir "leaderElection" $le "agents" $agents "policies" .Values.policies -}}
{{- with .Values.config.detection }}{{ $_ := set $cfg "detection" . }}{{ end -}}
{{- with .Values.config.history }}{{ $_ := set $cfg "history" . }}{{ end -}}
{{- /* The controller counts on the node agents' isolation: the chart's one value sets both. */ -}}
{{- $wd := merge (deepCopy (.Values.config.watchdog | default dict)) (dict "isolation" .Values.nodeAgent.isolation) -}}
{{- /* An emulated watchdog counts only where nodeAgent.watchdog.emulatedForTests says the cluster is a test. */ -}}
{{- $_ := set $wd "allowEmulated" (and .Values.nodeAgent.enabled (hasPrefix "unix:" .Values.nodeAgent.watchdog.path) .Values.nodeAgent.watchdog.emulatedForTests) -}}
{{- if not $wd.allowEmulated }}{{ $_ := unset $wd "allowEmulated" }}{{ end -}}
{{- $_ := set $cfg "watchdog" $wd -}}
{{- if .Values.heartbeats.enabled -}}
{{- if not (and .Values.nodeAgent.enabled .Values.nodeAgent.peers.enabled) }}{{ fail "heartbeats.enabled needs nodeAgent.enabled and nodeAgent.peers.enabled: the controller sits among the agents' peers" }}{{ end -}}
{{- $hb := dict "keyFile" "/etc/kubefence/peer/key" "bindAddress" (printf "0.0.0.0:%v" .Values.heartbeats.port) "kubeletTimeout" .Values.heartbeats.kubeletTimeout "kubeletCheckInterval" .Values.heartbeats.kubeletCheckInterval "leaveGrace" .Values.heartbeats.leaveGrace -}}
{{- /* The seat probes the agents as often as they probe each other. */ -}}
{{- with .Values.nodeAgent.peers.probeInterval }}{{ $_ := set $hb "probeInterval" . }}{{ end -}}
{{- $_ := set $cfg "heartbeats" $hb -}}
{{- end -}}
{{- if .Values.externalRemediation.enabled }}{{ $_ := set $cfg "externalRemediation" (dict "enabled" true) }}{{ end -}}
{{- if .Values.config.paused }}{{ $_ := set $cfg "paused" true }}{{ end -}}
{{- if .Values.config.dryRun }}{{ $_ := set $cfg "dryRun" true }}{{ end -}}
{{- toYaml $cfg -}}
{{- end -}}
