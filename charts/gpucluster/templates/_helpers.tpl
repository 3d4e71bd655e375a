{{/* Labels of a component: gpucluster.labels (dict "root" $ "component" "scheduler") */}}
{{- define "gpucluster.selector" -}}
app.kubernetes.io/name: gpucluster
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "gpucluster.labels" -}}
{{ include "gpucluster.selector" . }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
{{- end -}}

{{- define "gpucluster.metadata" -}}
name: {{ .name }}
{{- if not .cluster }}
namespace: {{ .root.Release.Namespace }}
{{- end }}
labels:
  {{- include "gpucluster.labels" . | nindent 2 }}
{{- end -}}

{{- define "gpucluster.image" -}}
{{ printf "%s:%s" .Values.image.repository .Values.image.tag }}
{{- end -}}

{{/* kube-scheduler image for the cluster's version: a published patch release when the patch is 0 */}}
{{- define "gpucluster.kubeSchedulerImage" -}}
{{- if .Values.kubeScheduler.image -}}
{{ .Values.kubeScheduler.image }}
{{- else -}}
{{- $v := semver .Capabilities.KubeVersion.Version -}}
{{- $patches := dict "35" 4 "36" 3 "37" 2 -}}
{{- $patch := $v.Patch -}}
{{- if eq (int $patch) 0 -}}{{- $patch = get $patches (toString $v.Minor) | default 0 -}}{{- end -}}
{{ printf "registry.k8s.io/kube-scheduler:v%d.%d.%d" (int $v.Major) (int $v.Minor) (int $patch) }}
{{- end -}}
{{- end -}}

{{/* kube-scheduler 1.35 and newer (Chart.yaml's kubeVersion) read only v1 */}}
{{- define "gpucluster.schedulerApiVersion" -}}
kubescheduler.config.k8s.io/v1
{{- end -}}

{{- define "gpucluster.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "gpucluster.securityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: ["ALL"]
{{- end -}}

{{- define "gpucluster.resources" -}}
requests:
  cpu: {{ .cpu }}
  memory: {{ .memory }}
limits:
  memory: {{ .limit }}
{{- end -}}

{{- define "gpucluster.probe" -}}
httpGet:
  path: {{ .path | default "/healthz" }}
  port: {{ .port }}
  {{- if .scheme }}
  scheme: {{ .scheme }}
  {{- end }}
initialDelaySeconds: {{ .initial | default 5 }}
periodSeconds: 10
{{- end -}}

{{- define "gpucluster.serviceAccount" -}}
apiVersion: v1
kind: ServiceAccount
metadata:
  {{- include "gpucluster.metadata" . | nindent 2 }}
{{- if .noToken }}
automountServiceAccountToken: false
{{- end }}
{{- end -}}

{{/* (dict "root" $ "kind" "ClusterRoleBinding" "name" N "component" C "roleKind" "ClusterRole" "role" R "sa" S "namespace" NS) */}}
{{- define "gpucluster.binding" -}}
apiVersion: rbac.authorization.k8s.io/v1
kind: {{ .kind }}
metadata:
  name: {{ .name }}
  {{- if eq .kind "RoleBinding" }}
  namespace: {{ .namespace | default .root.Release.Namespace }}
  {{- end }}
  labels:
    {{- include "gpucluster.labels" . | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: {{ .roleKind }}
  name: {{ .role }}
subjects:
  - kind: ServiceAccount
    name: {{ .sa }}
    namespace: {{ .root.Release.Namespace }}
{{- end -}}

{{- define "gpucluster.service" -}}
apiVersion: v1
kind: Service
metadata:
  {{- include "gpucluster.metadata" . | nindent 2 }}
spec:
  selector:
    {{- include "gpucluster.selector" . | nindent 4 }}
  ports:
    - name: http
      port: {{ .port }}
      targetPort: http
{{- end -}}
