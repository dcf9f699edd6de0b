{{/* Names and labels shared by every template. */}}

{{- define "errand.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "errand.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "errand.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "errand.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "errand.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "errand.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "errand.selectorLabels" -}}
app.kubernetes.io/name: {{ include "errand.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "errand.serviceAccountName" -}}
{{- default (include "errand.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{- define "errand.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* Names of cluster-scoped objects: the release namespace keeps two installs apart. */}}
{{- define "errand.webhookConfigurationName" -}}
{{- printf "%s-%s" (include "errand.fullname" .) .Release.Namespace | trunc 253 -}}
{{- end -}}

{{/* The Secret the replicas share the self-signed serving certificate of the webhook and the
data API through. */}}
{{- define "errand.servingSecretName" -}}
{{- printf "%s-serving-tls" (include "errand.fullname" .) -}}
{{- end -}}

{{/* cert-manager's Certificate (and its Issuer, unless one is given) of the serving certificate
of the webhook and the data API, and the Secret cert-manager keeps it in. */}}
{{- define "errand.servingCertificateName" -}}
{{- printf "%s-serving" (include "errand.fullname" .) -}}
{{- end -}}

{{/* The data API's APIService: its name is fixed by its group and version, so one release
per cluster serves it. */}}
{{- define "errand.apiServiceName" -}}v1alpha1.data.errand.dev{{- end -}}

{{- define "errand.signingKeySecretName" -}}
{{- default (printf "%s-signing-key" (include "errand.fullname" .)) .Values.signingKey.existingSecret -}}
{{- end -}}

{{- define "errand.storeClaimName" -}}
{{- default (printf "%s-store" (include "errand.fullname" .)) .Values.store.persistence.existingClaim -}}
{{- end -}}

{{/* Where a file:// store lives in the controller's container. */}}
{{- define "errand.storePath" -}}/var/lib/errand/store{{- end -}}

{{- define "errand.storeUrl" -}}
{{- default (printf "file://%s" (include "errand.storePath" .)) .Values.store.url -}}
{{- end -}}

{{/* Whether the store is a file:// directory on the controller's volume. */}}
{{- define "errand.fileStore" -}}
{{- if hasPrefix "file://" (include "errand.storeUrl" .) -}}true{{- end -}}
{{- end -}}

{{- define "errand.blobUrl" -}}
{{- default (printf "http://%s.%s.svc:%d" (include "errand.fullname" .) .Release.Namespace (int .Values.service.httpPort)) .Values.controller.blobUrl -}}
{{- end -}}

{{/* The restricted Pod Security Standard, for every container of the chart. */}}
{{- define "errand.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "errand.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* The test pod's errand CLI: the cluster backend, a writable HOME, and the controller's
extra environment (for example where the API server is). */}}
{{- define "errand.testEnv" -}}
- name: ERRAND_BACKEND
  value: cluster
- name: HOME
  value: /tmp
{{- with .Values.controller.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- /* The namespaces the controller serves, comma-separated and sorted (empty: all of them):
controller.watchNamespaces and controller.watchNamespace together. */ -}}
{{- define "errand.watchNamespaces" -}}
{{- $names := .Values.controller.watchNamespaces | default list -}}
{{- with .Values.controller.watchNamespace }}{{ $names = append $names . }}{{ end -}}
{{- $names | uniq | sortAlpha | join "," -}}
{{- end -}}
