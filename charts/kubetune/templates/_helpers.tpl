{{/* Labels on everything this chart creates. */}}
{{- define "kubetune.labels" -}}
app.kubernetes.io/name: kubetune
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The operator pods, as its Deployment and Service select them. */}}
{{- define "kubetune.operatorSelector" -}}
app.kubernetes.io/name: kubetune
app.kubernetes.io/component: operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
