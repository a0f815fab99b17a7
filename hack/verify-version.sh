#!/usr/bin/env bash
# Fails unless VERSION (what make build stamps into the binaries), the newest
# entry of CHANGELOG.md and the Helm chart's version and appVersion agree.
set -euo pipefail
cd "$(dirname "$0")/.."

version=$(cat VERSION)
if [[ ! $version =~ ^v([0-9]+\.[0-9]+\.[0-9]+)$ ]]; then
  echo "VERSION must look like v0.1.0, got '$version'" >&2
  exit 1
fi
bare=${BASH_REMATCH[1]}
changelog=$(sed -n 's/^## \(v[0-9][^ ]*\).*/\1/p' CHANGELOG.md | head -1)
chart_version=$(sed -n 's/^version: //p' charts/drascope/Chart.yaml)
chart_app=$(sed -n 's/^appVersion: //p' charts/drascope/Chart.yaml)
status=0
[[ $changelog == "$version" ]] || { echo "CHANGELOG.md's newest entry is '$changelog', VERSION is $version" >&2; status=1; }
[[ $chart_version == "$bare" ]] || { echo "charts/drascope/Chart.yaml version is '$chart_version', VERSION is $version (want $bare)" >&2; status=1; }
[[ $chart_app == "$version" ]] || { echo "charts/drascope/Chart.yaml appVersion is '$chart_app', VERSION is $version" >&2; status=1; }
exit $status
