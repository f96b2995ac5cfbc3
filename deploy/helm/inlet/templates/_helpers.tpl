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
{{- define "inlet.httpsDir" -}}/etc/inlet/https{{- end }}

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

{{/* The kubernetes.io/tls Secret of the HTTPS certificate; "" without
https.enabled. Refuses a certificate without its key, or none at all. */}}
{{- define "inlet.httpsSecret" -}}
{{- with .Values.https }}
{{- if .enabled }}
{{- if and .existingSecret (or .cert .key) }}
{{- fail "https: give https.existingSecret or https.cert and https.key, not both" }}
{{- else if and (not .existingSecret) (not .cert) (not .key) }}
{{- fail "https.enabled needs a certificate: https.existingSecret (a kubernetes.io/tls Secret, as cert-manager writes) or https.cert and https.key (PEM)" }}
{{- else if not .existingSecret }}
{{- if not .cert }}{{ fail "https.key without https.cert: give both (PEM), or https.existingSecret" }}{{ end }}
{{- if not .key }}{{ fail "https.cert without https.key: give both (PEM), or https.existingSecret" }}{{ end }}
{{- end }}
{{- range $name, $port := dict "containerPort" $.Values.containerPort "ops.port" (ternary $.Values.ops.port "" $.Values.ops.enabled) }}
{{- if eq (toString $port) (toString $.Values.https.port) }}
{{- fail (printf "https.port %v is %s too: give HTTPS a port of its own" $.Values.https.port $name) }}
{{- end }}
{{- end }}
{{- if eq (toString .servicePort) (toString $.Values.service.port) }}
{{- fail (printf "https.servicePort %v is service.port too: give HTTPS a port of its own on the Service" .servicePort) }}
{{- end }}
{{- .existingSecret | default (printf "%s-https" (include "inlet.fullname" $)) }}
{{- end }}
{{- end }}
{{- end }}

{{/* The label that tells the headless Service from the other, for the
ServiceMonitor's selector; only with it, so that the default rendering stays. */}}
{{- define "inlet.headlessLabels" -}}
inlet-service: headless
{{- end }}
