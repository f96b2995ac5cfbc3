{{/* The chart's name, and the name of its objects. */}}
{{- define "inlet.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "inlet.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "inlet.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "inlet.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "inlet.selectorLabels" -}}
app.kubernetes.io/name: {{ include "inlet.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Where the pod keeps its files. */}}
{{- define "inlet.dataDir" -}}/var/lib/inlet{{- end }}
{{- define "inlet.kafkaTLSDir" -}}/etc/inlet/kafka-tls{{- end }}
{{- define "inlet.authDir" -}}/etc/inlet/auth{{- end }}

{{/* A whole number of seconds from values (name, value), or fail. */}}
{{- define "inlet.seconds" -}}
{{- $v := toString (index . 1) }}
{{- if not (regexMatch "^[0-9]+$" $v) }}
{{- fail (printf "%s must be a whole number of seconds, not %q" (index . 0) $v) }}
{{- end }}
{{- $v }}
{{- end }}

{{- define "inlet.shutdownDelay" -}}{{ include "inlet.seconds" (list "shutdown.delaySeconds" .Values.shutdown.delaySeconds) }}{{- end }}
{{- define "inlet.shutdownTimeout" -}}{{ include "inlet.seconds" (list "shutdown.timeoutSeconds" .Values.shutdown.timeoutSeconds) }}{{- end }}
{{/* Kubernetes kills the pod only after inlet's own stop is over. */}}
{{- define "inlet.terminationGracePeriod" -}}
{{- add (include "inlet.shutdownDelay" .) (include "inlet.shutdownTimeout" .) (include "inlet.seconds" (list "shutdown.marginSeconds" .Values.shutdown.marginSeconds)) }}
{{- end }}

{{/* The Secret of the SASL password and its key; "" without a password. */}}
{{- define "inlet.saslSecret" -}}
{{- with .Values.kafka.sasl }}
{{- if .existingSecret }}{{ .existingSecret }}{{ else if .password }}{{ include "inlet.fullname" $ }}-kafka-sasl{{ end }}
{{- end }}
{{- end }}
{{- define "inlet.saslSecretKey" -}}
{{- if .Values.kafka.sasl.existingSecret }}{{ .Values.kafka.sasl.existingSecretKey }}{{ else }}password{{ end }}
{{- end }}

{{/* The Secret of the Kafka TLS files; "" without TLS files. */}}
{{- define "inlet.tlsSecret" -}}
{{- with .Values.kafka.tls }}
{{- if and .enabled .existingSecret }}{{ .existingSecret }}{{ else if and .enabled (or .ca .cert .key) }}{{ include "inlet.fullname" $ }}-kafka-tls{{ end }}
{{- end }}
{{- end }}
{{/* The key of one Kafka TLS file (list $ "ca"|"cert"|"key") in that Secret, or "". */}}
{{- define "inlet.tlsKey" -}}
{{- $ := index . 0 }}{{ $f := index . 1 }}
{{- with $.Values.kafka.tls }}
{{- if .existingSecret }}{{ index .existingSecretKeys $f }}{{ else if index . $f }}{{ index (dict "ca" "ca.crt" "cert" "tls.crt" "key" "tls.key") $f }}{{ end }}
{{- end }}
{{- end }}

{{/* The Secret of the clients file and token key; "" without them. */}}
{{- define "inlet.authSecret" -}}
{{- with .Values.auth }}
{{- if .existingSecret }}{{ .existingSecret }}{{ else if or .clients .tokenKey }}{{ include "inlet.fullname" $ }}-auth{{ end }}
{{- end }}
{{- end }}
{{- define "inlet.authKey" -}}
{{- $ := index . 0 }}{{ $f := index . 1 }}
{{- with $.Values.auth }}
{{- if .existingSecret }}{{ index .existingSecretKeys $f }}{{ else if index . $f }}{{ index (dict "clients" "clients.json" "tokenKey" "token.key") $f }}{{ end }}
{{- end }}
{{- end }}
