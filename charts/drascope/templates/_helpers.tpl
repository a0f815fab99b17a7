{{/*
drascope.manifest returns a file of manifests/ (charts/drascope/files/manifests
is a link to it), so that the chart and kustomize render the same objects.
*/}}
{{- define "drascope.manifest" -}}
{{- $content := .root.Files.Get (printf "files/manifests/%s" .path) -}}
{{- if not $content -}}
{{- fail (printf "charts/drascope: manifests/%s is missing from the chart (is files/manifests a link to manifests/?)" .path) -}}
{{- end -}}
{{- $content -}}
{{- end -}}

{{/*
drascope.configFile is the shipped scheduler config of the chosen mode.
*/}}
{{- define "drascope.configFile" -}}
{{- if eq .Values.mode "secondScheduler" -}}
scheduler/config.yaml
{{- else if eq .Values.mode "replaceKubeScheduler" -}}
scheduler/config-two-profiles.yaml
{{- else -}}
{{- fail (printf "mode: %q is not supported: use secondScheduler or replaceKubeScheduler" .Values.mode) -}}
{{- end -}}
{{- end -}}

{{/*
drascope.config is the scheduler config: the shipped file of the mode, as
it is when no plugin value is set, otherwise with those values in the
DRAScope args of every profile that runs DRAScope.
*/}}
{{- define "drascope.config" -}}
{{- $file := include "drascope.manifest" (dict "root" . "path" (include "drascope.configFile" .)) -}}
{{- $plugin := .Values.plugin -}}
{{- if and (kindIs "invalid" $plugin.publishResourcePools) (kindIs "invalid" $plugin.scoringStrategy) (kindIs "invalid" $plugin.deviceChoice) (kindIs "invalid" $plugin.deviceHealthPolicy) -}}
{{- $file -}}
{{- else -}}
{{- $config := $file | fromYaml -}}
{{- range $profile := $config.profiles -}}
{{- range $entry := $profile.pluginConfig -}}
{{- if eq $entry.name "DRAScope" -}}
{{- $args := $entry.args | default dict -}}
{{- /* set, not merge: sprig's merge fills a false or empty value from the shipped one. */ -}}
{{- if not (kindIs "invalid" $plugin.publishResourcePools) -}}
{{- $poolStatus := $args.poolStatus | default dict -}}
{{- $_ := set $poolStatus "publishResourcePools" $plugin.publishResourcePools -}}
{{- $_ := set $args "poolStatus" $poolStatus -}}
{{- end -}}
{{- if not (kindIs "invalid" $plugin.scoringStrategy) -}}
{{- $scoring := $args.scoring | default dict -}}
{{- $_ := set $scoring "strategy" $plugin.scoringStrategy -}}
{{- $_ := set $args "scoring" $scoring -}}
{{- end -}}
{{- if not (kindIs "invalid" $plugin.deviceChoice) -}}
{{- $_ := set $args "deviceChoice" $plugin.deviceChoice -}}
{{- end -}}
{{- if not (kindIs "invalid" $plugin.deviceHealthPolicy) -}}
{{- $deviceHealth := $args.deviceHealth | default dict -}}
{{- $_ := set $deviceHealth "policy" $plugin.deviceHealthPolicy -}}
{{- $_ := set $args "deviceHealth" $deviceHealth -}}
{{- end -}}
{{- $_ := set $entry "args" $args -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- toYaml $config -}}
{{- end -}}
{{- end -}}
