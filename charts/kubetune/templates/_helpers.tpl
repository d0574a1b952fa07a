{{/*
Names: the release's, so that two releases (or a release beside the plain `kubectl apply` objects
of rbac/) never claim the same object. A release named "kubetune" gets the plain files' names.
*/}}
{{- define "kubetune.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 54 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 54 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The operator's Deployment, ServiceAccount, RBAC, Service and leader-election Lease. */}}
{{- define "kubetune.operatorName" -}}
{{- printf "%s-operator" (include "kubetune.fullname" .) -}}
{{- end -}}

{{/* Labels on everything this chart creates. */}}
{{- define "kubetune.labels" -}}
app.kubernetes.io/name: kubetune
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The operator pods, as its Deployment and Service select them (a subset of their labels). */}}
{{- define "kubetune.operatorSelector" -}}
app.kubernetes.io/name: kubetune
app.kubernetes.io/component: operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
