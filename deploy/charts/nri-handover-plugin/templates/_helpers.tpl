{{/*
The plugin's name in Kubernetes: nri-<plugin.name>, unless overridden.
*/}}
{{- define "nri-handover-plugin.name" -}}
{{- default (printf "nri-%s" .Values.plugin.name) .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name of the DaemonSet and its ServiceAccount: the release name if it
already contains the plugin's name (helm install nri-audit ...), else
<release>-<name>.
*/}}
{{- define "nri-handover-plugin.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := include "nri-handover-plugin.name" . }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "nri-handover-plugin.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "nri-handover-plugin.selectorLabels" -}}
app.kubernetes.io/name: {{ include "nri-handover-plugin.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "nri-handover-plugin.labels" -}}
{{ include "nri-handover-plugin.selectorLabels" . }}
app.kubernetes.io/part-of: nri-handover
app.kubernetes.io/component: nri-plugin
app.kubernetes.io/version: {{ include "nri-handover-plugin.imageTag" . | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ include "nri-handover-plugin.chart" . }}
{{- end }}

{{- define "nri-handover-plugin.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "nri-handover-plugin.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "nri-handover-plugin.imageTag" -}}
{{- default .Chart.AppVersion (toString .Values.image.tag) }}
{{- end }}

{{/*
Checks the values the pods cannot start with, so that a typo fails at
`helm install`/`helm upgrade` instead of as a crash-looping DaemonSet.
*/}}
{{- define "nri-handover-plugin.validate" -}}
{{- $policies := list "newest-instance" "newest-version" }}
{{- $policy := index .Values "policy" | default "" | toString }}
{{- if not (has $policy $policies) }}
{{- fail (printf "policy %q is not a handover policy: use newest-instance (the most recently started instance owns the plugin) or newest-version (an older newcomer stays standby)" $policy) }}
{{- end }}
{{- $name := toString .Values.plugin.name }}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" $name) }}
{{- fail (printf "plugin.name %q: want a lowercase DNS label such as audit (it also names the Kubernetes objects, nri-<name>)" $name) }}
{{- end }}
{{- $idx := toString .Values.plugin.index }}
{{- if not (regexMatch "^[0-9][0-9]$" $idx) }}
{{- fail (printf "plugin.index %q: want two digits as a string, e.g. \"10\" (--set-string plugin.index=05)" $idx) }}
{{- end }}
{{- if not .Values.plugin.binary }}
{{- fail "plugin.binary: name the plugin binary in the image, e.g. nri-audit" }}
{{- end }}
{{- if le (int .Values.terminationGracePeriodSeconds) 10 }}
{{- fail (printf "terminationGracePeriodSeconds %v: must exceed the 10 s a stopping owner waits for a standby to take over (30 recommended)" .Values.terminationGracePeriodSeconds) }}
{{- end }}
{{- $dirs := dict "handoverDir" .Values.handoverDir "nriSocketDir" .Values.nriSocketDir }}
{{- if .Values.ledger.enabled }}
{{- $_ := set $dirs "ledger.hostDir" .Values.ledger.hostDir }}
{{- end }}
{{- range $key, $dir := $dirs }}
{{- if not (and $dir (isAbs (toString $dir))) }}
{{- fail (printf "%s %q: want an absolute path on the node" $key (toString $dir)) }}
{{- end }}
{{- end }}
{{- if and .Values.metrics.enabled (or (lt (int .Values.metrics.port) 1) (gt (int .Values.metrics.port) 65535)) }}
{{- fail (printf "metrics.port %v: want 1-65535" .Values.metrics.port) }}
{{- end }}
{{- end }}
