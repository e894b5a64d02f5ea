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

{{/* repository:tag, or repository@digest when image.digest is set (a
     tag can be moved; a digest names one image). */}}
{{- define "drainscope.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{- define "drainscope.postgresImage" -}}
{{- if .Values.postgres.image.digest -}}
{{ .Values.postgres.image.repository }}@{{ .Values.postgres.image.digest }}
{{- else -}}
{{ .Values.postgres.image.repository }}:{{ .Values.postgres.image.tag }}
{{- end -}}
{{- end -}}

{{/* Whether the chart runs the bundled Postgres with a role each for the
     agents and the server (made by the migrate Job), rather than one DSN
     given for both. */}}
{{- define "drainscope.bundledRoles" -}}
{{- if and .Values.postgres.enabled (not .Values.store.existingSecret) (not .Values.store.dsn) -}}
true
{{- end -}}
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

{{/* The key of the store Secret each component's DSN is under: with the
     bundled Postgres each has its own role; an existing Secret may hold a
     DSN per component (store.agentSecretKey, store.serverSecretKey). */}}
{{- define "drainscope.agentStoreKey" -}}
{{- if and (include "drainscope.bundledRoles" .) (not .Values.server.enabled) -}}
{{- /* No server to prune: the agents do (--retention), as the role that may. */ -}}
server-dsn
{{- else if include "drainscope.bundledRoles" . -}}
agent-dsn
{{- else if and .Values.store.existingSecret .Values.store.agentSecretKey -}}
{{- .Values.store.agentSecretKey -}}
{{- else -}}
{{- include "drainscope.storeKey" . -}}
{{- end -}}
{{- end -}}

{{- define "drainscope.serverStoreKey" -}}
{{- if include "drainscope.bundledRoles" . -}}
server-dsn
{{- else if and .Values.store.existingSecret .Values.store.serverSecretKey -}}
{{- .Values.store.serverSecretKey -}}
{{- else -}}
{{- include "drainscope.storeKey" . -}}
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
{{- if lt (len .Values.postgres.password) 32 -}}
{{- fail "postgres.password must be at least 32 characters (leave it empty to have one generated)" -}}
{{- end -}}
{{- .Values.postgres.password -}}
{{- end -}}

{{/* The passwords of the bundled Postgres's agent and server roles:
     generated once and kept, like the owner's. */}}
{{- define "drainscope.rolePassword" -}}
{{- $key := printf "%s-password" .role -}}
{{- $cache := .root.Values.postgres -}}
{{- if not (hasKey $cache $key) -}}
{{- $pw := include "drainscope.keep" (dict "ns" .root.Release.Namespace "name" (printf "%s-postgres" (include "drainscope.fullname" .root)) "key" $key) -}}
{{- $_ := set $cache $key $pw -}}
{{- end -}}
{{- index $cache $key -}}
{{- end -}}


{{/* The server Secret's key of the ingest token: server.ingestTokenKey, or
     when the chart makes the Secret, ingest-token (generated). With an
     existing Secret and no key, ingest is off. */}}
{{- define "drainscope.ingestTokenKey" -}}
{{- if and .Values.server.ingestTokenKey (eq .Values.server.ingestTokenKey .Values.server.authTokenKey) -}}
{{- fail "server.ingestTokenKey must name a token of its own, not server.authTokenKey's: the server refuses an ingest token equal to the UI's" -}}
{{- end -}}
{{- if .Values.server.ingestTokenKey -}}
{{- .Values.server.ingestTokenKey -}}
{{- else if not .Values.server.existingSecret -}}
ingest-token
{{- end -}}
{{- end -}}

{{/* The Secret holding the certificate of the agents' TLS port
     (server.agentTLS): tls.crt, tls.key and ca.crt. */}}
{{- define "drainscope.agentTLSSecret" -}}
{{- .Values.server.agentTLS.existingSecret | default (printf "%s-agent-tls" (include "drainscope.fullname" .)) -}}
{{- end -}}

{{/* The names the server's certificate is for: its Service's. */}}
{{- define "drainscope.serverDNSNames" -}}
{{- $svc := printf "%s-server" (include "drainscope.fullname" .) -}}
{{- list $svc (printf "%s.%s" $svc .Release.Namespace) (printf "%s.%s.svc" $svc .Release.Namespace) (printf "%s.%s.svc.cluster.local" $svc .Release.Namespace) | toJson -}}
{{- end -}}
