{{- define "drainscope.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "drainscope.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "drainscope.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "drainscope.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: drainscope
{{- end -}}

{{- define "drainscope.selector" -}}
app.kubernetes.io/name: {{ include "drainscope.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "drainscope.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The Secret and key holding the store DSN. */}}
{{- define "drainscope.storeSecret" -}}
{{- if .Values.store.existingSecret -}}
{{- .Values.store.existingSecret -}}
{{- else -}}
{{- include "drainscope.fullname" . }}-store
{{- end -}}
{{- end -}}

{{- define "drainscope.storeKey" -}}
{{- if .Values.store.existingSecret -}}
{{- .Values.store.existingSecretKey -}}
{{- else -}}
dsn
{{- end -}}
{{- end -}}

{{- define "drainscope.serverSecret" -}}
{{- if .Values.server.existingSecret -}}
{{- .Values.server.existingSecret -}}
{{- else -}}
{{- include "drainscope.fullname" . }}-server
{{- end -}}
{{- end -}}

{{/* A value generated once and kept across upgrades: the existing Secret's
     key when the release already made it, else a new random string. */}}
{{- define "drainscope.keep" -}}
{{- $secret := lookup "v1" "Secret" .ns .name -}}
{{- if and $secret (index $secret.data .key) -}}
{{- index $secret.data .key | b64dec -}}
{{- else -}}
{{- randAlphaNum 32 -}}
{{- end -}}
{{- end -}}

{{/* The Postgres password: given, kept from an earlier release, or new.
     Stored back into .Values so that every template of one render (the
     Postgres Secret and the DSN Secret) uses the same one. */}}
{{- define "drainscope.postgresPassword" -}}
{{- if not .Values.postgres.password -}}
{{- $pw := include "drainscope.keep" (dict "ns" .Release.Namespace "name" (printf "%s-postgres" (include "drainscope.fullname" .)) "key" "password") -}}
{{- $_ := set .Values.postgres "password" $pw -}}
{{- end -}}
{{- .Values.postgres.password -}}
{{- end -}}
